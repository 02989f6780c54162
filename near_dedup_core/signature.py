"""Character-shingle hashing, MinHash signatures, LSH band keys and exact Jaccard.

Shingles. A normalized text of ``n`` code points has the ``n - k + 1`` overlapping windows
of ``k`` code points (a text shorter than ``k`` is one shingle). Each window is hashed to 64
bits: a polynomial over the code points, finished by the murmur3 ``fmix64`` avalanche. The
*hashed shingle set* of a text is the sorted set of these 64-bit values; exact Jaccard is
computed on these sets (two distinct shingles collide with probability ~2^-64 per pair).

MinHash. Permutation ``i`` maps a shingle hash ``x`` (its upper 32 bits) to
``(a_i * x + b_i) mod 2^32`` with odd ``a_i``; the signature keeps the minimum per
permutation. For a pair with Jaccard ``J`` each signature position agrees with probability
≈ ``J``, so the fraction of agreeing positions estimates ``J`` with standard error
``sqrt(J (1 - J) / num_perm)`` (0.027 at J = 0.9, 128 permutations). 32-bit lanes let the
compiled kernel use 8-wide SIMD; the per-permutation loop is the whole cost once shingles
are hashed, which is why it lives in numba and not in Python.

Stored values. The index keeps the low 16 bits of each minimum (b-bit minwise hashing, Li &
König 2010): two texts agree on a stored position with probability ``J + (1 - J) / 2^16``,
never less than with full values, so LSH recall and the agreement filter lose nothing, and a
signature takes 256 bytes instead of 512.

LSH. Stored positions are cut into ``bands`` groups of ``rows``; a band key hashes one
group together with its band number. Two texts are candidates when any band key is equal,
with probability ``1 - (1 - J^rows)^bands`` (a hair more, from 16-bit agreement).

``a_i``, ``b_i`` and the shingle seed derive from the config ``seed`` through numpy's PCG64,
so signatures are identical across processes and machines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from near_dedup_core.jit import njit

_POLY = np.uint64(0x100000001B3)  # FNV-64 prime: spreads code points across the word


@njit(inline="always")
def set_insert(table, key, slot, mask):
    """Put ``key`` (not zero) in the open-addressing set ``table``, where zero marks an empty
    slot: linear probing from ``slot`` (``mask`` is the table's size − 1, a power of two
    − 1). True if the key was not there. The caller keeps the table at most half full."""
    while True:
        v = table[slot]
        if v == 0:
            table[slot] = key
            return True
        if v == key:
            return False
        slot = (slot + 1) & mask


@njit(inline="always")
def set_contains(table, key, slot, mask):
    """Whether ``key`` (not zero) is in the open-addressing set ``table`` (`set_insert`)."""
    while True:
        v = table[slot]
        if v == key:
            return True
        if v == 0:
            return False
        slot = (slot + 1) & mask


@njit(inline="always")
def map_slot(keys, values, key, slot, mask):
    """The slot of ``key`` in the open-addressing map (``keys``, ``values``), where a value
    of −1 marks an empty slot and any key (zero too) may be stored: linear probing from
    ``slot`` (``mask`` as for `set_insert`); the empty slot where it goes if it is absent.
    The caller keeps the map at most half full."""
    while values[slot] != -1 and keys[slot] != key:
        slot = (slot + 1) & mask
    return slot


@njit(inline="always")
def map_find(keys, values, key, slot, mask):
    """The value of ``key`` in a `map_slot` map, −1 when it is absent."""
    return values[map_slot(keys, values, key, slot, mask)]


@njit(inline="always")
def fmix64(h):
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, nogil=True)
def shingle_hashes(cps, start, end, k, seed, out):
    """Hash every k-window of cps[start:end] into out; returns the count written.

    The windows are independent, so the loop over them is the one the compiler vectorizes
    (64-bit lanes): for the default k = 5 one pass with the five steps written out (about
    0.7 ns per window on AVX-512, 7× the window-by-window loop), for any other k one pass per
    code point position over all windows (about 1.6 ns). Both compute the same polynomial."""
    n = end - start
    if n <= 0:
        return 0
    if n < k:
        k = n
    m = n - k + 1
    c = cps[start:end]
    if k == 5:
        for j in range(m):
            h = (seed ^ np.uint64(c[j])) * _POLY
            h = (h ^ np.uint64(c[j + 1])) * _POLY
            h = (h ^ np.uint64(c[j + 2])) * _POLY
            h = (h ^ np.uint64(c[j + 3])) * _POLY
            h = (h ^ np.uint64(c[j + 4])) * _POLY
            out[j] = fmix64(h)
        return m
    o = out[:m]
    for j in range(m):
        o[j] = (seed ^ np.uint64(c[j])) * _POLY
    for t in range(1, k):
        w = c[t:t + m]
        for j in range(m):
            o[j] = (o[j] ^ np.uint64(w[j])) * _POLY
    for j in range(m):
        o[j] = fmix64(o[j])
    return m


@njit(cache=True, nogil=True)
def _distinct_tops(hashes, m, table, xs):
    """The distinct values among hashes[:m], found by open addressing (table: power-of-two
    size > 2m, zero = empty slot; the value 0 is kept apart), written to xs as their upper 32
    bits in order of first occurrence; returns how many."""
    mask = table.shape[0] - 1
    table[:] = 0
    distinct = 0
    zero_seen = False
    for j in range(m):
        h = hashes[j]
        if h == 0:
            if not zero_seen:
                zero_seen = True
                xs[distinct] = np.uint32(0)
                distinct += 1
            continue
        if set_insert(table, h, np.int64(h & np.uint64(mask)), mask):
            xs[distinct] = np.uint32(h >> np.uint64(32))
            distinct += 1
    return distinct


@njit(cache=True, nogil=True)
def _minhash_batch(cps, starts, ends, rows, k, seed, a, b, sigs, distinct):
    """Signature of the text cps[starts[i]:ends[i]] into sigs[rows[i]], and the size of its
    hashed shingle set into distinct[rows[i]].

    Signature value ``p`` of a text is min over its shingle hashes ``h`` of
    ``(a[p] * (h >> 32) + b[p]) mod 2^32``. A window that repeats an earlier shingle cannot
    lower any minimum, so the ``num_perm`` passes run over the distinct shingles only, which
    the set size needs anyway: about half the windows of web text repeat a 5-gram, and the
    passes are most of the kernel's work (the same signatures, 0.8× the time)."""
    num_perm = a.shape[0]
    longest = 1
    for i in range(starts.shape[0]):
        longest = max(longest, ends[i] - starts[i])
    hashes = np.empty(longest, dtype=np.uint64)
    xs = np.empty(longest, dtype=np.uint32)
    size = 1
    while size < 2 * longest:
        size *= 2
    table = np.empty(size, dtype=np.uint64)
    for i in range(starts.shape[0]):
        m = shingle_hashes(cps, starts[i], ends[i], k, seed, hashes)
        tsize = 1
        while tsize < 2 * m:
            tsize *= 2
        d = _distinct_tops(hashes, m, table[:tsize], xs)
        row = rows[i]
        for p in range(num_perm):
            ap = a[p]
            bp = b[p]
            lo = np.uint32(0xFFFFFFFF)
            for j in range(d):
                v = np.uint32(ap * xs[j] + bp)
                if v < lo:
                    lo = v
            sigs[row, p] = lo
        distinct[row] = d


@njit(cache=True, nogil=True)
def _sorted_unique(values, m, buf, counts):
    """Sort values[:m] (uniformly distributed 64-bit hashes) and drop repeats, in place;
    returns the number kept. Bucket sort on the top bits, then insertion sort inside each
    bucket: expected O(m) because the hashes are uniform."""
    if m == 0:
        return 0
    bits = 1
    while (1 << bits) < m:
        bits += 1
    nb = 1 << bits
    shift = np.uint64(64 - bits)
    counts[: nb + 1] = 0
    for j in range(m):
        counts[np.int64(values[j] >> shift) + 1] += 1
    for b in range(nb):
        counts[b + 1] += counts[b]
    for j in range(m):
        b = np.int64(values[j] >> shift)
        buf[counts[b]] = values[j]
        counts[b] += 1
    # counts[b] is now the end of bucket b; insertion sort each bucket
    start = 0
    for b in range(nb):
        end = counts[b]
        for x in range(start + 1, end):
            v = buf[x]
            y = x - 1
            while y >= start and buf[y] > v:
                buf[y + 1] = buf[y]
                y -= 1
            buf[y + 1] = v
        start = end
    u = 0
    for j in range(m):
        if j == 0 or buf[j] != buf[j - 1]:
            values[u] = buf[j]
            u += 1
    return u


@njit(cache=True, nogil=True)
def _shingle_set_batch(cps, offsets, k, seed, flat, counts):
    """Hashed shingle sets of a batch, each sorted and deduplicated, concatenated into flat."""
    longest = 1
    for i in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[i + 1] - offsets[i])
    buf = np.empty(longest, dtype=np.uint64)
    bucket_counts = np.empty(2 * longest + 2, dtype=np.int64)
    pos = 0
    for i in range(offsets.shape[0] - 1):
        m = shingle_hashes(cps, offsets[i], offsets[i + 1], k, seed, flat[pos:])
        u = _sorted_unique(flat[pos:], m, buf, bucket_counts)
        counts[i] = u
        pos += u
    return pos


@njit(cache=True, nogil=True)
def intersection_size(x, y):
    i = 0
    j = 0
    common = 0
    while i < x.shape[0] and j < y.shape[0]:
        if x[i] == y[j]:
            common += 1
            i += 1
            j += 1
        elif x[i] < y[j]:
            i += 1
        else:
            j += 1
    return common


def exact_jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """|x ∩ y| / |x ∪ y| of two sorted, duplicate-free uint64 shingle sets."""
    if x.shape[0] == 0 and y.shape[0] == 0:
        return 1.0
    common = intersection_size(x, y)
    return common / (x.shape[0] + y.shape[0] - common)


@njit(cache=True, nogil=True)
def _utf8_decode(buf, start, end, out):
    """Code points of the UTF-8 bytes buf[start:end] into out; returns their count, or -1
    when the bytes are not valid UTF-8 by the rules of Python's strict decoder (no overlong
    forms, no surrogates, nothing above U+10FFFF, no truncated sequence)."""
    n = 0
    i = start
    while i < end:
        c = np.uint32(buf[i])
        if c < 0x80:
            out[n] = c
            i += 1
        elif c < 0xC2:
            return -1
        elif c < 0xE0:
            if i + 1 >= end:
                return -1
            c1 = np.uint32(buf[i + 1])
            if (c1 & 0xC0) != 0x80:
                return -1
            out[n] = ((c & 0x1F) << 6) | (c1 & 0x3F)
            i += 2
        elif c < 0xF0:
            if i + 2 >= end:
                return -1
            c1 = np.uint32(buf[i + 1])
            c2 = np.uint32(buf[i + 2])
            if (c1 & 0xC0) != 0x80 or (c2 & 0xC0) != 0x80:
                return -1
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):
                return -1
            out[n] = ((c & 0x0F) << 12) | ((c1 & 0x3F) << 6) | (c2 & 0x3F)
            i += 3
        elif c < 0xF5:
            if i + 3 >= end:
                return -1
            c1 = np.uint32(buf[i + 1])
            c2 = np.uint32(buf[i + 2])
            c3 = np.uint32(buf[i + 3])
            if (c1 & 0xC0) != 0x80 or (c2 & 0xC0) != 0x80 or (c3 & 0xC0) != 0x80:
                return -1
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):
                return -1
            out[n] = ((c & 0x07) << 18) | ((c1 & 0x3F) << 12) | ((c2 & 0x3F) << 6) | (c3 & 0x3F)
            i += 4
        else:
            return -1
        n += 1
    return n


@njit(cache=True, nogil=True)
def components(left, right, n):
    """Connected component of each of n items joined by the pairs (left[p], right[p]), as
    the smallest item of the component (union-find)."""
    parent = np.arange(n)
    for p in range(left.shape[0]):
        a = left[p]
        b = right[p]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            parent[max(a, b)] = min(a, b)
    for i in range(n):
        r = i
        while parent[r] != r:
            r = parent[r]
        parent[i] = r
    return parent


@njit(cache=True, nogil=True)
def pair_common_utf8(buf, offsets, k, seed, order, fresh, room, adj_start, adj_pair,
                     adj_other, common, sizes):
    """Sizes of the hashed shingle sets of the UTF-8 texts buf[offsets[t]:offsets[t+1]], and
    the intersection sizes of text pairs, the texts taken in ``order``: at step i (text
    t = order[i]), common[adj_pair[q]] = |S(t) ∩ S(adj_other[q])| for q in
    adj_start[i]:adj_start[i+1], every partner taken before t and since the last step where
    ``fresh`` is set (a connected component of the pairs starts there).

    Text t's shingle hashes are deduplicated through an open-addressing table (at most half
    full; the value 0 is tracked apart), its distinct hashes kept in order of first occurrence;
    then the distinct hashes of each earlier partner are probed against that table. So every
    text is decoded, hashed and put into a table once, a pair costs one probe per distinct hash
    of its earlier text, and no set is ever sorted. Distinct hashes are kept only within one
    component: ``room`` (the most code points of one component) bounds the memory. Returns
    -1, or the first text that is not valid UTF-8 (nothing after it is computed)."""
    n_texts = offsets.shape[0] - 1
    longest = 1
    for t in range(n_texts):
        longest = max(longest, offsets[t + 1] - offsets[t])
    cps = np.empty(longest, dtype=np.uint32)
    hashes = np.empty(longest, dtype=np.uint64)
    flat = np.empty(max(room, 1), dtype=np.uint64)
    starts = np.zeros(n_texts, dtype=np.int64)
    size = 2
    while size < 2 * longest:
        size *= 2
    table = np.zeros(size, dtype=np.uint64)
    tsize = 2
    pos = 0
    for i in range(n_texts):
        t = order[i]
        if fresh[i]:
            pos = 0
        n = _utf8_decode(buf, offsets[t], offsets[t + 1], cps)
        if n < 0:
            return t
        m = shingle_hashes(cps, 0, n, k, seed, hashes)
        table[:tsize] = 0
        tsize = 2
        while tsize < 2 * m:
            tsize *= 2
        mask = np.int64(tsize - 1)
        starts[t] = pos
        zero_seen = False
        for j in range(m):
            h = hashes[j]
            if h == 0:
                if zero_seen:
                    continue
                zero_seen = True
            elif not set_insert(table, h, np.int64(h & np.uint64(mask)), mask):
                continue
            flat[pos] = h
            pos += 1
        sizes[t] = pos - starts[t]
        for q in range(adj_start[i], adj_start[i + 1]):
            e = adj_other[q]
            found = 0
            for j in range(starts[e], starts[e] + sizes[e]):
                h = flat[j]
                if h == 0:
                    found += zero_seen
                    continue
                found += set_contains(table, h, np.int64(h & np.uint64(mask)), mask)
            common[adj_pair[q]] = found
    return -1


def utf8_batch(texts: Sequence[bytes]) -> tuple[bytes, np.ndarray]:
    """The texts joined into one buffer, and their offsets (len(texts) + 1)."""
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=offsets[1:])
    return b"".join(texts), offsets


@njit(cache=True, nogil=True)
def _utf8_code_points(data, offsets, cps, cp_offsets):
    """Decode each text data[offsets[i]:offsets[i+1]] into cps, its code points starting at
    cp_offsets[i]; returns -1, or the index of the first text that is not valid UTF-8."""
    pos = 0
    for i in range(offsets.shape[0] - 1):
        cp_offsets[i] = pos
        n = _utf8_decode(data, offsets[i], offsets[i + 1], cps[pos:])
        if n < 0:
            return i
        pos += n
    cp_offsets[offsets.shape[0] - 1] = pos
    return -1


def utf8_code_points(texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray, int]:
    """`code_points` of UTF-8 encoded texts, decoded without making strings (always uint32);
    and -1, or the index of the first text that is not valid UTF-8 (the code points are
    then incomplete)."""
    buf, offsets = utf8_batch(texts)
    data = np.frombuffer(buf, dtype=np.uint8)
    cps = np.empty(len(buf), dtype=np.uint32)
    cp_offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    bad = _utf8_code_points(data, offsets, cps, cp_offsets) if texts else -1
    return cps[:cp_offsets[-1]], cp_offsets, int(bad)


def pair_jaccards(buf: bytes, offsets: np.ndarray, left: np.ndarray, right: np.ndarray,
                  k: int, seed: np.uint64) -> tuple[np.ndarray, int]:
    """Exact Jaccard of the hashed shingle sets of the text pairs (left[p], right[p]), text
    i being the UTF-8 bytes buf[offsets[i]:offsets[i+1]] (`utf8_batch`); and -1, or the
    index of the first text that is not valid UTF-8 (the Jaccards are then not computed).

    The same sets and the same formula as `exact_jaccard` (|A ∩ B| / (|A| + |B| - |A ∩ B|),
    1.0 for two empty sets), hence the same floats: both counts are integers below 2^53, so
    the float division is the correctly rounded quotient, as Python's int division is. Each
    text is decoded, hashed and deduplicated once however many pairs it is in, and a pair
    costs one hash-table probe per distinct shingle of one of its texts (`pair_common_utf8`):
    linear time, where sorting every set costs several times the hashing. The texts are taken
    one connected component of the pairs at a time, so the distinct hashes held (8 bytes per
    code point) are those of the largest component, not of all texts."""
    n_pairs = left.shape[0]
    n_texts = offsets.shape[0] - 1
    sizes = np.zeros(n_texts, dtype=np.int64)
    if n_pairs == 0:
        return np.zeros(0, dtype=np.float64), -1
    left = np.asarray(left, dtype=np.int64)
    right = np.asarray(right, dtype=np.int64)
    lengths = np.diff(offsets)
    data = np.frombuffer(buf, dtype=np.uint8)
    comp = components(left, right, n_texts)
    order = np.argsort(comp, kind="stable")
    rank = np.empty(n_texts, dtype=np.int64)
    rank[order] = np.arange(n_texts)
    fresh = np.ones(n_texts, dtype=np.bool_)
    fresh[1:] = comp[order[1:]] != comp[order[:-1]]
    room = int(np.bincount(comp, weights=lengths, minlength=n_texts).max())
    later = np.maximum(rank[left], rank[right])
    by_later = np.argsort(later, kind="stable")
    adj_start = np.zeros(n_texts + 1, dtype=np.int64)
    np.cumsum(np.bincount(later, minlength=n_texts), out=adj_start[1:])
    other = np.where(rank[left] < rank[right], left, right)
    common = np.zeros(n_pairs, dtype=np.int64)
    bad = pair_common_utf8(data, offsets, k, seed, order, fresh, room, adj_start, by_later,
                           other[by_later], common, sizes)
    if bad >= 0:
        return np.zeros(n_pairs, dtype=np.float64), int(bad)
    union = sizes[left] + sizes[right] - common
    out = np.ones(n_pairs, dtype=np.float64)
    nonempty = union > 0
    out[nonempty] = common[nonempty] / union[nonempty]
    return out, -1


def code_points(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated code points of ``texts`` and their offsets (len(texts) + 1).

    An all-ASCII batch is passed as bytes (uint8), otherwise as UTF-32 (uint32); both give the
    same code point values, hence the same hashes.
    """
    joined = "".join(texts)
    if joined.isascii():
        cps = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    else:
        cps = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    return cps, offsets


class Spans(NamedTuple):
    """Code points of some texts of a batch, already at hand (`normalize.normalize_spans`
    folds them before it makes the strings), so that hashing need not convert the strings
    again: text ``rows[k]`` of the batch is ``cps[starts[k]:ends[k]]``. ``cps`` is uint8
    for ASCII texts, else uint32 (the same values, hence the same hashes)."""

    cps: np.ndarray
    rows: np.ndarray  # int64
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64

    def renumbered(self, new_row: np.ndarray) -> Spans:
        """These spans under the rows of another batch: text ``r`` here is text
        ``new_row[r]`` there, or not there when that is negative."""
        to = new_row[self.rows]
        keep = to >= 0
        return Spans(self.cps, to[keep], self.starts[keep], self.ends[keep])


def renumber(spans: Sequence[Spans], new_row: np.ndarray) -> list[Spans]:
    """`Spans.renumbered` of each."""
    return [part.renumbered(new_row) for part in spans]


class MinHasher:
    """Deterministic character-shingle MinHash for one parameter set.

    Args:
        num_perm: signature length; estimator standard error is sqrt(J(1-J)/num_perm).
        seed: derives the permutations and the shingle hash seed.
        shingle_size: characters per shingle (5 suits prose: long enough that shared
            shingles mean shared wording, short enough that one edited word disturbs few).
    """

    def __init__(self, num_perm: int = 128, seed: int = 1, shingle_size: int = 5) -> None:
        self.num_perm = num_perm
        self.seed = seed
        self.shingle_size = shingle_size
        rng = np.random.Generator(np.random.PCG64(seed))
        self.shingle_seed = np.uint64(rng.integers(0, 2**63, dtype=np.uint64))
        self.a = (rng.integers(0, 2**32, size=num_perm, dtype=np.uint64) | np.uint64(1)).astype(np.uint32)
        self.b = rng.integers(0, 2**32, size=num_perm, dtype=np.uint64).astype(np.uint32)

    def signatures_and_sizes(self, texts: Sequence[str], spans: Sequence[Spans] = ()
                             ) -> tuple[np.ndarray, np.ndarray]:
        """(len(texts), num_perm) uint32 signatures of already normalized texts, and the size
        of each text's hashed shingle set (int64). ``spans`` may hold the code points of some
        of the texts (`Spans`: each text at most once); the others are converted here."""
        n = len(texts)
        sigs = np.empty((n, self.num_perm), dtype=np.uint32)
        sizes = np.zeros(n, dtype=np.int64)
        rest = np.ones(n, dtype=np.bool_)
        for part in spans:
            if len(part.rows):
                self._sign(part, sigs, sizes)
                rest[part.rows] = False
        left = np.flatnonzero(rest)
        if len(left):
            cps, offsets = code_points([texts[i] for i in left.tolist()])
            self._sign(Spans(cps, left, offsets[:-1], offsets[1:]), sigs, sizes)
        return sigs, sizes

    def _sign(self, part: Spans, sigs: np.ndarray, sizes: np.ndarray) -> None:
        _minhash_batch(part.cps, part.starts, part.ends, part.rows, self.shingle_size,
                       self.shingle_seed, self.a, self.b, sigs, sizes)

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), num_perm) uint32 signatures of already normalized texts."""
        return self.signatures_and_sizes(texts)[0]

    def signature(self, text: str) -> np.ndarray:
        return self.signatures([text])[0]

    def shingle_sets(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Hashed shingle set (sorted unique uint64) of each normalized text."""
        if not texts:
            return []
        cps, offsets = code_points(texts)
        flat = np.empty(max(int(offsets[-1]), 1), dtype=np.uint64)
        counts = np.empty(len(texts), dtype=np.int64)
        _shingle_set_batch(cps, offsets, self.shingle_size, self.shingle_seed, flat, counts)
        ends = np.cumsum(counts)
        return [flat[e - c:e] for e, c in zip(ends.tolist(), counts.tolist(), strict=True)]

    def shingle_set(self, text: str) -> np.ndarray:
        return self.shingle_sets([text])[0]


def shingle_set(text: str, k: int = 5, seed: int = 1) -> np.ndarray:
    """Hashed shingle set of one normalized text (see MinHasher.shingle_sets)."""
    return MinHasher(1, seed, k).shingle_set(text)


def stored_values(sigs: np.ndarray) -> np.ndarray:
    """The 16-bit values the index stores and bands: the low half of each 32-bit minimum."""
    return (sigs & np.uint32(0xFFFF)).astype(np.uint16)


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) int64 LSH keys: each band's ``rows`` signature values and its band number,
    mixed to 63 bits (non-negative, so they store as SQLite integers)."""
    n = sigs.shape[0]
    block = sigs[:, : bands * rows].reshape(n, bands, rows).astype(np.uint64)
    keys = np.broadcast_to(np.arange(1, bands + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15),
                           (n, bands)).copy()
    for t in range(rows):
        keys ^= block[:, :, t]
        keys *= np.uint64(0x100000001B3)
        keys ^= keys >> np.uint64(29)
    keys ^= keys >> np.uint64(33)
    keys *= np.uint64(0xFF51AFD7ED558CCD)
    keys ^= keys >> np.uint64(33)
    return (keys >> np.uint64(1)).astype(np.int64)


@njit(cache=True, nogil=True)
def band_keys_into(sigs, bands, rows, out):
    """`band_keys` of ``sigs`` into ``out`` ((n, bands) int64), in one compiled pass: the
    same mixing, step by step, without numpy's (n, bands, rows) uint64 temporaries."""
    for i in range(sigs.shape[0]):
        for b in range(bands):
            key = np.uint64(b + 1) * np.uint64(0x9E3779B97F4A7C15)
            for t in range(rows):
                key ^= np.uint64(sigs[i, b * rows + t])
                key *= np.uint64(0x100000001B3)
                key ^= key >> np.uint64(29)
            key ^= key >> np.uint64(33)
            key *= np.uint64(0xFF51AFD7ED558CCD)
            key ^= key >> np.uint64(33)
            out[i, b] = np.int64(key >> np.uint64(1))
