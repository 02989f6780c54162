"""Stage 5, decide: the greedy rule (SPEC §4 scan), applied to nodes (one content within one
split) in first-ingest order; all samples of a node are exact duplicates of each other:

- samples of retained splits are kept (``retained_split``);
- a node's first sample is excluded (``near_duplicate``) iff it directly matches, without a
  guard block, an earlier node whose first sample was kept; ``kept`` names the earliest such
  sample. No transitivity: a match with an excluded sample does not exclude (``match_not_kept``);
- the node's further samples are ``exact_duplicate`` of its first sample when that one is kept,
  otherwise ``near_duplicate`` of the same kept sample as the first;
- kept samples without any earlier pool match are ``unique``; those whose only earlier matches
  were kept apart by the numeric/unit guard are ``guard_blocked``;
- history-only matches are relations and never exclude.
"""

from __future__ import annotations

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.scan.records import Decision, Match, Node, Pool


def decide(pool: Pool, nodes: list[Node], near: dict[int, list[Match]],
           hist: dict[int, list[Match]], config: NearDedupConfig) -> dict[int, Decision]:
    """Decision per sample (keyed by id(sample)), greedy over nodes in first-ingest order."""
    retained = set(config.retained_splits)
    kept_node: list[bool] = []
    out: dict[int, Decision] = {}
    for idx, node in enumerate(nodes):
        first = node.samples[0]
        if node.split in retained:
            kept_node.append(True)
            for s in node.samples:
                out[id(s)] = Decision("keep", "retained_split")
            continue
        edges = sorted(near.get(idx, ()))
        open_edges = [(m.other, m.jaccard) for m in edges if m.blocked_by is None]
        kept_matches = [(a, j) for a, j in open_edges if kept_node[a]]
        if kept_matches:
            a, j = kept_matches[0]
            kept_node.append(False)
            target = nodes[a].samples[0]
            for s in node.samples:
                out[id(s)] = Decision("exclude", "near_duplicate", target, j)
            continue
        kept_node.append(True)
        reason = "match_not_kept" if open_edges else ("guard_blocked" if edges else "unique")
        out[id(first)] = Decision("keep", reason)
        for s in node.samples[1:]:
            out[id(s)] = Decision("exclude", "exact_duplicate", first, 1.0)
    return out
