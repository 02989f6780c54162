"""Stages 2–3, candidates and filters.

Candidates are found by LSH: nodes sharing a band key within one (scope, split) group, plus
indexed history contents sharing a band key (looked up in the index's band table). Only
nodes with a signature (texts of at least ``min_chars``) take part; they are the *slots*
below. A node with more than ``max_candidates`` distinct candidates stops the scan (exit 2).

Two cheap filters then drop pairs that cannot reach the threshold, without losing recall:
the set-size ratio (``J ≤ min(|A|,|B|) / max(|A|,|B|)``) and signature agreement (below
`min_agreement` positions, a pair is under the threshold but for a 1e-6 chance).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple

import numba
import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.scan.records import Candidates, Node, Pool
from near_dedup_core.signature import band_keys


def min_agreement(num_perm: int, threshold: float, tail: float = 1e-6) -> int:
    """Largest k with P(Binomial(num_perm, threshold) < k) ≤ tail: pairs agreeing on fewer
    than k signature positions are below the threshold but for a ``tail`` chance."""
    cdf = 0.0
    for k in range(num_perm + 1):
        p = math.comb(num_perm, k) * threshold**k * (1 - threshold) ** (num_perm - k)
        if cdf + p > tail:
            return k
        cdf += p
    return num_perm


class Slots(NamedTuple):
    """The pool's nodes with a signature, one row each: ``nodes[k]`` is slot k's node index."""

    nodes: list[int]
    sigs: np.ndarray  # (slots, num_perm) uint16
    sizes: np.ndarray  # shingle-set sizes
    groups: np.ndarray  # (scope, split) group per slot
    keys: np.ndarray  # (slots, bands) LSH band keys


class HistoryCandidates(NamedTuple):
    """History candidates before the filters: (slot, history content) pairs, and the
    signature and set size of each history content (row ``row[content]``)."""

    pairs: np.ndarray
    contents: dict[int, db.ContentRow]
    row: dict[int, int]
    sigs: np.ndarray
    sizes: np.ndarray


@numba.njit(cache=True)
def _run_pairs(order, run_starts, run_sizes, raw_counts):
    """All (i, j) pairs, i < j, of the members of each run of ``order``; adds each member's
    run size − 1 to ``raw_counts``."""
    total = 0
    for r in range(run_sizes.shape[0]):
        total += run_sizes[r] * (run_sizes[r] - 1) // 2
    out = np.empty((total, 2), dtype=np.int64)
    k = 0
    for r in range(run_sizes.shape[0]):
        s = run_starts[r]
        n = run_sizes[r]
        for x in range(n):
            a = order[s + x]
            raw_counts[a] += n - 1
            for y in range(x + 1, n):
                b = order[s + y]
                if a < b:
                    out[k, 0] = a
                    out[k, 1] = b
                else:
                    out[k, 0] = b
                    out[k, 1] = a
                k += 1
    return out


@numba.njit(cache=True)
def _filter_pairs(left, right, sigs_l, sizes_l, sigs_r, sizes_r, threshold, agree_min):
    """Mask of pairs (sigs_l[left[k]], sigs_r[right[k]]) that pass the set-size ratio bound and
    the signature-agreement bound."""
    keep = np.zeros(left.shape[0], dtype=np.bool_)
    for k in range(left.shape[0]):
        a = left[k]
        b = right[k]
        lo = min(sizes_l[a], sizes_r[b])
        hi = max(sizes_l[a], sizes_r[b])
        if lo < threshold * hi:
            continue
        agree = 0
        for p in range(sigs_l.shape[1]):
            if sigs_l[a, p] == sigs_r[b, p]:
                agree += 1
        keep[k] = agree >= agree_min
    return keep


def _shingle_count(row: db.ContentRow) -> int:
    """The shingle count of a content with a signature (set together at ingest)."""
    if row.shingles is None:
        raise NearDedupError(f"index: content {row.content_id.hex()} has a signature but no "
                             f"shingle count")
    return row.shingles


def pool_slots(pool: Pool, nodes: list[Node], config: NearDedupConfig) -> Slots:
    """The signature matrix, set sizes, (scope, split) groups and band keys of the nodes
    that have a signature."""
    long_nodes: list[int] = []
    long_sigs: list[bytes] = []
    for i, n in enumerate(nodes):
        signature = pool.content[n.content].signature
        if signature is not None:
            long_nodes.append(i)
            long_sigs.append(signature)
    n_long = len(long_nodes)
    sigs = np.zeros((n_long, config.num_perm), dtype=np.uint16)
    sizes = np.zeros(n_long, dtype=np.int64)
    group_of: dict[tuple[int, str], int] = {}
    groups = np.zeros(n_long, dtype=np.int64)
    if n_long:
        sigs = np.frombuffer(b"".join(long_sigs), dtype=np.uint16).reshape(n_long, config.num_perm)
    for j, i in enumerate(long_nodes):
        row = pool.content[nodes[i].content]
        sizes[j] = _shingle_count(row)
        groups[j] = group_of.setdefault((row.scope, nodes[i].split), len(group_of))
    keys = band_keys(sigs, config.bands, config.rows) if n_long else np.zeros((0, config.bands), np.int64)
    return Slots(long_nodes, sigs, sizes, groups, keys)


def _pool_lsh_pairs(keys: np.ndarray, groups: np.ndarray, raw_counts: np.ndarray,
                    limit: int, too_many: Callable[[int, int], LimitExceeded]) -> np.ndarray:
    """Distinct (i, j), i < j, of long-node slots sharing a band key within one (scope,
    split) group, one band at a time: sort by (group, key), pairs within equal runs."""
    n = len(groups)
    chunks = []
    for b in range(keys.shape[1]):
        order = np.lexsort((keys[:, b], groups))
        g_sorted, k_sorted = groups[order], keys[order, b]
        boundary = np.ones(n + 1, dtype=bool)
        if n > 1:
            boundary[1:-1] = (g_sorted[1:] != g_sorted[:-1]) | (k_sorted[1:] != k_sorted[:-1])
        starts = np.flatnonzero(boundary)
        run_sizes = np.diff(starts)
        too_big = np.flatnonzero(run_sizes - 1 > limit)
        if len(too_big):
            r = int(too_big[0])
            raise too_many(int(order[starts[r]]), int(run_sizes[r]) - 1)
        multi = run_sizes >= 2
        if multi.any():
            chunks.append(_run_pairs(order.astype(np.int64), starts[:-1][multi].astype(np.int64),
                                     run_sizes[multi].astype(np.int64), raw_counts))
    if not chunks:
        return np.zeros((0, 2), dtype=np.int64)
    flat = np.sort(np.concatenate([p[:, 0] * n + p[:, 1] for p in chunks]))
    flat = flat[np.concatenate(([True], flat[1:] != flat[:-1]))]
    return np.stack([flat // n, flat % n], axis=1)


def _history_hits(snap: db.IndexSnapshot, keys: np.ndarray, nodes: list[Node],
                  pool_nodes: set[tuple[int, str]]) -> dict[int, set[int]]:
    """Indexed contents outside the pool sharing a band key with a long-node slot, looked up
    in the index's band table: content -> slots."""
    hits: dict[int, set[int]] = defaultdict(set)
    if not len(keys):
        return hits
    flat_keys = keys.reshape(-1)
    by_key = np.argsort(flat_keys, kind="stable")
    sorted_keys = flat_keys[by_key]
    slot_of = (by_key // keys.shape[1]).astype(np.int64)
    distinct = sorted_keys[np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1]))]
    # distinct keys in key order: the probes walk the band B-tree in order
    found = snap.history_band_hits(distinct, sorted({n.content for n in nodes}), pool_nodes)
    if len(found.keys):
        lo = np.searchsorted(sorted_keys, found.keys, side="left")
        hi = np.searchsorted(sorted_keys, found.keys, side="right")
        for content, first, end in zip(found.contents.tolist(), lo.tolist(), hi.tolist()):
            hits[content].update(slot_of[first:end].tolist())
    return hits


def history_candidates(snap: db.IndexSnapshot, pool: Pool, nodes: list[Node], slots: Slots,
                       config: NearDedupConfig, raw_counts: np.ndarray) -> HistoryCandidates:
    """(slot, history content) pairs of the same scope whose content is indexed in the slot's
    split outside the pool; adds one to ``raw_counts`` per pair of a slot."""
    pool_nodes = {(n.content, n.split) for n in nodes}
    pool_ids = {p.package_id for p in pool.packages}
    has_history = any(p["package_id"] not in pool_ids for p in pool.index_packages)
    hits = _history_hits(snap, slots.keys, nodes, pool_nodes) if has_history else {}
    if not hits:
        return HistoryCandidates(np.zeros((0, 2), dtype=np.int64), {}, {},
                                 np.zeros((0, config.num_perm), dtype=np.uint16),
                                 np.zeros(0, dtype=np.int64))
    hids = np.asarray(sorted(hits), dtype=np.int64)
    hist_row = {h: r for r, h in enumerate(hids.tolist())}
    hist_sigs = np.zeros((len(hids), config.num_perm), dtype=np.uint16)
    hist_sizes = np.zeros(len(hids), dtype=np.int64)
    hist_scope = np.zeros(len(hids), dtype=np.int64)
    history = snap.content_rows(hids.tolist())
    for h, row in history.items():
        r = hist_row[h]
        hist_scope[r], hist_sizes[r] = row.scope, _shingle_count(row)
        if row.signature is None:
            raise NearDedupError(f"index: content {row.content_id.hex()} has band keys but "
                                 f"no signature")
        hist_sigs[r] = np.frombuffer(row.signature, dtype=np.uint16)
    split_id: dict[str, int] = {}
    open_keys = []  # (history content, split) indexed outside the pool, as h * S + split
    for content, split in snap.content_splits(hids.tolist()):
        if (content, split) not in pool_nodes:
            open_keys.append((content, split_id.setdefault(split, len(split_id))))
    slot_split = np.asarray([split_id.get(nodes[i].split, -1) for i in slots.nodes], np.int64)
    slot_scope = np.asarray([pool.content[nodes[i].content].scope for i in slots.nodes],
                            np.int64)
    n_splits = max(len(split_id), 1)
    valid = np.asarray([h * n_splits + sp for h, sp in open_keys], dtype=np.int64)
    cand_h = np.repeat(hids, [len(hits[h]) for h in hids.tolist()])
    cand_slot = np.fromiter((j for h in hids.tolist() for j in sorted(hits[h])),
                            dtype=np.int64, count=len(cand_h))
    ok = (slot_scope[cand_slot] == hist_scope[np.searchsorted(hids, cand_h)]) \
        & (slot_split[cand_slot] >= 0) \
        & np.isin(cand_h * n_splits + slot_split[cand_slot], valid)
    pairs = np.stack([cand_slot[ok], cand_h[ok]], axis=1)
    np.add.at(raw_counts, pairs[:, 0], 1)
    return HistoryCandidates(pairs, history, hist_row, hist_sigs, hist_sizes)


def _check_max_candidates(pool_pairs: np.ndarray, hist_pairs: np.ndarray,
                          raw_counts: np.ndarray, limit: int,
                          too_many: Callable[[int, int], LimitExceeded]) -> None:
    """Exact distinct candidate counts for the slots whose upper bound exceeds ``limit``;
    the first slot over it stops the scan."""
    over = set(np.flatnonzero(raw_counts > limit).tolist())
    if not over:
        return
    per_slot: dict[int, set[int]] = defaultdict(set)
    for a, b in pool_pairs.tolist():
        if a in over:
            per_slot[a].add(b)
        if b in over:
            per_slot[b].add(a)
    for j, h in hist_pairs.tolist():
        if j in over:
            per_slot[j].add(-h)
    for j in sorted(over):
        if len(per_slot[j]) > limit:
            raise too_many(j, len(per_slot[j]))


def _filtered_history_pairs(hist: HistoryCandidates, slots: Slots, threshold: float,
                            agree_min: int) -> list[tuple[int, int]]:
    """(node index, history content) of the history candidates that pass the filters."""
    lut = np.asarray(slots.nodes, dtype=np.int64)
    rows = np.asarray([hist.row[h] for h in hist.pairs[:, 1].tolist()], dtype=np.int64)
    passed = _filter_pairs(hist.pairs[:, 0], rows, slots.sigs, slots.sizes, hist.sigs,
                           hist.sizes, threshold, agree_min)
    return list(zip(lut[hist.pairs[passed, 0]].tolist(), hist.pairs[passed, 1].tolist()))


def _filtered_pool_pairs(pairs: np.ndarray, slots: Slots, threshold: float,
                         agree_min: int) -> np.ndarray:
    """(node a, node b), a < b, of the pool candidates that pass the filters, sorted."""
    if not len(pairs):
        return np.zeros((0, 2), dtype=np.int64)
    lut = np.asarray(slots.nodes, dtype=np.int64)
    kept = pairs[_filter_pairs(pairs[:, 0], pairs[:, 1], slots.sigs, slots.sizes, slots.sigs,
                               slots.sizes, threshold, agree_min)]
    pool_pairs = np.stack([lut[kept[:, 0]], lut[kept[:, 1]]], axis=1)
    pool_pairs.sort(axis=1)
    return pool_pairs[np.lexsort((pool_pairs[:, 1], pool_pairs[:, 0]))]


def find_candidates(snap: db.IndexSnapshot, pool: Pool, nodes: list[Node],
                    config: NearDedupConfig, progress: bool) -> Candidates:
    """Pool and history candidate pairs after the filters (see module doc)."""
    slots = pool_slots(pool, nodes, config)

    def too_many(slot: int, count: int) -> LimitExceeded:
        return _too_many(nodes[slots.nodes[slot]], count, config)

    raw_counts = np.zeros(len(slots.nodes), dtype=np.int64)  # upper bound of each slot's count
    all_pairs = _pool_lsh_pairs(slots.keys, slots.groups, raw_counts, config.max_candidates,
                                too_many)
    hist = history_candidates(snap, pool, nodes, slots, config, raw_counts)
    _check_max_candidates(all_pairs, hist.pairs, raw_counts, config.max_candidates, too_many)
    agree_min = min_agreement(config.num_perm, config.threshold)
    history_pairs = _filtered_history_pairs(hist, slots, config.threshold, agree_min)
    pool_pairs = _filtered_pool_pairs(all_pairs, slots, config.threshold, agree_min)
    return Candidates(pool_pairs, history_pairs, hist.contents, len(all_pairs) + len(hist.pairs))


def _too_many(node: Node, count: int, config: NearDedupConfig) -> LimitExceeded:
    s = node.samples[0]
    return LimitExceeded(f"{where(s.package_id, s.file, s.line)}: sample {s.sample_id} has "
                         f"{count:,} LSH candidates, over max_candidates "
                         f"{config.max_candidates:,}; no report written")
