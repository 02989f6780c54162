"""The prefix filter's arithmetic and the compiled probe kernels: anchor bitmap, anchor
table, each training text's windows indexed by hash, exact common-shingle counts and the
densest matched span (docs/contamination.md, "How candidates keep every pair")."""

from __future__ import annotations

import math

import numpy as np

from near_dedup_core.jit import njit
from near_dedup_core.signature import (
    MinHasher,
    code_points,
    intersection_size,
    map_find,
    map_slot,
    shingle_hashes,
)

#: anchor hits an item needs beyond the least overlap (the prefix filter's ``r``)
EXTRA_HITS = 16
#: of the anchor hits an item needs, those that its posted anchors must give before its late
#: anchors are looked up (`probe_batch`); the rest of its anchors are not posted
POSTED_HITS = 8


def least_overlap(n: int, threshold: float) -> int:
    """The least h with h / n ≥ threshold (the same float comparison as verification)."""
    for h in range(max(int(math.floor(threshold * n)) - 1, 0), n + 1):
        if h / n >= threshold:
            return max(h, 1)
    return n


def prefix_plan(n: int, threshold: float, extra: int = EXTRA_HITS) -> tuple[int, int]:
    """(anchors p, hits needed) of an item of n shingles: p = n − c + extra anchors of which
    ``extra`` must be present, or all n shingles and c hits when that is not fewer."""
    c = least_overlap(n, threshold)
    p = n - c + extra
    return (p, extra) if p < n else (n, c)


@njit(cache=True, nogil=True)
def build_key_table(keys, values, size):
    """Open-addressing table (linear probing on the low bits) of the distinct uint64
    ``keys``: ``table[slot]`` a key, ``vals[slot]`` its int32 value, −1 when the slot is
    empty; ``size`` is a power of two larger than len(keys)."""
    mask = np.uint64(size - 1)
    vals = np.full(size, -1, dtype=np.int32)
    table = np.zeros(size, dtype=np.uint64)
    for a in range(keys.shape[0]):
        slot = map_slot(table, vals, keys[a], np.int64(keys[a] & mask), size - 1)
        table[slot] = keys[a]
        vals[slot] = values[a]
    return table, vals


@njit(inline="always")
def log2(n):
    """log2 of a power of two."""
    r = 0
    while (1 << r) < n:
        r += 1
    return r


@njit(cache=True, nogil=True)
def anchor_bits(keys, n_bits):
    """A bitmap of ``n_bits`` (a power of two ≥ 64) with bit ``key >> (64 − log2 n_bits)``
    set for every key: a window whose bit is clear is no anchor and skips the table. The top
    bits select the bit and the low bits the table slot, so the two tests are independent."""
    bits = np.zeros(n_bits // 64, dtype=np.uint64)
    shift = np.uint64(64 - log2(n_bits))
    for a in range(keys.shape[0]):
        b = keys[a] >> shift
        bits[np.int64(b >> np.uint64(6))] |= np.uint64(1) << (b & np.uint64(63))
    return bits


@njit(inline="always")
def _index_size(n):
    """A power of two ≥ 2n (load factor at most one half)."""
    size = 2
    while size < 2 * n:
        size *= 2
    return size


@njit(cache=True, nogil=True)
def _index_windows(hashes, m, size, keys, heads, chain):
    """Index the windows hashes[:m] by value: an open-addressing table (linear probing on
    the low bits, ``size`` slots, ``heads`` −1 when empty) maps a hash to its last window,
    and ``chain[j]`` is the previous window of the same hash (−1 for the first)."""
    heads[:size] = -1
    for j in range(m):
        h = hashes[j]
        slot = map_slot(keys, heads, h, np.int64(h & np.uint64(size - 1)), size - 1)
        if heads[slot] == -1:
            keys[slot] = h
        chain[j] = heads[slot]
        heads[slot] = j


@njit(inline="always")
def _last_window(h, size, keys, heads):
    """The last window of hash h in an `_index_windows` table, −1 when none."""
    return map_find(keys, heads, h, np.int64(h & np.uint64(size - 1)), size - 1)


@njit(inline="always")
def _in_text(shingles, lo, hi, size, keys, heads):
    """How many of ``shingles[lo:hi]`` (distinct) are the hash of a window of the text
    indexed in an `_index_windows` table."""
    n = 0
    for x in range(lo, hi):
        if _last_window(shingles[x], size, keys, heads) != -1:
            n += 1
    return n


_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
#: bit index of each isolated bit x (one of 1 << 0 … 1 << 63) at (x · _DEBRUIJN) >> 58
_LOWEST_BIT = np.zeros(64, dtype=np.int64)
for _b in range(64):
    _LOWEST_BIT[((1 << _b) * int(_DEBRUIJN) % (1 << 64)) >> 58] = _b


@njit(cache=True, nogil=True)
def _marked_positions(marks, lo, hi, pos):
    """The positions marked in the bitmap ``marks`` (bit j of word j >> 6), all within
    [lo, hi], written in increasing order into ``pos``; returns their number and clears
    those words. O(marked + (hi − lo) / 64)."""
    n = 0
    if hi < lo:
        return 0
    for w in range(lo >> 6, (hi >> 6) + 1):
        word = marks[w]
        marks[w] = 0
        while word != 0:
            low = word & (~word + np.uint64(1))
            pos[n] = (w << 6) + _LOWEST_BIT[np.int64((low * _DEBRUIJN) >> np.uint64(58))]
            n += 1
            word ^= low
    return n


@njit(cache=True, nogil=True)
def _densest_run(matched, n, width, k):
    """[start, end) of the run of ``width`` code points holding the most of the ``n`` sorted
    matched window positions (earliest on ties), from its first window to the end of its last
    shingle (end unclipped); (0, 0) when there are none."""
    if n == 0:
        return 0, 0
    best = 0
    best_count = 0
    b = 0
    for a in range(n):
        while b < n and matched[b] < matched[a] + width:
            b += 1
        if b - a > best_count:
            best_count = b - a
            best = a
    return matched[best], matched[best + best_count - 1] + k


@njit(cache=True, nogil=True)
def probe_batch(cps, offsets, k, seed, bits, table, vals, postings, need, posted_need,
                late_flat, late_start, item_flat, item_start, item_chars, threshold, per_text,
                verify=True):
    """For each text of the batch: items whose anchors it holds at least ``need`` times,
    verified by exact containment, with the matched span (`_densest_run`). Returns
    [(text, item, common, start, end, matched windows in the span)] and sets
    ``per_text[text]`` to its candidates.

    An item's anchors are in two parts (`probe.build_state`): its rarer *posted* anchors,
    in the table, and its last ``need − posted_need`` *late* anchors
    (``late_flat[late_start[item]:late_start[item + 1]]``), the most frequent ones, which
    are only looked up. An item with ``need`` anchor hits has at least ``posted_need`` of
    them among its posted anchors, so the items that reach ``posted_need`` there, each
    with its late anchors looked up in the text, are the candidates: the same ones as if
    every anchor were posted, without walking the long postings of the frequent anchors.
    ``bits`` is the bitmap of the posted anchors (`anchor_bits`); ``table``/``vals`` map a
    posted anchor's hash to the offset ``o`` of its block in ``postings``: ``[mark, count,
    item, …]`` (`anchor_postings`); a batch works on its own copy, whose ``mark`` records
    the last text that found the anchor.

    Per text: (1) the windows whose bit is set are collected (a branch per window costs more
    than the test), looked up in the anchor table, and each distinct anchor found is listed
    once; (2) each listed anchor adds a hit to every item it anchors, an item becoming a
    pre-candidate when its count reaches ``posted_need`` (a count carries its text in the
    upper 32 bits, so none needs clearing); (3) for a text with pre-candidates, the late
    anchors of its pre-candidates are looked for among its windows in one pass
    (`_late_hits`), and a pre-candidate is a candidate when its hits reach ``need``; (4) for
    a text with candidates, its windows are indexed by hash once (`_index_windows`) and each
    candidate's shingles are looked up there (``common`` = |item ∩ text|, exact); (5) for a
    verified pair, the windows of the item's shingles, read from the same index and marked
    in a bitmap, give the matched span."""
    size = table.shape[0]
    mask = np.uint64(size - 1)
    bits_shift = np.uint64(64 - log2(bits.shape[0] * 64))
    n_items = need.shape[0]
    longest = 1
    for i in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[i + 1] - offsets[i])
    hashes = np.empty(longest, dtype=np.uint64)
    index_keys = np.empty(_index_size(longest), dtype=np.uint64)
    index_heads = np.empty(_index_size(longest), dtype=np.int32)
    chain = np.empty(longest, dtype=np.int32)
    marks = np.zeros(longest // 64 + 1, dtype=np.uint64)
    pos = np.empty(longest, dtype=np.int64)
    blocks = postings.copy()
    maybe = np.empty(longest, dtype=np.uint64)
    found = np.empty(longest, dtype=np.int32)
    counts = np.full(n_items, -1 << 32, dtype=np.int64)  # (text << 32) + its hits
    cands = np.empty(n_items, dtype=np.int32)
    late_keys = np.empty(_index_size(late_flat.shape[0]), dtype=np.uint64)
    late_seen = np.empty(_index_size(late_flat.shape[0]), dtype=np.int32)
    late_bits = np.empty(64, dtype=np.uint64)
    zero = np.int64(0)
    out = [(zero, zero, zero, zero, zero, zero, zero, zero, zero) for _ in range(0)]
    for i in range(offsets.shape[0] - 1):
        m = shingle_hashes(cps, offsets[i], offsets[i + 1], k, seed, hashes)
        passed = 0
        for j in range(m):  # without a branch: which windows may be anchors
            h = hashes[j]
            b = h >> bits_shift
            maybe[passed] = h
            passed += np.int64((bits[np.int64(b >> np.uint64(6))] >> (b & np.uint64(63)))
                               & np.uint64(1))
        nf = 0
        for q in range(passed):
            h = maybe[q]
            o = map_find(table, vals, h, np.int64(h & mask), size - 1)
            if o != -1 and blocks[o] != i:
                blocks[o] = i
                found[nf] = o
                nf += 1
        n_pre = 0
        tag = np.int64(i) << 32
        for f in range(nf):
            o = found[f]
            for x in range(o + 2, o + 2 + blocks[o + 1]):
                it = blocks[x]
                v = counts[it]
                v = v + 1 if v >= tag else tag + 1
                counts[it] = v
                if v - tag == posted_need[it]:
                    cands[n_pre] = it
                    n_pre += 1
        if n_pre == 0:
            continue
        nc = _late_hits(hashes, m, cands, n_pre, counts, tag, need, late_flat, late_start,
                        late_keys, late_seen, late_bits, maybe)
        if nc == 0:
            continue
        index_size = _index_size(m)
        _index_windows(hashes, m, index_size, index_keys, index_heads, chain)
        per_text[i] = nc
        for q in range(nc):
            it = cands[q]
            common = _in_text(item_flat, item_start[it], item_start[it + 1], index_size,
                              index_keys, index_heads)
            if common / (item_start[it + 1] - item_start[it]) < threshold:
                continue
            lo = m
            hi = -1
            for x in range(item_start[it], item_start[it + 1]):
                j = _last_window(item_flat[x], index_size, index_keys, index_heads)
                while j != -1:
                    marks[j >> 6] |= np.uint64(1) << np.uint64(j & 63)
                    lo = min(lo, j)
                    hi = max(hi, j)
                    j = chain[j]
            n = _marked_positions(marks, lo, hi, pos)
            start, end = _densest_run(pos, n, max(item_chars[it], 1), k)
            in_run = 0  # matched windows in the run: at least its distinct item shingles
            for q in range(n):
                if start <= pos[q] <= end - k:
                    in_run += 1
            end = min(end, offsets[i + 1] - offsets[i])
            wide_start, wide_end, local = _checked_span(
                cps, offsets[i], offsets[i + 1], start, end, in_run, k, threshold, item_flat,
                item_start[it], item_start[it + 1], index_size, index_keys, index_heads, chain,
                verify)
            if local == -2:
                continue
            out.append((np.int64(i), np.int64(it), np.int64(common), np.int64(start),
                        np.int64(end), np.int64(in_run), np.int64(wide_start),
                        np.int64(wide_end), np.int64(local)))
    return out


@njit(inline="always")
def _late_hits(hashes, m, cands, n_pre, counts, tag, need, late_flat, late_start, keys, seen,
               bits, maybe):
    """Keep in ``cands[:n_pre]`` the pre-candidates whose hits, with those of their late
    anchors among the text's windows ``hashes[:m]``, reach ``need``; returns how many. The
    late anchors of the pre-candidates are put in a small open-addressing set (``keys``,
    ``seen``: −1 an empty slot, 0 an anchor not met, 1 met), which one pass over the windows
    marks, behind a bitmap of them (``bits``, as `anchor_bits`; ``maybe`` holds the windows
    that pass it): cheaper than indexing every window of the many texts with pre-candidates,
    as only those with candidates need it."""
    total = 0
    for q in range(n_pre):
        total += late_start[cands[q] + 1] - late_start[cands[q]]
    size = _index_size(total)
    mask = size - 1
    seen[:size] = -1
    bits[:] = 0
    shift = np.uint64(64 - log2(bits.shape[0] * 64))
    for q in range(n_pre):
        for x in range(late_start[cands[q]], late_start[cands[q] + 1]):
            h = late_flat[x]
            s = map_slot(keys, seen, h, np.int64(h & np.uint64(mask)), mask)
            keys[s] = h
            seen[s] = 0
            b = h >> shift
            bits[np.int64(b >> np.uint64(6))] |= np.uint64(1) << (b & np.uint64(63))
    if total:
        passed = 0
        for j in range(m):  # without a branch, as in `probe_batch`
            h = hashes[j]
            b = h >> shift
            maybe[passed] = h
            passed += np.int64((bits[np.int64(b >> np.uint64(6))] >> (b & np.uint64(63)))
                               & np.uint64(1))
        for j in range(passed):
            h = maybe[j]
            s = map_slot(keys, seen, h, np.int64(h & np.uint64(mask)), mask)
            if seen[s] == 0:
                seen[s] = 1
    nc = 0
    for q in range(n_pre):
        it = cands[q]
        hits = counts[it] - tag
        for x in range(late_start[it], late_start[it + 1]):
            h = late_flat[x]
            hits += seen[map_slot(keys, seen, h, np.int64(h & np.uint64(mask)), mask)]
        if hits >= need[it]:
            cands[nc] = it
            nc += 1
    return nc


@njit(inline="always")
def _checked_span(cps, lo, hi, start, end, in_run, k, threshold, item_flat, a, b, index_size,
                  index_keys, index_heads, chain, verify):
    """The check of `probe._probe_points` of the pair of an item (shingles
    ``item_flat[a:b]``) and the text cps[lo:hi] matched in [start, end): (wide start, wide
    end, common shingles in that span) as `widen` and `common_in_span` give them, the last
    counted from the text's window index; −2 as the count when the pair fails the check;
    −1 when it is left to Python (a character that widening tests is not ASCII, or a span
    shorter than a shingle; every pair without ``verify``)."""
    if not verify:
        return start, end, -1
    wide_start, wide_end = _widen_ascii(cps, lo, hi, start, end)
    if wide_start == -1:
        return start, end, -1
    # at most the run's matched windows and one window per character widened
    if (in_run + (start - wide_start) + (wide_end - end)) / (b - a) < threshold:
        return wide_start, wide_end, -2
    if wide_end - wide_start < k:
        return start, end, -1
    local = 0
    for x in range(a, b):
        j = _last_window(item_flat[x], index_size, index_keys, index_heads)
        while j >= wide_start:  # a chain runs from the last window back
            if j <= wide_end - k:
                local += 1
                break
            j = chain[j]
    if local / (b - a) < threshold:
        return wide_start, wide_end, -2
    return wide_start, wide_end, local


@njit(inline="always")
def _ascii_alnum(c):
    """1 for an ASCII letter or digit, 0 for another ASCII code point, −1 past ASCII (whose
    ``str.isalnum`` only Python answers)."""
    if c >= 128:
        return -1
    return np.int64((48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122))


@njit(inline="always")
def _widen_ascii(cps, lo, hi, start, end):
    """`widen` of [start, end) in the text cps[lo:hi], when every character it tests is
    ASCII; (−1, −1) when one is not."""
    while start > 0:
        a = _ascii_alnum(cps[lo + start - 1])
        if a == 0:
            break
        b = _ascii_alnum(cps[lo + start])
        if a == -1 or b == -1:
            return -1, -1
        if b == 0:
            break
        start -= 1
    while 0 < end < hi - lo:
        a = _ascii_alnum(cps[lo + end])
        if a == 0:
            break
        b = _ascii_alnum(cps[lo + end - 1])
        if a == -1 or b == -1:
            return -1, -1
        if b == 0:
            break
        end += 1
    return start, end


@njit(cache=True, nogil=True)
def common_in_span(cps, lo, hi, k, seed, item):
    """|item ∩ windows of cps[lo:hi]|: the item's shingles (sorted, distinct) that are the
    hash of a window of that text (`window_hashes` of it), each counted once."""
    hashes = np.empty(max(hi - lo, 1), dtype=np.uint64)
    m = shingle_hashes(cps, lo, hi, k, seed, hashes)
    seen = np.zeros(item.shape[0], dtype=np.bool_)
    common = 0
    for j in range(m):
        p = np.searchsorted(item, hashes[j])
        if p < item.shape[0] and item[p] == hashes[j] and not seen[p]:
            seen[p] = True
            common += 1
    return common


@njit(cache=True, nogil=True)
def first_last_found(item_cps, text_cps, k, seed):
    """The first and last window of the item (by start) whose hash is that of a window of
    the text; (−1, −1) when none is."""
    text = np.empty(max(text_cps.shape[0], 1), dtype=np.uint64)
    m = shingle_hashes(text_cps, 0, text_cps.shape[0], k, seed, text)
    text = np.sort(text[:m])
    windows = np.empty(max(item_cps.shape[0], 1), dtype=np.uint64)
    n = shingle_hashes(item_cps, 0, item_cps.shape[0], k, seed, windows)
    first = -1
    last = -1
    for j in range(n):
        p = np.searchsorted(text, windows[j])
        if p < m and text[p] == windows[j]:
            if first == -1:
                first = j
            last = j
    return first, last


def containment(item_set: np.ndarray, sample_set: np.ndarray) -> float:
    """|item ∩ sample| / |item| of two sorted, duplicate-free uint64 shingle sets."""
    return intersection_size(item_set, sample_set) / item_set.shape[0]


def window_hashes(text: str, hasher: MinHasher) -> np.ndarray:
    """The shingle hash of every window of a normalized text, by start position."""
    cps, offsets = code_points([text])
    out = np.empty(max(len(text), 1), dtype=np.uint64)
    m = shingle_hashes(cps, 0, int(offsets[-1]), hasher.shingle_size, hasher.shingle_seed, out)
    return out[:m]


def matched_span(text: str, item_set: np.ndarray, item_chars: int,
                 hasher: MinHasher) -> tuple[int, int]:
    """[start, end) of the densest item-length run of matched windows (module docstring),
    widened to whole words."""
    windows = window_hashes(text, hasher)
    matched = np.flatnonzero(np.isin(windows, item_set))
    start, end = _densest_run(matched, len(matched), max(item_chars, 1), hasher.shingle_size)
    return widen(text, int(start), min(int(end), len(text)))


def widen(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) extended to whole words (no alphanumeric character cut in two)."""
    while start > 0 and text[start - 1].isalnum() and text[start].isalnum():
        start -= 1
    while 0 < end < len(text) and text[end].isalnum() and text[end - 1].isalnum():
        end += 1
    return start, end
