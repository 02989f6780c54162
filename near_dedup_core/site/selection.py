"""What the site shows in full, of a large report: the clusters that get a page of their
own, the excluded samples whose text diff against the kept partner is computed, and the
guard-blocked pairs shown with both texts' numbers and units (`site.model` holds the caps)."""

from __future__ import annotations

from collections import defaultdict

from near_dedup_core.audit.sources import Key, SampleText
from near_dedup_core.audit.textdiff import changed_spans, merge_close
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.guard import guard_for
from near_dedup_core.report import RelationRow
from near_dedup_core.site import model, views
from near_dedup_core.site.model import SiteData


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


def diff_pairs(data: SiteData) -> list[tuple[Key, Key]]:
    """(excluded sample, its kept partner) for the listed excluded members of clusters with a
    page, in cluster order, at most `model.MAX_DIFFS`."""
    out = []
    for c in data.relations.clusters:
        if not c.page:
            continue
        for k in c.members[:model.CLUSTER_MEMBERS]:
            d = data.decision(k)
            if d is not None and d.kept is not None:
                out.append((k, d.kept))
                if len(out) >= model.MAX_DIFFS:
                    return out
    return out


def diffs(pairs: list[tuple[Key, Key]], texts: dict[Key, SampleText]) -> dict[Key, dict]:
    out = {}
    for sample, kept in pairs:
        a, b = texts.get(kept), texts.get(sample)
        if a is None or b is None:
            continue
        spans = changed_spans(a.normalized, b.normalized)
        left, right = views.diff_segments(a.normalized, b.normalized,
                                          merge_close(a.normalized, b.normalized, spans))
        out[sample] = {"partner": kept, "spans": spans, "left": left, "right": right,
                       "lines": views.span_lines(a.normalized, b.normalized, spans)}
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
