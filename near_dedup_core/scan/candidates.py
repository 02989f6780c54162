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

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.jit import njit
from near_dedup_core.progress import pause_point
from near_dedup_core.scan.records import Candidates, Nodes, Pool, distinct
from near_dedup_core.signature import band_keys_into, set_insert


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
    """The pool's nodes with a signature, one row each: ``nodes[k]`` is slot k's node index
    and ``content[k]`` its content (row of `Pool.contents`, whose signatures and set sizes
    the filters read)."""

    nodes: np.ndarray  # int64
    content: np.ndarray  # int64
    groups: np.ndarray  # (scope, split) group per slot
    keys: np.ndarray  # (slots, bands) LSH band keys


class HistoryCandidates(NamedTuple):
    """History candidates before the filters: (slot, history content row id) pairs, and the
    rows of those history contents (signatures, set sizes)."""

    pairs: np.ndarray
    contents: db.ContentColumns


@njit(cache=True, nogil=True)
def band_runs(band_keys, groups, table, run_of):
    """Number the distinct (group, band key) values of the slots in order of first
    appearance; run_of[i] is slot i's number. ``table`` is an open-addressing table of
    (key, group, number) rows, at most half full. Returns the count."""
    mask = table.shape[0] - 1
    table[:, 2] = -1
    runs = 0
    for i in range(band_keys.shape[0]):
        k = band_keys[i]
        g = groups[i]
        h = np.uint64(k) ^ (np.uint64(g) * np.uint64(0x9E3779B97F4A7C15))
        h ^= h >> np.uint64(29)
        slot = np.int64(h & np.uint64(mask))
        while True:
            r = table[slot, 2]
            if r < 0:
                table[slot, 0] = k
                table[slot, 1] = g
                table[slot, 2] = runs
                run_of[i] = runs
                runs += 1
                break
            if table[slot, 0] == k and table[slot, 1] == g:
                run_of[i] = r
                break
            slot = (slot + 1) & mask
    return runs


@njit(cache=True, nogil=True)
def insert_run_pairs(run_of, sizes, n_runs, pairs, raw_counts):
    """Every pair (i, j), i < j, of slots in the same run, into the open-addressing set
    ``pairs`` (keys i * n + j + 1; 0 is empty; the caller keeps it at most half full); adds
    run size - 1 to each member's raw count. Returns the number of new pairs."""
    n = run_of.shape[0]
    start = np.zeros(n_runs + 1, dtype=np.int64)
    for r in range(n_runs):
        start[r + 1] = start[r] + sizes[r]
    fill = start[:-1].copy()
    members = np.empty(n, dtype=np.int64)
    for i in range(n):  # slots by run, each run in slot order
        r = run_of[i]
        members[fill[r]] = i
        fill[r] += 1
    mask = pairs.shape[0] - 1
    added = 0
    for r in range(n_runs):
        size = sizes[r]
        if size < 2:
            continue
        for x in range(start[r], start[r + 1]):
            a = members[x]
            raw_counts[a] += size - 1
            for y in range(x + 1, start[r + 1]):
                key = a * n + members[y] + 1
                h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
                slot = np.int64((h >> np.uint64(20)) & np.uint64(mask))
                added += set_insert(pairs, key, slot, mask)
    return added


@njit(cache=True, nogil=True)
def _rehash(old, new):
    mask = new.shape[0] - 1
    for k in range(old.shape[0]):
        key = old[k]
        if key == 0:
            continue
        h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
        set_insert(new, key, np.int64((h >> np.uint64(20)) & np.uint64(mask)), mask)


@njit(cache=True)
def filter_pairs(left, right, sigs_l, sizes_l, sigs_r, sizes_r, threshold, agree_min):
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


def _no_shingle_count(content_id: bytes) -> NearDedupError:
    return NearDedupError(f"index: content {content_id.hex()} has a signature but no "
                          f"shingle count")


#: slots per `band_keys_into` call (a block of their signatures is gathered at a time)
KEY_BLOCK = 1 << 16


def pool_slots(pool: Pool, nodes: Nodes, config: NearDedupConfig) -> Slots:
    """The contents, (scope, split) groups and band keys of the nodes that have a
    signature; groups are numbered in order of first appearance."""
    c = pool.contents
    slot_nodes = np.flatnonzero(c.has_signature[nodes.content]).astype(np.int64)
    content = nodes.content[slot_nodes]
    sizes = c.shingles[content]
    if (sizes < 0).any():
        raise _no_shingle_count(c.content_id[int(content[np.argmax(sizes < 0)])])
    pair = c.scope[content] * max(len(nodes.split_labels), 1) + nodes.split[slot_nodes]
    _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    groups = rank[inverse.reshape(-1)]
    keys = np.zeros((len(slot_nodes), config.bands), dtype=np.int64)
    for i in range(0, len(slot_nodes), KEY_BLOCK):
        band_keys_into(c.signatures[content[i:i + KEY_BLOCK]], config.bands, config.rows,
                       keys[i:i + KEY_BLOCK])
    return Slots(slot_nodes, content, groups, keys)


def _pool_lsh_pairs(keys: np.ndarray, groups: np.ndarray, raw_counts: np.ndarray,
                    limit: int, too_many: Callable[[int, int], LimitExceeded]) -> np.ndarray:
    """Distinct (i, j), i < j, of long-node slots sharing a band key within one (scope,
    split) group (in no particular order), one band at a time: slots are grouped by (group,
    key) through a hash table and the pairs of each group go into a hash set, so nothing is
    sorted. A run of more than ``limit`` + 1 slots stops the scan; the one named is
    the first such run of the first such band in (group, key) order, and its first slot,
    as if the band had been sorted."""
    n = len(groups)
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64)
    size = 2
    while size < 2 * n:
        size *= 2
    table = np.zeros((size, 3), dtype=np.int64)
    run_of = np.empty(n, dtype=np.int64)
    pairs = np.zeros(2 * size, dtype=np.int64)
    held = 0
    for b in range(keys.shape[1]):
        band = np.ascontiguousarray(keys[:, b])
        runs = band_runs(band, groups, table, run_of)
        sizes = np.bincount(run_of, minlength=runs)
        big = np.flatnonzero(sizes - 1 > limit)
        if len(big):
            first_of_run = np.full(runs, n, dtype=np.int64)
            np.minimum.at(first_of_run, run_of, np.arange(n))
            heads = first_of_run[big]
            r = int(big[np.lexsort((band[heads], groups[heads]))[0]])
            raise too_many(int(first_of_run[r]), int(sizes[r]) - 1)
        bound = int((sizes * (sizes - 1) // 2).sum())
        while 2 * (held + bound) > len(pairs):
            grown = np.zeros(2 * len(pairs), dtype=np.int64)
            _rehash(pairs, grown)
            pairs = grown
        held += insert_run_pairs(run_of, sizes, runs, pairs, raw_counts)
    flat = pairs[pairs != 0] - 1
    return np.stack([flat // n, flat % n], axis=1)


def _history_hits(snap: db.Snapshot, keys: np.ndarray, pool: Pool, nodes: Nodes,
                  pool_nodes: set[tuple[int, str]]) -> np.ndarray:
    """Indexed contents outside the pool sharing a band key with a long-node slot, looked up
    in the index's band table: distinct (content row id, slot) pairs, sorted."""
    return band_key_hits(snap, keys, distinct(pool.contents.rowid[nodes.content]).tolist(),
                         pool_nodes)


def band_key_hits(snap: db.Snapshot, keys: np.ndarray, pool_contents: list[int],
                  pool_nodes: set[tuple[int, str]]) -> np.ndarray:
    """Indexed contents sharing a band key with a row of ``keys`` (one row of band keys per
    slot), looked up in the index's band table (`Snapshot.history_band_hits`, which leaves
    out ``pool_contents`` but where ``pool_nodes`` says otherwise): distinct (content row id,
    slot) pairs, sorted. The scan's history lookup, and `index find`'s."""
    if not len(keys):
        return np.zeros((0, 2), dtype=np.int64)
    flat_keys = keys.reshape(-1)
    by_key = np.argsort(flat_keys)  # any order of equal keys: the pairs come out distinct
    sorted_keys = flat_keys[by_key]
    slot_of = (by_key // keys.shape[1]).astype(np.int64)
    probes = sorted_keys[np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1]))]
    pause_point("scan-history")
    # distinct keys in key order: the probes walk the band B-tree in order
    found = snap.history_band_hits(probes, pool_contents, pool_nodes)
    if not len(found.keys):
        return np.zeros((0, 2), dtype=np.int64)
    lo = np.searchsorted(sorted_keys, found.keys, side="left")
    hi = np.searchsorted(sorted_keys, found.keys, side="right")
    counts = hi - lo
    ends = np.cumsum(counts)
    at = np.arange(int(ends[-1])) - np.repeat(ends - counts - lo, counts)
    n = max(len(keys), 1)
    pairs = distinct(np.repeat(found.contents, counts) * n + slot_of[at])
    return np.stack([pairs // n, pairs % n], axis=1)


def history_candidates(snap: db.Snapshot, pool: Pool, nodes: Nodes, slots: Slots,
                       config: NearDedupConfig, raw_counts: np.ndarray) -> HistoryCandidates:
    """(slot, history content) pairs of the same scope whose content is indexed in the slot's
    split outside the pool; adds one to ``raw_counts`` per pair of a slot."""
    if not pool.has_history():
        return HistoryCandidates(np.zeros((0, 2), dtype=np.int64),
                                 snap.content_columns(np.zeros(0, dtype=np.int64)))
    labels = nodes.split_labels
    pool_nodes = set(zip(pool.contents.rowid[nodes.content].tolist(),
                         [labels[x] for x in nodes.split.tolist()], strict=True))
    hits = _history_hits(snap, slots.keys, pool, nodes, pool_nodes)
    if not len(hits):
        return HistoryCandidates(np.zeros((0, 2), dtype=np.int64),
                                 snap.content_columns(np.zeros(0, dtype=np.int64)))
    hids = distinct(hits[:, 0])
    history = snap.content_columns(hids)
    if (history.shingles < 0).any():
        raise _no_shingle_count(history.content_id[int(np.argmax(history.shingles < 0))])
    if not history.has_signature.all():
        bad = history.content_id[int(np.argmin(history.has_signature))]
        raise NearDedupError(f"index: content {bad.hex()} has band keys but no signature")
    split_id: dict[str, int] = {}
    open_keys = []  # (history content, split) indexed outside the pool, as h * S + split
    for content, split in snap.content_splits(hids.tolist()):
        if (content, split) not in pool_nodes:
            open_keys.append((content, split_id.setdefault(split, len(split_id))))
    label_split = np.asarray([split_id.get(x, -1) for x in nodes.split_labels] or [-1],
                             dtype=np.int64)
    slot_split = label_split[nodes.split[slots.nodes]]
    slot_scope = pool.contents.scope[nodes.content[slots.nodes]]
    n_splits = max(len(split_id), 1)
    valid = np.asarray([h * n_splits + sp for h, sp in open_keys], dtype=np.int64)
    cand_h, cand_slot = hits[:, 0], hits[:, 1]
    ok = (slot_scope[cand_slot] == history.scope[np.searchsorted(hids, cand_h)]) \
        & (slot_split[cand_slot] >= 0) \
        & np.isin(cand_h * n_splits + slot_split[cand_slot], valid)
    pairs = np.stack([cand_slot[ok], cand_h[ok]], axis=1)
    np.add.at(raw_counts, pairs[:, 0], 1)
    return HistoryCandidates(pairs, history)


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


def _filtered_history_pairs(hist: HistoryCandidates, slots: Slots,
                            contents: db.ContentColumns, threshold: float,
                            agree_min: int) -> np.ndarray:
    """(node index, history content) of the history candidates that pass the filters."""
    if not len(hist.pairs):
        return np.zeros((0, 2), dtype=np.int64)
    c, h = contents, hist.contents
    rows = np.searchsorted(h.rowid, hist.pairs[:, 1])
    passed = filter_pairs(slots.content[hist.pairs[:, 0]], rows, c.signatures, c.shingles,
                          h.signatures, h.shingles, threshold, agree_min)
    return np.stack([slots.nodes[hist.pairs[passed, 0]], hist.pairs[passed, 1]], axis=1)


def _filtered_pool_pairs(pairs: np.ndarray, slots: Slots, contents: db.ContentColumns,
                         threshold: float,
                         agree_min: int) -> np.ndarray:
    """(node a, node b), a < b, of the pool candidates that pass the filters, sorted."""
    if not len(pairs):
        return np.zeros((0, 2), dtype=np.int64)
    lut = slots.nodes
    c = contents
    kept = pairs[filter_pairs(slots.content[pairs[:, 0]], slots.content[pairs[:, 1]],
                              c.signatures, c.shingles, c.signatures, c.shingles, threshold,
                              agree_min)]
    pool_pairs = np.stack([lut[kept[:, 0]], lut[kept[:, 1]]], axis=1)
    pool_pairs.sort(axis=1)
    return pool_pairs[np.lexsort((pool_pairs[:, 1], pool_pairs[:, 0]))]


class PoolSearch(NamedTuple):
    """The pool's part of the candidates: its slots, the LSH pairs before the filters (as
    slot pairs), each slot's candidate count so far (an upper bound) and the pool pairs that
    pass the filters (node pairs)."""

    slots: Slots
    lsh_pairs: np.ndarray
    raw_counts: np.ndarray
    pairs: np.ndarray


def _limit(snap: db.Snapshot, pool: Pool, nodes: Nodes, slots: Slots,
           config: NearDedupConfig) -> Callable[[int, int], LimitExceeded]:
    def too_many(slot: int, count: int) -> LimitExceeded:
        return _too_many(snap, pool, nodes, int(slots.nodes[slot]), count, config)
    return too_many


def pool_candidates(snap: db.Snapshot, pool: Pool, nodes: Nodes,
                    config: NearDedupConfig) -> PoolSearch:
    """Stage 2–3 within the pool: LSH pairs and the filters (the history comes after, in
    `history_and_limits`, which also applies ``max_candidates`` to both)."""
    slots = pool_slots(pool, nodes, config)
    raw_counts = np.zeros(len(slots.nodes), dtype=np.int64)  # upper bound of each slot's count
    lsh_pairs = _pool_lsh_pairs(slots.keys, slots.groups, raw_counts, config.max_candidates,
                                _limit(snap, pool, nodes, slots, config))
    agree_min = min_agreement(config.num_perm, config.threshold)
    return PoolSearch(slots, lsh_pairs, raw_counts,
                      _filtered_pool_pairs(lsh_pairs, slots, pool.contents, config.threshold,
                                           agree_min))


def history_and_limits(snap: db.Snapshot, pool: Pool, nodes: Nodes,
                       config: NearDedupConfig, found: PoolSearch) -> Candidates:
    """The history candidates of the pool's slots, ``max_candidates`` over pool and history
    candidates together, and the history pairs that pass the filters."""
    hist = history_candidates(snap, pool, nodes, found.slots, config, found.raw_counts)
    _check_max_candidates(found.lsh_pairs, hist.pairs, found.raw_counts, config.max_candidates,
                          _limit(snap, pool, nodes, found.slots, config))
    agree_min = min_agreement(config.num_perm, config.threshold)
    history_pairs = _filtered_history_pairs(hist, found.slots, pool.contents, config.threshold,
                                            agree_min)
    return Candidates(found.pairs, history_pairs, hist.contents,
                      len(found.lsh_pairs) + len(hist.pairs))


def find_candidates(snap: db.Snapshot, pool: Pool, nodes: Nodes,
                    config: NearDedupConfig, progress: bool = False) -> Candidates:
    """Pool and history candidate pairs after the filters (see module doc)."""
    return history_and_limits(snap, pool, nodes, config,
                              pool_candidates(snap, pool, nodes, config))


def _too_many(snap: db.Snapshot, pool: Pool, nodes: Nodes, node: int, count: int,
              config: NearDedupConfig) -> LimitExceeded:
    first = int(nodes.first[node])
    pos = int(pool.samples.input_pos[first])
    package = pool.indexed[pos]
    file, line = snap.sample_location(package, first - int(pool.sample_start[pos]))
    return LimitExceeded(f"{where(package.package_id, file, line)}: sample "
                         f"{pool.samples.sample_id[first]} has {count:,} LSH candidates, over "
                         f"max_candidates {config.max_candidates:,}; no report written")
