"""The diff pages: every excluded sample not listed on its cluster's own page, side by side
with its kept partner (`selection.diff_items`), `model.DIFFS_PER_PAGE` per page, written by
tasks on the build's pool while the main process writes the other pages."""

from __future__ import annotations

from concurrent.futures import Executor, Future
from pathlib import Path

from near_dedup_core.audit.sources import InputPackage, Key, read_samples
from near_dedup_core.site import model, selection, views
from near_dedup_core.site.model import SiteData
from near_dedup_core.site.render import Writer
from near_dedup_core.site.selection import DiffItem

#: Diffs per task of the diff pages (each task reads the texts it shows from the packages).
DIFF_TASK = 30_000


def page_of(p: int) -> str:
    """The file of diff page ``p`` (1-based)."""
    return "diffs/index.html" if p == 1 else f"diffs/page-{p}.html"


def submit(out: Path, data: SiteData, base: dict, items: list[DiffItem],
           pool: Executor) -> tuple[dict[Key, str], list[Future]]:
    """The diff pages of ``items`` (`model.DIFFS_PER_PAGE` each), written by tasks on
    ``pool`` of `DIFF_TASK` diffs at most (each reads the texts it shows); returns where each
    sample's diff is (page and anchor) and the tasks."""
    per = model.DIFFS_PER_PAGE
    pages = [items[i:i + per] for i in range(0, len(items), per)] or [[]]
    where_ = {it.sample: f"{page_of(p)}#{views.anchor(it.sample)}"
              for p, chunk in enumerate(pages, 1) for it in chunk}
    step = max(1, DIFF_TASK // per)
    samples = data.summary.samples
    tasks = []
    for first in range(0, len(pages), step):
        chunk = pages[first:first + step]
        lines = {samples[k].line: k for page in chunk for it in page
                 for k in (it.sample, it.kept) if k in samples}
        tasks.append(pool.submit(write_part, data.report, data.inputs, base, out, first + 1,
                                 len(pages), len(items), per, chunk, lines))
    return where_, tasks


def write_part(report: Path, inputs: dict[str, InputPackage], base: dict, out: Path,
               first: int, pages: int, total: int, per_page: int, chunk: list[list[DiffItem]],
               lines: dict[int, Key]) -> tuple[dict[str, str], int]:
    """Diff pages ``first`` to ``first + len(chunk) - 1``: the texts of their samples read
    from the packages (located through origins.jsonl), each excluded sample's diff against
    its kept partner (`selection.diff_of`); returns the files' digests and the number of
    diffs computed. Runs in a worker process for a large report."""
    texts = read_samples(report, inputs, model.locate_lines(report, lines))
    w = Writer(out, base)
    computed = 0
    for p, page in enumerate(chunk, first):
        rows = []
        for it in page:
            diff = selection.diff_of(it.sample, it.kept, texts)
            computed += diff is not None
            rows.append({"key": it.sample, "kept": it.kept, "reason": it.reason,
                         "jaccard": it.jaccard, "diff": diff, "cluster": it.cluster,
                         "cluster_page": it.cluster_page})
        w.page(page_of(p), "diffs.html", title="Excluded samples against their kept "
               "partners", items=rows, page=p, pages=pages, total=total,
               per_page=per_page)
    return w.digests, computed
