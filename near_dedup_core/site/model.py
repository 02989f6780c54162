"""What the site shows, read from a verified report and its input packages (never the index).

The report is verified first (`report.verify_report`); its decisions come back from the
verifier as one small record per sample. Then:

Every file is read through its typed rows (`report.relation_rows`, `report.decision_rows`,
`report.origin_rows`).

1. ``relations.jsonl``, once: each sample's relations as `report explain` lists them
   (``listed_as`` sample/match), the connected groups of pool relations (*clusters*,
   union-find over the samples; history-only relations join nothing), the guard-blocked
   pairs, and the exact Jaccard of the near relations for the histogram;
2. ``decisions.jsonl`` with ``origins.jsonl``, streamed (`report_rows`): the per-sample
   records of the search data, with `report explain`'s ``why`` and each partner's own
   decision, written shard by shard by the caller;
3. the input packages: every sample's domain (`audit.sources.sample_domains`, one pass, as
   the exclusion-rate check reads them) and the texts of a bounded set of samples
   (`audit.sources.read_samples`): the excluded members of the clusters that get a page of
   their own, their kept partners, and the guard-blocked pairs shown with their numbers.

Counts by split, domain and package are `audit.rates.count_report`'s, over the domains read
once; the findings are `audit.rates.rate_problems`; text diffs are `audit.textdiff.changed_spans`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from near_dedup_core.audit.sources import Domains, InputPackage, Key, SampleText
from near_dedup_core.report import (
    DecisionRow,
    OriginRow,
    RelationRow,
    ReportManifest,
    ReportSummary,
    decision_rows,
    origin_rows,
    relation_rows,
)

#: Clusters that get a page of their own (largest first), besides the largest few per source.
CLUSTER_PAGES = 400
#: Largest clusters of each package and domain that get a page too.
CLUSTERS_PER_SOURCE = 5
#: Members listed on a cluster page (a larger cluster lists its first ones, by decision order).
CLUSTER_MEMBERS = 200
#: Excluded samples whose text diff against the kept partner is computed (in cluster order):
#: a character diff of two long texts with scattered edits costs milliseconds each.
MAX_DIFFS = 600
#: Guard-blocked pool pairs shown with both texts and their numbers highlighted.
MAX_GUARD_TEXTS = 600
#: Pairwise Jaccard is shown as a matrix for clusters of at most this many members.
MATRIX_MEMBERS = 12


def rel_ref(ref: dict) -> Key | None:
    """The (package_id, sample_id) of a relation's partner as listed (None: history)."""
    if ref.get("package_id") is None:
        return None
    return (ref["package_id"], ref["sample_id"])


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Key, Key] = {}

    def find(self, x: Key) -> Key:
        parent = self.parent
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while x != root:
            nxt = parent.get(x, x)
            parent[x] = root
            x = nxt
        return root

    def union(self, a: Key, b: Key) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra
            self.parent.setdefault(ra, ra)


@dataclass
class Edge:
    """One pool relation between two samples: ``a`` matched the earlier ``b``."""

    a: Key
    b: Key
    kind: str
    jaccard: float
    blocked_by: str | None


@dataclass
class Cluster:
    number: int
    members: list[Key]
    edges: list[Edge]
    page: bool = False

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass
class Relations:
    """What one pass over relations.jsonl gives."""

    by_sample: dict[Key, list[dict]]
    clusters: list[Cluster]
    cluster_of: dict[Key, int]
    blocked: list[RelationRow]  # every guard-blocked relation of relations.jsonl
    near_jaccards: list[float]  # near relations not blocked by the guard (the manifest's)
    total: int = 0
    history_only: int = 0


def read_relations(report: Path, order: dict[Key, int]) -> Relations:
    """Relations by sample, clusters largest first (ties: earliest member in decision order).

    A sample's relations are listed in relations.jsonl order, as `report explain` lists them
    (its ``why`` reads them in that order)."""
    by_sample: dict[Key, list[dict]] = defaultdict(list)
    uf = _UnionFind()
    edges: list[Edge] = []
    blocked: list[RelationRow] = []
    near: list[float] = []
    total = hist = 0
    for _, r in relation_rows(report):
        total += 1
        s = r.sample.key
        m = r.match.key
        common = {"kind": r.kind, "jaccard": r.jaccard, "history_only": r.history_only,
                  "blocked_by": r.blocked_by,
                  "match_sources": [x.model_dump() for x in r.match_sources]}
        by_sample[s].append({"listed_as": "sample", "partner": r.match.model_dump(), **common})
        if m is not None:
            by_sample[m].append({"listed_as": "match",
                                 "partner": {"content_id": None, "package_id": s[0],
                                             "sample_id": s[1]}, **common})
            uf.union(s, m)
            edges.append(Edge(s, m, r.kind, r.jaccard, r.blocked_by))
        if r.history_only:
            hist += 1
        if r.blocked_by is not None:
            blocked.append(r)
        if r.kind == "near" and r.blocked_by is None:
            near.append(r.jaccard)
    groups: dict[Key, list[Key]] = defaultdict(list)
    for key in uf.parent:
        groups[uf.find(key)].append(key)
    grouped_edges: dict[Key, list[Edge]] = defaultdict(list)
    for e in edges:
        grouped_edges[uf.find(e.a)].append(e)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]),
                                                   min(order.get(k, 0) for k in kv[1])))
    clusters: list[Cluster] = []
    cluster_of: dict[Key, int] = {}
    for n, (root, members) in enumerate(ranked, 1):
        members.sort(key=lambda k: order.get(k, 0))
        es = grouped_edges[root]
        es.sort(key=lambda e: (order.get(e.a, 0), order.get(e.b, 0)))
        clusters.append(Cluster(n, members, es))
        for k in members:
            cluster_of[k] = n
    return Relations(dict(by_sample), clusters, cluster_of, blocked, near, total, hist)


@dataclass
class SiteData:
    """Everything the pages are rendered from."""

    report: Path
    manifest: ReportManifest
    summary: ReportSummary
    inputs: dict[str, InputPackage]
    domains: Domains
    relations: Relations
    order: dict[Key, int]
    texts: dict[Key, SampleText] = field(default_factory=dict)

    def decision(self, key: Key):
        return self.summary.samples.get(key)

    def domain(self, key: Key) -> str | None:
        return self.domains.of(key)


def decision_order(summary: ReportSummary) -> dict[Key, int]:
    """Each sample's line in decisions.jsonl (the verifier's record keeps it)."""
    return {k: d.line for k, d in summary.samples.items()}


def excluded_by(summary: ReportSummary) -> dict[Key, list[Key]]:
    """Kept sample → the samples excluded in its favour, in decision order."""
    out: dict[Key, list[Key]] = defaultdict(list)
    for k, d in summary.samples.items():
        if d.kept is not None:
            out[d.kept].append(k)
    return dict(out)


def content_ids(report: Path, wanted: set[Key]) -> dict[Key, str]:
    """content_id of these samples (the partners of ``listed_as: match`` relations)."""
    out: dict[Key, str] = {}
    if not wanted:
        return out
    for _, d in decision_rows(report):
        if d.key in wanted:
            out[d.key] = d.content_id
    return out


def report_rows(report: Path) -> Iterator[tuple[DecisionRow, OriginRow]]:
    """(decision, origin) of every sample, line by line (a verified report aligns them)."""
    return zip((d for _, d in decision_rows(report)), (o for _, o in origin_rows(report)),
               strict=True)
