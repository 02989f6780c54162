"""The guard pages (``guard/index.html``, `GUARD_PER_PAGE` rows each): the pairs the number
and unit guard kept apart."""

from __future__ import annotations

from collections import defaultdict

from near_dedup_core.site import views
from near_dedup_core.site.model import SiteData
from near_dedup_core.site.render import Writer

GUARD_PER_PAGE = 50


def write(w: Writer, data: SiteData, rows: list[dict]) -> None:
    blocked = data.relations.blocked
    total = views.pages(len(rows), GUARD_PER_PAGE)
    by_rule: dict[str, int] = defaultdict(int)
    for r in blocked:
        if r.blocked_by is not None:
            by_rule[r.blocked_by] += 1
    history = sum(1 for r in blocked if r.history_only)
    rules = sorted(by_rule.items())
    for p in range(1, total + 1):
        w.page("guard/index.html" if p == 1 else f"guard/page-{p}.html", "guard.html",
               title="Guard", rows=rows[(p - 1) * GUARD_PER_PAGE:p * GUARD_PER_PAGE],
               page=p, pages=total, blocked=len(blocked), shown=len(rows),
               history=history, by_rule=rules, cluster_of=data.relations.cluster_of,
               clusters=data.relations.clusters)
