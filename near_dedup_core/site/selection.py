"""What the site shows of a large report: the clusters that get a page of their own, every
excluded sample's text diff against its kept partner (on its cluster's page or on the diff
pages), and the guard-blocked pairs shown with both texts' numbers and units (`site.model`
holds the caps)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from near_dedup_core.audit.sources import Key, SampleText
from near_dedup_core.audit.textdiff import changed_spans, merge_close
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.guard import guard_for
from near_dedup_core.report import RelationRow
from near_dedup_core.site import model, views
from near_dedup_core.site.model import Cluster, SiteData


def choose_cluster_pages(data: SiteData) -> None:
    """The largest clusters get a page, and the largest few of every package and domain."""
    per_source: dict[tuple[str, object], int] = defaultdict(int)
    for c in data.relations.clusters:
        sources = {("package", k[0]) for k in c.members} | \
            {("domain", data.domain(k)) for k in c.members}
        wanted = [s for s in sources if per_source[s] < model.CLUSTERS_PER_SOURCE]
        if c.number <= model.CLUSTER_PAGES or wanted:
            c.page = True
            for s in sources:
                per_source[s] += 1


@dataclass
class DiffItem:
    """An excluded sample shown side by side with its kept partner."""

    sample: Key
    kept: Key
    reason: str
    jaccard: float | None
    cluster: int | None  # its cluster's number (None: in no cluster)
    cluster_page: bool  # whether that cluster has a page of its own


def diff_items(data: SiteData) -> tuple[list[DiffItem], list[DiffItem]]:
    """Every excluded sample with its kept partner, in cluster order (members in decision
    order; an excluded sample in no cluster last, in decision order): those listed on their
    cluster's own page (the first `model.CLUSTER_MEMBERS` members of a cluster with a page),
    whose diffs that page shows, and all the others, shown on the diff pages."""
    inline: list[DiffItem] = []
    paged: list[DiffItem] = []
    seen: set[Key] = set()

    def add(k: Key, c: Cluster | None, listed: bool) -> None:
        d = data.decision(k)
        if d is None or d.kept is None:
            return
        item = DiffItem(k, d.kept, d.reason, d.jaccard, None if c is None else c.number,
                        c is not None and c.page)
        (inline if listed else paged).append(item)
        seen.add(k)

    for c in data.relations.clusters:
        for i, k in enumerate(c.members):
            add(k, c, c.page and i < model.CLUSTER_MEMBERS)
    for k, d in data.summary.samples.items():
        if d.kept is not None and k not in seen:
            add(k, None, False)
    return inline, paged


def diff_of(sample: Key, kept: Key, texts: dict[Key, SampleText]) -> dict | None:
    """The side-by-side diff of an excluded sample against its kept partner (None when a
    text is not available): `audit.textdiff.changed_spans` of the normalized texts, as
    `report explain` computes it."""
    a, b = texts.get(kept), texts.get(sample)
    if a is None or b is None:
        return None
    spans = changed_spans(a.normalized, b.normalized)
    left, right = views.diff_segments(a.normalized, b.normalized,
                                      merge_close(a.normalized, b.normalized, spans))
    return {"partner": kept, "spans": spans, "left": left, "right": right,
            "lines": views.span_lines(a.normalized, b.normalized, spans)}


def diffs(items: list[DiffItem], texts: dict[Key, SampleText]) -> dict[Key, dict]:
    out = {}
    for it in items:
        diff = diff_of(it.sample, it.kept, texts)
        if diff is not None:
            out[it.sample] = diff
    return out


def guard_rows(pairs: list[RelationRow], texts: dict[Key, SampleText],
                config: NearDedupConfig, data: SiteData) -> list[dict]:
    """Guard-blocked pool pairs with both texts' numbers and units, the differing ones marked."""
    rows = []
    for r in pairs:
        s, m = r.sample.key, r.match.key
        ts, tm = texts.get(s), (texts.get(m) if m is not None else None)
        row: dict[str, object] = {"sample": s, "match": m, "jaccard": r.jaccard,
                                  "blocked_by": r.blocked_by, "kind": r.kind,
                                  "available": ts is not None and tm is not None}
        if ts is not None and tm is not None and m is not None:
            doms = frozenset(x for x in (data.domain(s), data.domain(m)) if x)
            guard = guard_for(config, doms)
            tok_s, tok_m = guard.tokens(ts.normalized), guard.tokens(tm.normalized)
            nums_s = [n for t in tok_s for n in t[2]]
            nums_m = [n for t in tok_m for n in t[2]]
            units_s = [u for t in tok_s for u in t[3]]
            units_m = [u for t in tok_m for u in t[3]]
            dn_s, dn_m = views.changed_positions(nums_s, nums_m)
            du_s, du_m = views.changed_positions(units_s, units_m)
            row.update({
                "numbers": {"sample": nums_s, "match": nums_m},
                "units": {"sample": units_s, "match": units_m},
                "recomputed": guard.blocked_by(ts.normalized, tm.normalized),
                "seg_sample": views.guard_segments(ts.normalized, tok_s, dn_s, du_s),
                "seg_match": views.guard_segments(tm.normalized, tok_m, dn_m, du_m)})
        rows.append(row)
    return rows
