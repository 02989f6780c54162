"""Exact ground truth: every pair of documents whose hashed character-shingle sets have
Jaccard ≥ t, found without approximation.

``all_pairs`` is the prefix-filtering join (AllPairs, Bayardo et al. 2007): order shingles by
global frequency (rarest first); a set ``x`` can only reach J ≥ t with a set that shares a
shingle with its first ``|x| - ceil(t·|x|) + 1`` shingles in that order, and whose size lies in
``[t·|x|, |x|/t]``. Every candidate is then verified by an exact merge intersection, so the
result is exact. ``brute_force`` compares every pair with no filter at all; the recall benchmark
shows both agree on a sample.

Sets are the product's own (``near_dedup_core.signature.MinHasher.shingle_sets`` on
``near_dedup_core.normalize.normalize`` text): sorted, duplicate-free uint64 arrays, here
concatenated into one flat array with offsets.
"""

from __future__ import annotations

import math

import numpy as np

from near_dedup_core.jit import numba


def flatten(sets: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(sets) + 1, dtype=np.int64)
    np.cumsum([s.shape[0] for s in sets], out=offsets[1:])
    flat = np.concatenate(sets) if sets else np.empty(0, dtype=np.uint64)
    return flat, offsets


@numba.njit(cache=True, nogil=True)
def _intersection(flat, offsets, i, j):
    a, a_end = offsets[i], offsets[i + 1]
    b, b_end = offsets[j], offsets[j + 1]
    common = 0
    while a < a_end and b < b_end:
        x = flat[a]
        y = flat[b]
        if x == y:
            common += 1
            a += 1
            b += 1
        elif x < y:
            a += 1
        else:
            b += 1
    return common


@numba.njit(cache=True, nogil=True)
def jaccard_pairs(flat, offsets, left, right):
    """Exact Jaccard of each pair (left[k], right[k])."""
    out = np.empty(left.shape[0], dtype=np.float64)
    for k in range(left.shape[0]):
        i, j = left[k], right[k]
        common = _intersection(flat, offsets, i, j)
        union = (offsets[i + 1] - offsets[i]) + (offsets[j + 1] - offsets[j]) - common
        out[k] = common / union if union > 0 else 1.0
    return out


def _min_overlap(size: int, t: float) -> int:
    """Smallest overlap of a set of ``size`` with itself-compatible partner: ceil(t·size),
    taken one lower when floating point is in doubt (a longer prefix is always safe)."""
    return max(int(math.ceil(t * size - 1e-9)) - 1, 0)


@numba.njit(cache=True)
def _group_pairs(doc_of, starts, sizes, t, count_only, out_left, out_right):
    """Pairs (i < j) inside each posting group passing the size filter."""
    n = 0
    for g in range(starts.shape[0] - 1):
        lo, hi = starts[g], starts[g + 1]
        for p in range(lo, hi):
            i = doc_of[p]
            for q in range(p + 1, hi):
                j = doc_of[q]
                si, sj = sizes[i], sizes[j]
                small = min(si, sj)
                big = max(si, sj)
                if small < t * big - 1e-9:
                    continue
                if not count_only:
                    out_left[n] = min(i, j)
                    out_right[n] = max(i, j)
                n += 1
    return n


def all_pairs(flat: np.ndarray, offsets: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """All pairs with exact J ≥ t: (left, right, jaccard, number of candidates verified)."""
    n = offsets.shape[0] - 1
    sizes = np.diff(offsets)
    _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    # Global order: rarest shingle first, ties by hash value (np.unique order).
    order = np.lexsort((np.arange(counts.shape[0]), counts))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    ranks = rank[inverse]
    prefix_tokens = []
    prefix_docs = []
    for d in range(n):
        r = np.sort(ranks[offsets[d]:offsets[d + 1]])
        size = r.shape[0]
        length = min(size - _min_overlap(size, t) + 1, size)
        prefix_tokens.append(r[:length])
        prefix_docs.append(np.full(length, d, dtype=np.int64))
    tokens = np.concatenate(prefix_tokens)
    docs = np.concatenate(prefix_docs)
    by_token = np.lexsort((docs, tokens))
    tokens, docs = tokens[by_token], docs[by_token]
    boundaries = np.flatnonzero(np.diff(tokens)) + 1
    starts = np.concatenate(([0], boundaries, [tokens.shape[0]])).astype(np.int64)
    empty = np.empty(0, dtype=np.int64)
    total = _group_pairs(docs, starts, sizes, t, True, empty, empty)
    left = np.empty(total, dtype=np.int64)
    right = np.empty(total, dtype=np.int64)
    _group_pairs(docs, starts, sizes, t, False, left, right)
    keys = np.unique(left * n + right)
    left, right = keys // n, keys % n
    jac = jaccard_pairs(flat, offsets, left, right)
    keep = jac >= t
    return left[keep], right[keep], jac[keep], int(keys.shape[0])


@numba.njit(cache=True)
def _brute(ids, offsets, marks, t, out_left, out_right, out_jac):
    n = offsets.shape[0] - 1
    found = 0
    for i in range(n):
        for p in range(offsets[i], offsets[i + 1]):
            marks[ids[p]] = True
        si = offsets[i + 1] - offsets[i]
        for j in range(i + 1, n):
            common = 0
            for p in range(offsets[j], offsets[j + 1]):
                if marks[ids[p]]:
                    common += 1
            union = si + (offsets[j + 1] - offsets[j]) - common
            jac = common / union if union > 0 else 1.0
            if jac >= t:
                out_left[found] = i
                out_right[found] = j
                out_jac[found] = jac
                found += 1
                if found == out_left.shape[0]:
                    return -1
        for p in range(offsets[i], offsets[i + 1]):
            marks[ids[p]] = False
    return found


def brute_force(flat: np.ndarray, offsets: np.ndarray, t: float,
                capacity: int = 5_000_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair compared by exact intersection (no filter); pairs with J ≥ t."""
    uniq, ids = np.unique(flat, return_inverse=True)
    marks = np.zeros(uniq.shape[0], dtype=np.bool_)
    left = np.empty(capacity, dtype=np.int64)
    right = np.empty(capacity, dtype=np.int64)
    jac = np.empty(capacity, dtype=np.float64)
    found = _brute(ids.astype(np.int64), offsets, marks, t, left, right, jac)
    if found < 0:
        raise RuntimeError("brute_force: more pairs than capacity")
    return left[:found], right[:found], jac[:found]
