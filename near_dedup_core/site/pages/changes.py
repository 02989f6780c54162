"""The changes pages (``changes/index.html``, with ``report html --against``): `report diff`
of the previous report and this one, its lists `CHANGES_PER_PAGE` items a page."""

from __future__ import annotations

from pathlib import Path

from near_dedup_core.audit.diff import CHANGES, CONTENT_LISTS, LISTS, ReportDiff
from near_dedup_core.site import views
from near_dedup_core.site.render import Writer

CHANGES_PER_PAGE = 500


def write(w: Writer, diff: ReportDiff, old: Path) -> None:
    lists = {}
    for name in LISTS:
        items = diff.lists[name]
        total = views.pages(len(items), CHANGES_PER_PAGE)
        lists[name] = {"count": len(items), "pages": total}
        for p in range(2, total + 1):
            w.page(f"changes/{name}-{p}.html", "change_list.html", title=name.replace("_", " "),
                   name=name, items=items[(p - 1) * CHANGES_PER_PAGE:p * CHANGES_PER_PAGE],
                   page=p, pages=total)
    contents = {}
    for name in CONTENT_LISTS:  # the contents matched across the two days (report diff)
        items = diff.contents[name]
        total = views.pages(len(items), CHANGES_PER_PAGE)
        contents[name] = {"count": len(items), "pages": total}
        for p in range(2, total + 1):
            w.page(f"changes/contents-{name}-{p}.html", "contents_list.html",
                   title=f"{name.replace('_', ' ')} contents", name=name,
                   items=items[(p - 1) * CHANGES_PER_PAGE:p * CHANGES_PER_PAGE],
                   page=p, pages=total)
    w.page("changes/index.html", "changes.html", title="Changes", d=diff, old_name=old.name,
           lists=lists, first={n: diff.lists[n][:CHANGES_PER_PAGE] for n in LISTS},
           list_names=LISTS, change_names=CHANGES, contents=contents,
           contents_first={n: diff.contents[n][:CHANGES_PER_PAGE] for n in CONTENT_LISTS},
           content_names=CONTENT_LISTS)
