"""A report's counts: the decision reasons, the manifest's ``counts`` built one decision and
one relation at a time (`Tally`, shared by the scan's writer and the verifier), and the
Jaccard histogram's bins."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise

from near_dedup_core.config import NearDedupConfig

HISTOGRAM_BINS = 5

#: Every decision reason: the decision it comes with and what it means.
REASONS = {
    "unique": ("keep", "no verified match with an earlier sample of the pool"),
    "retained_split": ("keep", "in a retained split (validation): never deduplicated"),
    "guard_blocked": ("keep", "its only matches differ in numbers or units (the guard)"),
    "match_not_kept": ("keep", "matches only earlier samples that were themselves excluded"),
    "exact_duplicate": ("exclude", "same normalized text as an earlier kept sample"),
    "near_duplicate": ("exclude", "Jaccard at or above the threshold with an earlier kept one"),
    "takedown": ("exclude", "a taken-down text or a near copy of it (docs/takedowns.md)"),
}


def decision_summary(counts: dict) -> str:
    """``keep N (reason n, ...), exclude M (reason m, ...)`` from a manifest's counts."""
    parts = []
    for decision in ("keep", "exclude"):
        reasons = ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts["by_reason"].items())
                            if REASONS.get(reason, ("exclude",))[0] == decision)
        parts.append(f"{decision} {counts[decision]:,}" + (f" ({reasons})" if reasons else ""))
    return ", ".join(parts)


def jaccard_edges(threshold: float, bins: int = HISTOGRAM_BINS) -> list[float]:
    """Edges of ``bins`` equal Jaccard bins from ``threshold`` to 1.0.

    Rounded to 10 decimals, so the default threshold 0.9 gives exactly 0.9, 0.92, …, 1.0.
    """
    width = (1.0 - threshold) / bins
    return [round(threshold + i * width, 10) for i in range(bins)] + [1.0]


def jaccard_bin(value: float, edges: Sequence[float]) -> int | None:
    """Index of the bin of ``value`` (1.0 falls in the last bin); None below the first edge."""
    if value < edges[0]:
        return None
    return min(bisect.bisect_right(edges, value) - 1, len(edges) - 2)


def bin_labels(edges: Sequence[float], separator: str = "-") -> list[str]:
    """``lo-hi`` per bin with the fewest decimals (at least 2) that show every edge exactly."""
    digits = next((d for d in range(2, 6) if all(round(e, d) == e for e in edges)), 6)
    return [f"{lo:.{digits}f}{separator}{hi:.{digits}f}" for lo, hi in pairwise(edges)]


def jaccard_histogram(values: Iterable[float], threshold: float) -> dict[str, int]:
    """Counts of Jaccard values per bin from the threshold to 1; none are below the threshold
    (near relations are verified at or above it), and one that were is counted in the first."""
    edges = jaccard_edges(threshold)
    labels = bin_labels(edges)
    counts = dict.fromkeys(labels, 0)
    for v in values:
        counts[labels[jaccard_bin(v, edges) or 0]] += 1
    return counts


class Tally:
    """The manifest's ``counts`` built one decision and one relation at a time, so a verifier
    streaming a million-line report recomputes them without holding the rows."""

    def __init__(self, threshold: float | None = None) -> None:
        #: the Jaccard histogram's bins start here (None: the default config's threshold)
        self.threshold = NearDedupConfig().threshold if threshold is None else threshold
        self.by_split: dict[str, Counter] = defaultdict(Counter)
        self.by_reason: Counter = Counter()
        self.samples = self.relations = self.history_only = self.blocked = 0
        self.near_jaccards: list[float] = []

    def decision(self, split: str, decision: str, reason: str, count: int = 1) -> None:
        """``count`` samples of ``split`` with this decision and reason."""
        self.samples += count
        self.by_split[split][decision] += count
        self.by_reason[reason] += count

    def relation(self, kind: str, history_only: bool, blocked_by: str | None,
                 jaccard: float, count: int = 1, takedown: bool = False) -> None:
        """``count`` relations alike (``takedown``: to a taken-down text, which the Jaccard
        histogram of near relations leaves out)."""
        self.relations += count
        self.history_only += count * bool(history_only)
        self.blocked += count * (blocked_by is not None)
        if kind == "near" and blocked_by is None and not takedown:
            self.near_jaccards.extend([jaccard] * count)

    def counts(self) -> dict:
        keep = sum(c["keep"] for c in self.by_split.values())
        return {
            "samples": self.samples, "keep": keep, "exclude": self.samples - keep,
            "by_split": {s: {"keep": c["keep"], "exclude": c["exclude"]}
                         for s, c in sorted(self.by_split.items())},
            "by_reason": dict(sorted(self.by_reason.items())),
            "relations": self.relations,
            "history_only_relations": self.history_only,
            "blocked_relations": self.blocked,
            "near_relations_jaccard": jaccard_histogram(self.near_jaccards, self.threshold),
        }


def count_decisions(decisions: list[dict], relations: list[dict],
                    threshold: float | None = None) -> dict:
    """The manifest's ``counts`` (without ``candidates``); ``verify_report`` recomputes them
    the same way through `Tally`."""
    tally = Tally(threshold)
    for d in decisions:
        tally.decision(d["split"], d["decision"], d["reason"])
    for r in relations:
        tally.relation(r["kind"], r["history_only"], r["blocked_by"], r["jaccard"])
    return tally.counts()


