"""Exact short matches: an item below the containment method's reach (normalized text shorter
than ``contamination_min_chars``) is found where its words occur in a training text as one
contiguous run of whole words (docs/contamination.md, "Short items").

A *word* is a maximal run of letters and digits of the normalized text (``str.isalnum`` per
code point; punctuation and spaces separate words and are not compared), so "3" is not found
inside "13" nor "cat" inside "category", and "Hello, world!" matches "hello world". Each word
is hashed (FNV-1a over its code points, finished by ``fmix64``); a run of words is hashed by
chaining its word hashes. The items' runs sit in the same anchor table as the containment
anchors use (`kernels.build_key_table`, `probe.anchor_postings`); per training text, every run
of a length some item has is looked up there. A run found is compared word by word with the
item (the hashes of each word), so a collision of run hashes is never reported.

Words of digits alone are *numbers*: in a short item they are what the item says (a date, a
version, a count), so a match holds every number of the item in place; the words that may
differ are words with a letter (`tolerance`), and of them not the *identifiers*: a word of
ASCII letters and digits with a digit (``task1``, ``mips4``, ``libcc1``, a commit hash) names
a file, a test, a version, and a line with another in its place is another line of a
template, as with another number (report format 4). A run of another script holding a digit
(a clause of Chinese, which has no spaces between its words) is no identifier."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from near_dedup_core.contamination.kernels import log2
from near_dedup_core.jit import njit
from near_dedup_core.signature import fmix64, map_find

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_RUN_MUL = np.uint64(0x9E3779B97F4A7C15)
_BMP = 0x10000


#: ``word_table`` values: not a word character, a letter (any other word character), a digit
GAP, LETTER, DIGIT = 0, 1, 2


@lru_cache(maxsize=1)
def word_table() -> np.ndarray:
    """``table[c]`` for code point ``c`` of the Basic Multilingual Plane: `DIGIT` for a
    digit (``str.isdigit``), `LETTER` for any other letter or digit (``str.isalnum``),
    `GAP` otherwise; code points above it count as letters."""
    return np.fromiter(((DIGIT if chr(c).isdigit() else LETTER) if chr(c).isalnum() else GAP
                        for c in range(_BMP)), dtype=np.uint8, count=_BMP)


@njit(inline="always")
def _is_word(c, table):
    return c >= 0x10000 or table[c] != 0


@njit(cache=True, nogil=True)
def _words(cps, start, end, table, hashes, starts, ends):
    """The words of cps[start:end]: their hashes and [start, end) offsets relative to
    ``start``; returns their number."""
    n = 0
    j = start
    while j < end:
        if not _is_word(np.int64(cps[j]), table):
            j += 1
            continue
        h = _FNV_OFFSET
        s = j
        while j < end and _is_word(np.int64(cps[j]), table):
            h = (h ^ np.uint64(cps[j])) * _FNV_PRIME
            j += 1
        hashes[n] = fmix64(h)
        starts[n] = s - start
        ends[n] = j - start
        n += 1
    return n


@njit(inline="always")
def _chain(run, word):
    return fmix64((run ^ word) * _RUN_MUL + np.uint64(1))


@njit(cache=True, nogil=True)
def run_hashes(flat, starts, ends):
    """The hash of the run of words ``flat[starts[k]:ends[k]]``, for each k."""
    out = np.zeros(starts.shape[0], dtype=np.uint64)
    for k in range(starts.shape[0]):
        h = np.uint64(0)
        for x in range(starts[k], ends[k]):
            h = _chain(h, flat[x])
        out[k] = h
    return out


@njit(cache=True, nogil=True)
def prefix_hashes(flat, starts, ends):
    """The hash of every prefix (one word, two, …, all) of each run of words
    ``flat[starts[k]:ends[k]]``: what `exact_batch` meets at a place before it reaches a run
    of the table."""
    total = 0
    for k in range(starts.shape[0]):
        total += max(ends[k] - starts[k], 0)
    out = np.empty(total, dtype=np.uint64)
    n = 0
    for k in range(starts.shape[0]):
        h = np.uint64(0)
        for x in range(starts[k], ends[k]):
            h = _chain(h, flat[x])
            out[n] = h
            n += 1
    return out


@njit(cache=True, nogil=True)
def item_words(cps, offsets, table, flat, number, fixed, item_start, run_hash):
    """The word hashes of each item (``flat[item_start[i]:item_start[i + 1]]``, the caller
    sizes ``flat``, ``number`` and ``fixed`` to the code points), whether each word is a
    number (its code points all digits: ``number``), whether it is a number or an identifier
    (ASCII letters and digits, a digit among them: ``fixed``, it never differs in a match),
    and the hash of each item's whole run of words (``run_hash``; 0 for an item without a
    word)."""
    n_items = offsets.shape[0] - 1
    longest = 1
    for i in range(n_items):
        longest = max(longest, offsets[i + 1] - offsets[i])
    starts = np.empty(longest, dtype=np.int64)
    ends = np.empty(longest, dtype=np.int64)
    at = 0
    for i in range(n_items):
        item_start[i] = at
        n = _words(cps, offsets[i], offsets[i + 1], table, flat[at:], starts, ends)
        h = np.uint64(0)
        for w in range(n):
            h = _chain(h, flat[at + w])
            digits = True
            some = False
            ascii_only = True
            for j in range(offsets[i] + starts[w], offsets[i] + ends[w]):
                c = np.int64(cps[j])
                if c >= 0x80:
                    ascii_only = False
                if c >= 0x10000 or table[c] != DIGIT:
                    digits = False
                else:
                    some = True
            number[at + w] = digits
            fixed[at + w] = digits or (some and ascii_only)
        run_hash[i] = h
        at += n
    item_start[n_items] = at


#: a posting of the run table is ``item * ROLES + role``: role `FULL` is the item's whole run,
#: role ``1 + q`` its part ``q`` (`part_start`)
ROLES = 32
FULL = 0
#: most words that may differ in one item (``ROLES - 2``: its parts are at most ``ROLES - 1``)
MAX_TOLERANCE = ROLES - 2


@njit(inline="always")
def part_start(q, words, parts):
    """The first word of part ``q`` of an item of ``words`` words cut in ``parts`` parts."""
    return q * words // parts


@njit(inline="always")
def _mismatches(hashes, at, n, flat, fixed, first, length, most):
    """Words of the item (``flat[first:first + length]``) that differ from the text's words
    from ``at`` on, stopping past ``most``; ``most + 1`` when the text ends first or a word
    of the item that never differs (``fixed``: a number or an identifier) differs."""
    if at < 0 or at + length > n:
        return most + 1
    bad = 0
    for q in range(length):
        if flat[first + q] != hashes[at + q]:
            if fixed[first + q]:
                return most + 1
            bad += 1
            if bad > most:
                break
    return bad


@njit(cache=True, nogil=True)
def exact_batch(cps, offsets, table, max_words, has_length, run_table, run_vals, postings,
                flat, fixed, item_start, tolerance, run_bits, prefix_bits):
    """Every (text, item) of the batch whose item's words occur in the text as one run of
    whole words, at its first place, or else, for an item that tolerates ``k =
    tolerance[item]`` differing words (its numbers and identifiers, ``fixed``, never among
    them), all but at most k of them in place, at the first such place: [(text, item, start,
    end, words matched)] with [start, end) the run's code points in the normalized text. Such an item's k + 1 parts
    are in the table: when at most k words differ, one part is intact (pigeonhole), and a
    part found places the whole item, compared word by word. ``has_length[L]`` tells whether
    the table holds a run of L words (at most ``max_words``); ``run_table``/``run_vals`` map
    a run hash to its block in ``postings`` (`probe.anchor_postings`: ``[mark, count, item *
    ROLES + role, …]``); ``run_bits`` is a bitmap of the table's runs (`kernels.anchor_bits`),
    which fits in the CPU cache: a run whose bit is clear is not in the table. ``prefix_bits``
    is a bitmap of the prefixes of the table's runs (`prefix_hashes`): at a place, the run
    grows a word at a time while its bit is set, and a run whose bit is clear is the prefix
    of no run of the table, so neither is any longer run there; most places stop after a
    word or two."""
    size = run_table.shape[0]
    bits_shift = np.uint64(64 - log2(run_bits.shape[0] * 64))
    prefix_shift = np.uint64(64 - log2(prefix_bits.shape[0] * 64))
    mask = np.uint64(size - 1)
    longest = 1
    for i in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[i + 1] - offsets[i])
    hashes = np.empty(longest, dtype=np.uint64)
    starts = np.empty(longest, dtype=np.int64)
    ends = np.empty(longest, dtype=np.int64)
    n_items = item_start.shape[0] - 1
    seen = np.full(n_items, -1, dtype=np.int64)  # last text with an exact match
    near = np.full(n_items, -1, dtype=np.int64)  # last text with a near match
    near_at = np.zeros(n_items, dtype=np.int64)
    near_bad = np.zeros(n_items, dtype=np.int64)
    listed = np.empty(n_items, dtype=np.int64)
    out = [(np.int64(0), np.int64(0), np.int64(0), np.int64(0), np.int64(0))
           for _ in range(0)]
    for i in range(offsets.shape[0] - 1):
        n = _words(cps, offsets[i], offsets[i + 1], table, hashes, starts, ends)
        n_near = 0
        for w in range(n):
            h = np.uint64(0)
            for length in range(1, min(max_words, n - w) + 1):
                h = _chain(h, hashes[w + length - 1])
                b = h >> prefix_shift
                if (prefix_bits[np.int64(b >> np.uint64(6))] >> (b & np.uint64(63))) \
                        & np.uint64(1) == np.uint64(0):
                    break
                if not has_length[length]:
                    continue
                b = h >> bits_shift
                if (run_bits[np.int64(b >> np.uint64(6))] >> (b & np.uint64(63))) \
                        & np.uint64(1) == np.uint64(0):
                    continue
                o = map_find(run_table, run_vals, h, np.int64(h & mask), size - 1)
                if o == -1:
                    continue
                for x in range(o + 2, o + 2 + postings[o + 1]):
                    it = postings[x] // ROLES
                    role = postings[x] % ROLES
                    if seen[it] == i:
                        continue
                    first = item_start[it]
                    size_it = item_start[it + 1] - first
                    if role == FULL:
                        if size_it != length or _mismatches(hashes, w, n, flat, fixed, first,
                                                            size_it, 0) != 0:
                            continue
                        seen[it] = i
                        out.append((np.int64(i), np.int64(it), starts[w],
                                    ends[w + length - 1], np.int64(size_it)))
                        continue
                    k = tolerance[it]
                    at = w - part_start(role - 1, size_it, k + 1)
                    if near[it] == i and at >= near_at[it]:
                        continue
                    bad = _mismatches(hashes, at, n, flat, fixed, first, size_it, k)
                    if bad > k:
                        continue
                    if near[it] != i:
                        near[it] = i
                        listed[n_near] = it
                        n_near += 1
                    near_at[it] = at
                    near_bad[it] = bad
        for q in range(n_near):
            it = listed[q]
            if seen[it] != i:
                at = near_at[it]
                size_it = item_start[it + 1] - item_start[it]
                out.append((np.int64(i), np.int64(it), starts[at], ends[at + size_it - 1],
                            np.int64(size_it - near_bad[it])))
    return out
