"""Stage 5, decide: the greedy rule (docs/contract.md, "scan"), applied to nodes (one content
within one split) in first-ingest order; all samples of a node are exact duplicates of each
other:

- samples of retained splits are kept (``retained_split``);
- a node's first sample is excluded (``near_duplicate``) iff it directly matches, without a
  guard block, an earlier node whose first sample was kept; ``kept`` names the earliest such
  sample. No transitivity: a match with an excluded sample does not exclude (``match_not_kept``);
- the node's further samples are ``exact_duplicate`` of its first sample when that one is kept,
  otherwise ``near_duplicate`` of the same kept sample as the first;
- kept samples without any earlier pool match are ``unique``; those whose only earlier matches
  were kept apart by the numeric/unit guard are ``guard_blocked``;
- history-only matches are relations and never exclude;
- a node that a takedown in force takes down (`near_dedup_core.takedown.match`) is excluded
  (``takedown``) whatever its split, and counts as not kept for the nodes after it.

The rule runs over the nodes in one compiled loop: a node's outcome depends only on its own
matches (sorted by the earlier node) and the outcomes of earlier nodes.
"""

from __future__ import annotations

import numpy as np

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.jit import numba
from near_dedup_core.scan.records import (
    GUARD_BLOCKED,
    MATCH_NOT_KEPT,
    NEAR_DUPLICATE,
    RETAINED_SPLIT,
    TAKEDOWN,
    UNIQUE,
    Decisions,
    Matches,
    Nodes,
)


@numba.njit(cache=True)
def greedy(retained, down, start, other, jaccard, blocked, reason, kept_by, jac):
    """Node i's matches are rows start[i]:start[i+1] of (other, jaccard, blocked), sorted by
    the earlier node ``other``; ``down[i]``: a takedown takes node i down."""
    n = retained.shape[0]
    kept = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        kept_by[i] = -1
        if down[i]:
            reason[i] = TAKEDOWN
            continue
        if retained[i]:
            kept[i] = True
            reason[i] = RETAINED_SPLIT
            continue
        open_edges = False
        for q in range(start[i], start[i + 1]):
            if blocked[q] != 0:
                continue
            open_edges = True
            if kept[other[q]]:
                kept_by[i] = other[q]
                jac[i] = jaccard[q]
                break
        if kept_by[i] >= 0:
            reason[i] = NEAR_DUPLICATE
            continue
        kept[i] = True
        if open_edges:
            reason[i] = MATCH_NOT_KEPT
        elif start[i + 1] > start[i]:
            reason[i] = GUARD_BLOCKED
        else:
            reason[i] = UNIQUE


def decide(nodes: Nodes, near: Matches, config: NearDedupConfig,
           down: np.ndarray | None = None, down_jaccard: np.ndarray | None = None
           ) -> Decisions:
    """The outcome of every node, greedy over nodes in first-ingest order (``near`` sorted by
    (later, other), as `verify` gives them); ``down``: the nodes a takedown takes down, with
    ``down_jaccard`` their first takedown match's Jaccard."""
    n = len(nodes)
    labels = set(config.retained_splits)
    retained = np.asarray([x in labels for x in nodes.split_labels] or [False])[nodes.split] \
        if n else np.zeros(0, dtype=bool)
    start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(near.later, minlength=n), out=start[1:])
    reason = np.zeros(n, dtype=np.int8)
    kept_by = np.full(n, -1, dtype=np.int64)
    jaccard = np.zeros(n, dtype=np.float64)
    if down is None:
        down = np.zeros(n, dtype=np.bool_)
    greedy(retained, down, start, near.other, near.jaccard, near.blocked, reason, kept_by,
            jaccard)
    if down_jaccard is not None:
        jaccard[down] = down_jaccard[down]
    return Decisions(reason, kept_by, jaccard)
