"""The per-source pages (``sources/index.html``): one page per input package and per domain,
with its tally, its largest clusters and the first `SOURCE_EXCLUSIONS` samples it lost."""

from __future__ import annotations

from collections import defaultdict

from near_dedup_core.audit.rates import ReportCounts, Tally
from near_dedup_core.site import views
from near_dedup_core.site.model import Cluster, SiteData
from near_dedup_core.site.render import Writer

#: Excluded samples listed per source page.
SOURCE_EXCLUSIONS = 50


def write(w: Writer, data: SiteData, counts: ReportCounts) -> None:
    tables: dict[str, dict[str | None, Tally]] = {
        "package": {k: v for k, v in counts.by_package.items()},
        "domain": dict(counts.by_domain)}
    groups: dict[tuple[str, str | None], list] = {}
    for kind, table in tables.items():
        for name in sorted(table, key=lambda n: (n is None, n or "")):
            groups[(kind, name)] = []
    top: dict[tuple[str, str | None], list[Cluster]] = defaultdict(list)
    for c in data.relations.clusters:
        for s in {("package", k[0]) for k in c.members} | \
                {("domain", data.domain(k)) for k in c.members}:
            if len(top[s]) < 10:
                top[s].append(c)
    excluded: dict[tuple[str, str | None], list] = defaultdict(list)
    for k, d in data.summary.samples.items():
        if d.decision != "exclude":
            continue
        for s in (("package", k[0]), ("domain", data.domain(k))):
            if len(excluded[s]) < SOURCE_EXCLUSIONS:
                excluded[s].append((k, d))
    files = {}
    for i, (kind, name) in enumerate(groups, 1):
        files[(kind, name)] = f"{kind}-{i}.html"
    rows = {kind: [(name, table[name], files[(kind, name)])
                   for (k2, name) in groups if k2 == kind]
            for kind, table in tables.items()}
    w.page("sources/index.html", "sources.html", title="Per source", rows=rows,
           charts={kind: views.bar_chart([("(unknown)" if n is None else str(n), t.keep,
                                           t.exclude) for n, t, _ in r])
                   for kind, r in rows.items()})
    for (kind, name), fname in files.items():
        w.page(f"sources/{fname}", "source.html", title=f"{kind} {name}", kind=kind,
               name=name, tally=tables[kind][name],
               clusters=top[(kind, name)], excluded=excluded[(kind, name)],
               limit=SOURCE_EXCLUSIONS, data=data)
