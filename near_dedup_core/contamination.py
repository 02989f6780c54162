"""`contamination`: which training samples contain evaluation items, exactly, in a frozen report.

Containment. For an evaluation item ``I`` and a training sample ``D``,
``C(I, D) = |S(I) ∩ S(D)| / |S(I)|`` over the hashed character-shingle sets of dedup
(`normalize.normalize`, then `signature`'s 64-bit shingle hashes with the config's
``shingle_size`` and ``seed``). Containment, not Jaccard: a question pasted into a long web
page has a tiny Jaccard with the page but containment near 1. ``D`` is contaminated by ``I``
when ``C(I, D) ≥ contamination_threshold``; every reported pair is computed exactly on the
full sets (no estimated or probabilistic-only flags). Items whose normalized text is shorter
than ``contamination_min_chars`` are skipped and counted (a two-word answer is contained in
everything).

Compared texts. Evaluation sets are ordinary snapshot packages, of either kind; every record
of every split is an item. The pool is all cpt or all sft, as for every command. Comparison
crosses isolation scopes on purpose (an eval set may come with another tokenizer, and a
leaked question is leaked whatever the task): a cpt item is its ``text``; an sft item is
the compared QA text of dedup (``role: content`` lines) against an sft pool, and its message
contents alone (one per line) against a cpt pool, whose web text carries no role labels.
A training sample is its dedup compared text. Refs are resolved as everywhere.

Candidates, with exact recall (prefix filter, as in set-similarity joins: Chaudhuri et al.
2006, Bayardo et al. 2007). For an item of ``n`` shingles let ``c = ⌈t·n⌉`` be the least
overlap at or above the threshold (the least ``h`` with ``h/n ≥ t``, in floating point as
verified). Order the item's shingles by rarity and take the first ``p = n − c + r`` as
*anchors* (``r = EXTRA_HITS = 16``). A sample holding ``≥ c`` of the item's shingles misses
at most ``n − c`` of them, so it holds at least ``p − (n − c) = r`` anchors: requiring
``r`` anchor hits loses no pair, whatever the text and whichever ``p`` shingles are the
anchors — no probability involved. An item with ``p ≥ n`` uses all its shingles and needs
exactly ``c``.

The order only sets the cost. Rarest first keeps common 5-grams (" the ", "tion ") out of
the anchors: a long English document holds 30–40 % of any English item's shingles by
chance, and anchoring on those would make nearly every long document a candidate. Rarity is
measured where the anchors are looked for: document frequency among 1,000 training samples
taken evenly from the heads of the pool's data files (`training_sample`, 4 million
characters at most), then among all eval items, then the hash value. The eval items alone
are a poor guide, since the items of one benchmark share a vocabulary and "rare among the
items" still includes common English: on the 10,000-item bench a sample of the pool's first
1,000 texts cut the candidates verified from 159,773 to 99,608 and the kernel time by a
fifth. Taking the sample from every file rather than from the first one matters as soon as
the files differ (one per source or language): on the 1M bench, whose first file begins
with Czech man pages, it cut the item hits per training text from 4,500 to 3,200. On 2,000 items
against 4,000 pool documents (bench/contamination.py, order by the items only) ``r = 1``
(the classic prefix filter) gave 1.05 million candidates, ``r = 16`` 356, and 128 random
anchors (bottom-k, a probabilistic variant) 24 candidates at a 65 % higher probe cost; with
the kernel below, any ``r`` from 8 to 16 costs about the same (fewer anchors, more
candidates) and 24 or 32 cost more.

Work. The main process only reads and hashes the pool's shards, as blocks of whole lines
(`package.read_blocks`), and applies the rules across records in record order (unique ids,
ref targets; a ref sample takes its target's pairs, its text being the target's). A process
pool (`workers.process_pool`, whose forkserver is started before the items are read and
loads the compiled kernels once, `warm_up`, so that the workers fork with them) parses and
checks each block's lines, takes the compared texts (checking ``max_chars``), normalizes
and hashes them and runs them through a compiled kernel (`_probe_batch`, `probe_block`).
Per training text: every shingle window is tested in a bitmap of the anchors (`anchor_bits`,
16 bits per anchor up to 2^24, cache-resident: most windows that are no anchor stop
there), then looked up in an open-addressing table that
maps an anchor to its block ``[mark, count, item, …]`` in one int32 array, so that a hit
reads one place; each distinct anchor found adds a hit to each item it anchors, and an item
becomes a candidate when its count reaches the hits needed. A text with candidates has its
windows indexed by hash once; each candidate's common shingles are counted by looking them
up there (exact), and for a verified pair the windows of its shingles are marked in a
bitmap of the text and read back in order for the span. Results do not depend on the
number of workers. Cost per training text: normalizing and hashing it, one bitmap test per
window, and one hit per (anchor found, item it anchors) — at 10,000 items a third of the
windows of a 3,300-character text are anchors, 700 of them distinct, making 4,300 hits — so
that part grows with the number of items. docs/benchmarks.md compares it with the dedup
scan.

From an index (``contamination --index``, every pool package indexed, as for ``scan``): the
pool's samples come from one snapshot of the index and each distinct content's normalized
text is read by a worker from the index and probed once (`_probe_index`, `probe_contents`),
skipping the parsing and normalizing of every line; the data files are hashed meanwhile
and must match their manifests. The report is the same bytes as from the packages.

Matched span. ``[start, end)`` in the training sample's *normalized* compared text: among
the windows whose shingle hashes belong to the item's set, the run of item-length
(``len(normalized item)`` code points) holding the most matched windows (earliest on ties),
from its first matched window to the end of its last matched shingle, widened to whole
words. ``numbers_differ`` compares the number sequences of the normalized item and of that
span (`guard.Guard.sequences`, built-in units); the numeric guard does not exempt a pair:
an item with one changed number is still a leaked item.

Report folder (atomic, canonical JSON lines, deterministic bytes):

- ``contamination.jsonl``: one line per contaminated pair, ordered by eval package (as
  given), eval record, training package (as given), training record: ``eval`` and
  ``training`` sample references (package, sample id, split, file, line; training also
  domain), ``containment``, ``item_shingles``, ``common_shingles``, ``span``
  ``{start, end}``, ``numbers_differ``;
- ``summary.json``: per eval package: items, checked, skipped as too short, leaked, training
  samples affected, and the same per training (domain, split);
- ``manifest.json``: format ``near-dedup-contamination``, versions, config, the candidate
  filter (anchors, candidates verified), evals and inputs (id, kind, manifest sha256,
  records, path), counts;
- ``checksums.sha256``.

`verify_contamination` (``near-dedup report verify``) checks checksums, every line's fields,
containment = common/item shingles ≥ threshold, references against the manifest, and
recomputes the summary and the manifest counts from ``contamination.jsonl``.
"""

from __future__ import annotations

import math
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from near_dedup_core import ALGORITHM_VERSION, __version__
from near_dedup_core.collector import rare_collections
from near_dedup_core.compare import compared_text
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.fsutil import (
    atomic_dir,
    iter_json_objects,
    read_json_object,
    require_new_output_outside,
    sha256_file,
    verify_checksums,
    write_checksums,
    write_json,
    write_jsonl,
)
from near_dedup_core.guard import guard_for
from near_dedup_core.jit import numba
from near_dedup_core.normalize import build_table, normalize, normalize_code_points, text_at
from near_dedup_core.package import (
    LineBlock,
    Package,
    Record,
    SampleIds,
    ShardEnd,
    dependency_order,
    head_records,
    load_package,
    open_packages,
    parse_block,
    read_blocks,
    stream_records,
)
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.signature import (
    MinHasher,
    _intersection_size,
    _shingle_hashes,
    code_points,
    utf8_code_points,
)
from near_dedup_core.workers import process_pool, start_forkserver

FORMAT = "near-dedup-contamination"
FORMAT_VERSION = 1
FILES = ("contamination.jsonl", "summary.json")
EXTRA_HITS = 16
SAMPLE_RECORDS = 1_000
SAMPLE_CHARS = 4_000_000
ANCHOR_ORDER = (f"document frequency among {SAMPLE_RECORDS:,} training samples from the heads of "
                f"the pool's data files, then among the eval items, then hash")
ANCHOR_BITS_PER_ANCHOR = 16
MAX_ANCHOR_BITS = 1 << 24
#: lines per block of the pool handed to a worker (`package.read_blocks`)
BLOCK_LINES = 1_024
#: imported by the worker pool's forkserver: `warm_up`
PRELOAD = ("near_dedup_core.contamination",)
LINE_FIELDS = ("eval", "training", "containment", "item_shingles", "common_shingles", "span",
               "numbers_differ")


# --------------------------------------------------------------------------- prefix filter


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


# --------------------------------------------------------------------------- kernels


@numba.njit(cache=True, nogil=True)
def _build_table(keys, values, size):
    """Open-addressing table (linear probing on the low bits) of the distinct uint64
    ``keys``: ``table[slot]`` a key, ``vals[slot]`` its int32 value, −1 when the slot is
    empty; ``size`` is a power of two larger than len(keys)."""
    mask = np.uint64(size - 1)
    vals = np.full(size, -1, dtype=np.int32)
    table = np.zeros(size, dtype=np.uint64)
    for a in range(keys.shape[0]):
        slot = np.int64(keys[a] & mask)
        while vals[slot] != -1:
            slot = (slot + 1) & (size - 1)
        table[slot] = keys[a]
        vals[slot] = values[a]
    return table, vals


@numba.njit(inline="always")
def _log2(n):
    """log2 of a power of two."""
    r = 0
    while (1 << r) < n:
        r += 1
    return r


@numba.njit(cache=True, nogil=True)
def anchor_bits(keys, n_bits):
    """A bitmap of ``n_bits`` (a power of two ≥ 64) with bit ``key >> (64 − log2 n_bits)``
    set for every key: a window whose bit is clear is no anchor and skips the table. The top
    bits select the bit and the low bits the table slot, so the two tests are independent."""
    bits = np.zeros(n_bits // 64, dtype=np.uint64)
    shift = np.uint64(64 - _log2(n_bits))
    for a in range(keys.shape[0]):
        b = keys[a] >> shift
        bits[np.int64(b >> np.uint64(6))] |= np.uint64(1) << (b & np.uint64(63))
    return bits


@numba.njit(inline="always")
def _index_size(n):
    """A power of two ≥ 2n (load factor at most one half)."""
    size = 2
    while size < 2 * n:
        size *= 2
    return size


@numba.njit(cache=True, nogil=True)
def _index_windows(hashes, m, size, keys, heads, chain):
    """Index the windows hashes[:m] by value: an open-addressing table (linear probing on
    the low bits, ``size`` slots, ``heads`` −1 when empty) maps a hash to its last window,
    and ``chain[j]`` is the previous window of the same hash (−1 for the first)."""
    heads[:size] = -1
    for j in range(m):
        h = hashes[j]
        slot = np.int64(h & np.uint64(size - 1))
        while heads[slot] != -1 and keys[slot] != h:
            slot = (slot + 1) & (size - 1)
        if heads[slot] == -1:
            keys[slot] = h
        chain[j] = heads[slot]
        heads[slot] = j


@numba.njit(inline="always")
def _last_window(h, size, keys, heads):
    """The last window of hash h in an `_index_windows` table, −1 when none."""
    slot = np.int64(h & np.uint64(size - 1))
    while heads[slot] != -1:
        if keys[slot] == h:
            return heads[slot]
        slot = (slot + 1) & (size - 1)
    return -1


_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
#: bit index of each isolated bit x (one of 1 << 0 … 1 << 63) at (x · _DEBRUIJN) >> 58
_LOWEST_BIT = np.zeros(64, dtype=np.int64)
for _b in range(64):
    _LOWEST_BIT[((1 << _b) * int(_DEBRUIJN) % (1 << 64)) >> 58] = _b


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _probe_batch(cps, offsets, k, seed, bits, table, vals, postings, need, item_flat,
                 item_start, item_chars, threshold, per_text):
    """For each text of the batch: items whose anchors it holds at least ``need`` times,
    verified by exact containment, with the matched span (`_densest_run`). Returns
    [(text, item, common, start, end)] and sets ``per_text[text]`` to its candidates.

    ``bits`` is the anchor bitmap (`anchor_bits`); ``table``/``vals`` map an anchor hash to
    the offset ``o`` of its block in ``postings``: ``[mark, count, item, …]``
    (`anchor_postings`); a batch works on its own copy, whose ``mark`` records the last text
    that found the anchor.

    Per text: (1) the windows whose bit is set are collected (a branch per window costs more
    than the test), looked up in the anchor table, and each distinct anchor found is listed
    once; (2) each listed anchor adds a hit to every item it anchors, an item becoming a
    candidate when its count reaches ``need`` (a count carries its text in the upper 32
    bits, so none needs clearing); (3) for a text with candidates, its windows are indexed
    by hash once (`_index_windows`) and each candidate's shingles are looked up there
    (``common`` = |item ∩ text|, exact); (4) for a verified pair, the windows of the item's
    shingles, read from the same index and marked in a bitmap, give the matched span."""
    size = table.shape[0]
    mask = np.uint64(size - 1)
    bits_shift = np.uint64(64 - _log2(bits.shape[0] * 64))
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
    out = [(np.int64(0), np.int64(0), np.int64(0), np.int64(0), np.int64(0))
           for _ in range(0)]
    for i in range(offsets.shape[0] - 1):
        m = _shingle_hashes(cps, offsets[i], offsets[i + 1], k, seed, hashes)
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
            slot = np.int64(h & mask)
            while vals[slot] != -1:
                if table[slot] == h:
                    o = vals[slot]
                    if blocks[o] != i:
                        blocks[o] = i
                        found[nf] = o
                        nf += 1
                    break
                slot = (slot + 1) & (size - 1)
        nc = 0
        tag = np.int64(i) << 32
        for f in range(nf):
            o = found[f]
            for x in range(o + 2, o + 2 + blocks[o + 1]):
                it = blocks[x]
                v = counts[it]
                v = v + 1 if v >= tag else tag + 1
                counts[it] = v
                if v - tag == need[it]:
                    cands[nc] = it
                    nc += 1
        if nc == 0:
            continue
        per_text[i] = nc
        index_size = _index_size(m)
        _index_windows(hashes, m, index_size, index_keys, index_heads, chain)
        for q in range(nc):
            it = cands[q]
            common = 0
            for x in range(item_start[it], item_start[it + 1]):
                if _last_window(item_flat[x], index_size, index_keys, index_heads) != -1:
                    common += 1
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
            end = min(end, offsets[i + 1] - offsets[i])
            out.append((np.int64(i), np.int64(it), np.int64(common), np.int64(start),
                        np.int64(end)))
    return out


def containment(item_set: np.ndarray, sample_set: np.ndarray) -> float:
    """|item ∩ sample| / |item| of two sorted, duplicate-free uint64 shingle sets."""
    return _intersection_size(item_set, sample_set) / item_set.shape[0]


def window_hashes(text: str, hasher: MinHasher) -> np.ndarray:
    """The shingle hash of every window of a normalized text, by start position."""
    cps, offsets = code_points([text])
    out = np.empty(max(len(text), 1), dtype=np.uint64)
    m = _shingle_hashes(cps, 0, int(offsets[-1]), hasher.shingle_size, hasher.shingle_seed, out)
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


# --------------------------------------------------------------------------- workers


class ProbeState(NamedTuple):
    """Everything a worker needs to check training texts against all items."""

    seed: int
    shingle_size: int
    threshold: float
    config_json: str
    bits: np.ndarray
    table: np.ndarray
    vals: np.ndarray
    postings: np.ndarray
    need: np.ndarray
    item_flat: np.ndarray
    item_start: np.ndarray
    item_chars: np.ndarray
    item_numbers: list[tuple[str, ...]]


class Hit(NamedTuple):
    """A verified pair: ``sample`` indexes the texts (or records) probed together, ``item``
    the eval items."""

    sample: int
    item: int
    common: int
    start: int
    end: int
    numbers_differ: bool


_STATE: ProbeState | None = None


def _init_worker(state: ProbeState) -> None:
    global _STATE
    _STATE = state


def warm_up() -> None:
    """Load the compiled kernels of `probe_texts` in this process, for both code point widths
    (from numba's cache, or compiling them), on a text that contains its item, and build
    the normalization table of `normalize_code_points` (so that every block, however little
    non-ASCII text it holds, takes the compiled normalization). Run in the forkserver
    (`PRELOAD`), before the workers fork from it: they start with all of it."""
    global _STATE
    build_table()
    text = "a training text that contains its evaluation item word for word"
    item = EvalItem(SampleRef(0, 0, "", "", "", "", 0, None), text)
    _STATE = build_state([item], NearDedupConfig())[0]
    try:
        probe_texts([text])
        probe_texts([text + " \u00e9"])
    finally:
        _STATE = None


def probe_texts(texts: list[str]) -> tuple[list[Hit], np.ndarray]:
    """Normalize, hash and probe raw training texts (in a worker): the verified pairs
    (``Hit.sample`` indexes ``texts``) and the number of candidates of each text."""
    cps, offsets = normalize_code_points(texts)
    return _probe_points(cps, offsets)


def _probe_points(cps: np.ndarray, offsets: np.ndarray) -> tuple[list[Hit], np.ndarray]:
    """`probe_texts` of normalized texts given as code points (`signature.code_points`)."""
    st = _STATE
    assert st is not None, "worker not initialized"
    hasher = MinHasher(1, st.seed, st.shingle_size)
    per_text = np.zeros(len(offsets) - 1, dtype=np.int64)
    found = _probe_batch(cps, offsets, st.shingle_size, hasher.shingle_seed, st.bits,
                         st.table, st.vals, st.postings, st.need, st.item_flat, st.item_start,
                         st.item_chars, st.threshold, per_text)
    hits = []
    if found:
        guard = guard_for(NearDedupConfig.model_validate_json(st.config_json), frozenset())
        norms: dict[int, str] = {}
        for i, it, common, start, end in sorted(found):
            norm = norms.get(i)
            if norm is None:
                norm = norms[i] = text_at(cps, offsets, i)
            start, end = widen(norm, int(start), int(end))
            numbers = guard.sequences(norm[start:end])[0]
            hits.append(Hit(int(i), int(it), int(common), start, end,
                            numbers != st.item_numbers[it]))
    return hits, per_text


class BlockProbe(NamedTuple):
    """A line block of the pool, probed: per record in line order its sample id, ref and own
    domain, and its candidates (0 for a ref, whose text is its target's); the verified pairs
    (``Hit.sample`` indexes the records); and the first problem of the block (a bad line,
    which ends the records before it, or a ``max_chars`` breach, which ends them after that
    record), which the main process raises once it has applied the rules across records to
    the records before it."""

    ids: list[str]
    refs: list[tuple[str, str] | None]
    domains: list[str | None]
    candidates: np.ndarray
    hits: list[Hit]
    problem: NearDedupError | None


def probe_block(block: LineBlock, max_chars: int) -> BlockProbe:
    """Parse and check a block's lines (`package.parse_block`), take each record's compared
    text and probe the texts (`probe_texts`); runs in a worker."""
    parsed = parse_block(block)
    text_of = _text_reader(block.kind, block.kind)
    ids: list[str] = []
    refs: list[tuple[str, str] | None] = []
    domains: list[str | None] = []
    texts: list[str] = []
    at: list[int] = []
    problem = parsed.problem
    for k, (sample_id, data, ref) in enumerate(parsed.records):
        ids.append(sample_id)
        refs.append(ref)
        domains.append(data.get("domain"))
        if ref is None:
            raw = text_of(data)
            if len(raw) > max_chars:
                problem = LimitExceeded(
                    f"{where(block.package_id, block.file, block.first_line + k)}: sample "
                    f"{sample_id} has {len(raw):,} characters, over max_chars {max_chars:,}")
                break
            texts.append(raw)
            at.append(k)
    candidates = np.zeros(len(ids), dtype=np.int64)
    if problem is not None or not texts:
        return BlockProbe(ids, refs, domains, candidates, [], problem)
    hits, per_text = probe_texts(texts)
    candidates[at] = per_text
    return BlockProbe(ids, refs, domains, candidates, [h._replace(sample=at[h.sample])
                                                      for h in hits], None)


_READERS: dict[str, Any] = {}


def probe_contents(source: Any, ids: list[int]) -> tuple[list[Hit], np.ndarray]:
    """Probe the normalized texts of these content rows (``Hit.sample`` indexes ``ids``).
    ``source`` is the command's snapshot (inline), or, in a pool worker, the index location,
    read on a connection of the worker's own, kept for its life (content rows never change
    once written)."""
    from near_dedup_core import index_store as db

    reader = source
    if isinstance(source, str):
        reader = _READERS.get(source)
        if reader is None:
            reader = _READERS[source] = db.open_texts(source)
    cps, offsets, bad = utf8_code_points(reader.utf8_texts(ids))
    if bad >= 0:
        reader.texts([ids[bad]])  # raises, naming the damage
        raise db.damaged(reader.path, f"the text of content row {ids[bad]} is not UTF-8")
    return _probe_points(cps, offsets)


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class SampleRef:
    """Where a sample is: input package position, record position, and its identity."""

    input_pos: int
    position: int
    package_id: str
    sample_id: str
    split: str
    file: str
    line: int
    domain: str | None

    def key(self) -> tuple[int, int]:
        return (self.input_pos, self.position)


@dataclass(frozen=True, slots=True)
class EvalItem:
    ref: SampleRef
    text: str  # normalized


def _resolved(records: Iterator[Record], packages: Sequence[Package], kind: str,
              config: NearDedupConfig, text_of) -> Iterator[tuple[Record, str, str | None]]:
    """(record, compared text, domain) with refs resolved; ``max_chars`` checked."""
    depended = {d for p in packages for d in p.depends_on}
    targets: dict[tuple[str, str], tuple[str, str | None]] = {}
    for rec in records:
        domain = rec.data.get("domain")
        if rec.ref is not None:
            raw, target_domain = targets[rec.ref]
            if domain is None:
                domain = target_domain
        else:
            raw = text_of(rec.data)
            if len(raw) > config.max_chars:
                raise LimitExceeded(
                    f"{where(rec.package_id, rec.file, rec.line)}: sample {rec.sample_id} has "
                    f"{len(raw):,} characters, over max_chars {config.max_chars:,}")
        if rec.package_id in depended:
            targets[(rec.package_id, rec.sample_id)] = (raw, domain)
        yield rec, raw, domain


def _text_reader(item_kind: str, pool_kind: str):
    if item_kind == "sft" and pool_kind == "cpt":
        return lambda data: "\n".join(m["content"] for m in data["messages"])
    return lambda data: compared_text(item_kind, data)


def open_evals(paths: Sequence[Path]) -> list[Package]:
    """Eval packages in the order given; each kind's packages are checked together like one
    command's inputs (unique ids, depends_on among them)."""
    if not paths:
        raise NearDedupError("no eval packages given")
    kind_of = {p: load_package(p).kind for p in paths}
    by_path: dict[Path, Package] = {}
    for kind in dict.fromkeys(kind_of.values()):
        group = [p for p in paths if kind_of[p] == kind]
        by_path.update(zip(group, open_packages(group), strict=True))
    packages = [by_path[p] for p in paths]
    seen: dict[str, Package] = {}
    for pkg in packages:
        if pkg.package_id in seen:
            raise NearDedupError(f"{where(pkg.package_id)}: package id given twice "
                                 f"({seen[pkg.package_id].path} and {pkg.path})")
        seen[pkg.package_id] = pkg
    return packages


def read_items(evals: list[Package], pool_kind: str, config: NearDedupConfig,
               progress: bool) -> tuple[list[EvalItem], Counter, Counter]:
    """Every eval record as an item in (eval package, record) order; counts of items and of
    skipped (too short) items per eval package."""
    pos = {p.package_id: i for i, p in enumerate(evals)}
    items: list[EvalItem] = []
    total: Counter = Counter()
    skipped: Counter = Counter()
    bar = Progress("contamination: eval items", sum(p.record_count for p in evals),
                   enabled=progress)
    for kind in sorted({p.kind for p in evals}):
        group = [p for p in evals if p.kind == kind]
        reader = _text_reader(kind, pool_kind)
        for rec, raw, domain in _resolved(stream_records(group), group, kind, config, reader):
            bar.advance()
            total[rec.package_id] += 1
            norm = normalize(raw)
            if len(norm) < config.contamination_min_chars:
                skipped[rec.package_id] += 1
                continue
            items.append(EvalItem(SampleRef(pos[rec.package_id], rec.position, rec.package_id,
                                            rec.sample_id, rec.split, rec.file, rec.line,
                                            domain), norm))
    bar.finish()
    items.sort(key=lambda it: it.ref.key())
    return items, total, skipped


def anchor_postings(a_hash: np.ndarray, a_item: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct anchors, offset of each one's block, postings) from the (anchor, item)
    entries sorted by anchor: one int32 array of blocks ``[mark, count, item, …]``, the
    ``count`` items of an anchor next to its count, so that a hit reads one place."""
    distinct, first, plen = np.unique(a_hash, return_index=True, return_counts=True)
    block = (first + 2 * np.arange(len(distinct))).astype(np.int32)
    postings = np.empty(len(a_hash) + 2 * len(distinct), dtype=np.int32)
    postings[block] = -1
    postings[block + 1] = plen
    postings[np.arange(len(a_hash)) + 2 + 2 * np.repeat(np.arange(len(distinct)), plen)] = a_item
    return distinct, block, postings


def training_sample(pool: list[Package], config: NearDedupConfig) -> list[str]:
    """Where the rarity of the anchors is measured (module docstring): the compared texts at
    the head of every data file of the pool (packages in stream order, files in manifest
    order), an even share from each: up to ⌈`SAMPLE_RECORDS` / files⌉ records and
    `SAMPLE_CHARS` / files characters. A pool is seldom alike from end to end (a shard per
    source, language or crawl), and its first file alone can be all one kind of text. Refs,
    and texts over ``max_chars``, are left out; a line that is no record ends its file's
    share (`package.head_records`), since the pass over the pool reports it."""
    kind = pool[0].kind
    text_of = _text_reader(kind, kind)
    entries = [(pkg, entry) for pkg in dependency_order(pool) for entry in pkg.files]
    per_records = -(-SAMPLE_RECORDS // max(len(entries), 1))
    per_chars = SAMPLE_CHARS // max(len(entries), 1)
    texts: list[str] = []
    for pkg, entry in entries:
        chars = 0
        for data in head_records(pkg, entry, per_records):
            raw = text_of(data)
            if len(raw) > config.max_chars:
                continue
            if chars + len(raw) > per_chars:
                break
            texts.append(raw)
            chars += len(raw)
    return texts


def build_state(items: list[EvalItem], config: NearDedupConfig, sample: Sequence[str] = (),
                exhaustive: bool = False) -> tuple[ProbeState, int]:
    """The anchor table over all items (module docstring) and the number of anchors; the
    anchors are the item's shingles found in the fewest ``sample`` texts (raw compared
    texts, `training_sample`), then in the fewest items, then by hash. ``exhaustive`` makes
    every shingle an anchor (needing ``⌈t·n⌉`` hits): the same pairs, much slower; a
    cross-check of the filter for measurements."""
    t = config.contamination_threshold
    hasher = MinHasher(1, config.seed, config.shingle_size)
    sets = hasher.shingle_sets([it.text for it in items])
    sizes = np.asarray([len(s) for s in sets], dtype=np.int64)
    item_start = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(sizes, out=item_start[1:])
    item_flat = np.concatenate(sets) if sets else np.zeros(0, dtype=np.uint64)
    distinct_all, at, df = np.unique(item_flat, return_inverse=True, return_counts=True)
    sample_df = np.zeros(len(distinct_all), dtype=np.int64)
    if len(sample):
        seen, seen_df = np.unique(np.concatenate(hasher.shingle_sets(
            [normalize(text) for text in sample])), return_counts=True)
        where = np.minimum(np.searchsorted(seen, distinct_all), max(len(seen) - 1, 0))
        found = seen[where] == distinct_all
        sample_df[found] = seen_df[where[found]]
    plans = [(n, least_overlap(n, t)) if exhaustive else prefix_plan(n, t)
             for n in sizes.tolist()]
    p = np.asarray([plan[0] for plan in plans], dtype=np.int64)
    need = [plan[1] for plan in plans]
    # every item's shingles in rarity order (a rank over the distinct shingles), its first p
    rank = np.empty(len(distinct_all), dtype=np.int64)
    rank[np.lexsort((distinct_all, df, sample_df))] = np.arange(len(distinct_all))
    item_of = np.repeat(np.arange(len(items), dtype=np.int64), sizes)
    by_rarity = np.argsort(item_of * len(distinct_all) + rank[at], kind="stable")
    first_p = np.arange(len(item_flat)) - item_start[item_of] < p[item_of]
    a_hash = item_flat[by_rarity][first_p]
    a_item = item_of[first_p].astype(np.int32)
    order = np.lexsort((a_item, a_hash))
    distinct, block, postings = anchor_postings(a_hash[order], a_item[order])
    size = 1
    while size < 2 * max(len(distinct), 1):
        size *= 2
    table, vals = _build_table(distinct, block, size)
    n_bits = 1 << 16
    while n_bits < min(ANCHOR_BITS_PER_ANCHOR * len(distinct), MAX_ANCHOR_BITS):
        n_bits *= 2
    guard = guard_for(config, frozenset())
    state = ProbeState(
        seed=config.seed, shingle_size=config.shingle_size, threshold=t,
        config_json=config.canonical_json(), bits=anchor_bits(distinct, n_bits), table=table,
        vals=vals, postings=postings, need=np.asarray(need, np.int32), item_flat=item_flat,
        item_start=item_start, item_chars=np.asarray([len(it.text) for it in items], np.int64),
        item_numbers=[guard.sequences(it.text)[0] for it in items])
    return state, len(a_hash)


# --------------------------------------------------------------------------- the run


@dataclass
class Pair:
    item: int
    sample: SampleRef
    common: int
    start: int
    end: int
    numbers_differ: bool


def _probe_pool(pool: list[Package], state: ProbeState, config: NearDedupConfig, workers: int,
                progress: bool) -> tuple[list[Pair], int, int]:
    """Read the pool once as line blocks, which the workers parse and probe (`probe_block`);
    apply the rules across records in record order here, a ref taking its target's pairs.
    Returns (pairs, candidates, samples)."""
    pos = {p.package_id: i for i, p in enumerate(pool)}
    depended = {d for p in pool for d in p.depends_on}
    # (package, sample id) of a depended-on sample → its hits, candidates, domain
    targets: dict[tuple[str, str], tuple[list[Hit], int, str | None]] = {}
    rules = SampleIds(pool)
    pairs: list[Pair] = []
    candidates = 0
    samples = 0
    bar = Progress("contamination: training records", sum(p.record_count for p in pool),
                   enabled=progress)
    if workers <= 1:
        _init_worker(state)
    pending: list[tuple[LineBlock | ShardEnd, Future | None]] = []

    def collect(event: LineBlock | ShardEnd, fut: Future | None) -> None:
        nonlocal candidates, samples
        if isinstance(event, ShardEnd):
            if event.problem is not None:
                raise event.problem
            return
        assert fut is not None
        result: BlockProbe = fut.result()
        own: defaultdict[int, list[Hit]] = defaultdict(list)
        for h in result.hits:
            own[h.sample].append(h)
        for k, sample_id in enumerate(result.ids):
            line = event.first_line + k
            ref = result.refs[k]
            rules.check(event.package_id, event.file, line, sample_id, ref)
            domain = result.domains[k]
            if ref is not None:
                hits, count, target_domain = targets[ref]
                if domain is None:
                    domain = target_domain
            else:
                hits, count = own.get(k, []), int(result.candidates[k])
            if event.package_id in depended:
                targets[(event.package_id, sample_id)] = (hits, count, domain)
            samples += 1
            candidates += count
            if hits:
                sample = SampleRef(pos[event.package_id], event.first_position + k,
                                   event.package_id, sample_id, event.split, event.file, line,
                                   domain)
                pairs.extend(Pair(h.item, sample, h.common, h.start, h.end, h.numbers_differ)
                             for h in hits)
        if result.problem is not None:
            raise result.problem
        bar.advance(len(result.ids))
        pause_point("contamination-pool")

    with process_pool(workers, _init_worker, (state,), PRELOAD) as executor:
        for event in read_blocks(pool, BLOCK_LINES):
            fut = (executor.submit(probe_block, event, config.max_chars)
                   if isinstance(event, LineBlock) else None)
            pending.append((event, fut))
            while len(pending) > 3 * workers:
                collect(*pending.pop(0))
        for job in pending:
            collect(*job)
    bar.finish()
    return pairs, candidates, samples


#: distinct contents per job of `_probe_index`
CONTENT_CHUNK = 1_024


def _probe_index(index: str | Path, pool: list[Package], state: ProbeState,
                 config: NearDedupConfig, workers: int, progress: bool,
                 digests: Future) -> tuple[list[Pair], int, int]:
    """`_probe_pool` over an indexed pool: its samples and their contents as one snapshot of
    the index holds them, each distinct content's normalized text probed once (by the
    workers, which read the texts on their own connections) and its pairs given to every
    sample that holds it. The data files, hashed meanwhile (``digests``: `_digests_aside`),
    must match their manifests, as for `scan`. The same pairs and counts as reading the
    packages: the index holds each compared text normalized, refs resolved to their
    target's content and domain, and ``max_chars`` was checked when the pool was indexed
    under the same config fingerprint."""
    from near_dedup_core import index_store as db
    from near_dedup_core.scan.pool import check_files, indexed_inputs

    with db.database_errors(index), db.open_snapshot(index, config) as snap, \
            process_pool(workers, _init_worker, (state,), PRELOAD) as executor:
        if workers <= 1:
            _init_worker(state)
        indexed = indexed_inputs(snap.indexed_packages(), snap.path, pool)
        source = snap.location if workers > 1 else snap
        samples: list[list[tuple]] = []
        at: dict[int, int] = {}  # content row id -> its rank of first appearance
        ranks: list[int] = []  # each sample's content rank, in pool order
        fresh: list[int] = []
        jobs: list[tuple[list[int], Future]] = []
        for pkg in pool:  # the workers start on the first contents while the rest is read
            rows: list[tuple] = []
            for part in snap.sample_rows(indexed[pkg.package_id]):
                rows.extend(part)
                for row in part:
                    rank = at.get(row[6])
                    if rank is None:
                        rank = at[row[6]] = len(at)
                        fresh.append(row[6])
                    ranks.append(rank)
                while len(fresh) >= CONTENT_CHUNK:
                    ids, fresh = fresh[:CONTENT_CHUNK], fresh[CONTENT_CHUNK:]
                    jobs.append((ids, executor.submit(probe_contents, source, ids)))
            samples.append(rows)
        if fresh:
            jobs.append((fresh, executor.submit(probe_contents, source, fresh)))
        bar = Progress("contamination: training contents", len(at), enabled=progress)
        found: dict[int, list[Hit]] = {}
        count = np.zeros(len(at), dtype=np.int64)
        for ids, fut in jobs:
            hits, per = fut.result()
            first = at[ids[0]]
            count[first:first + len(ids)] = per
            for h in hits:
                found.setdefault(ids[h.sample], []).append(h)
            bar.advance(len(ids))
            pause_point("contamination-pool")
        bar.finish()
        check_files(pool, digests.result())
    of_sample = np.asarray(ranks, dtype=np.int64)
    with_hits = np.zeros(len(at), dtype=bool)
    with_hits[[at[c] for c in found]] = True
    starts = np.cumsum([0] + [len(rows) for rows in samples])
    pairs: list[Pair] = []
    for k in np.flatnonzero(with_hits[of_sample]).tolist():  # the samples with pairs only
        input_pos = int(np.searchsorted(starts, k, side="right")) - 1
        position, sample_id, split, file, line, domain, content = \
            samples[input_pos][k - int(starts[input_pos])]
        sample = SampleRef(input_pos, position, pool[input_pos].package_id, sample_id, split,
                           file, line, domain)
        pairs.extend(Pair(h.item, sample, h.common, h.start, h.end, h.numbers_differ)
                     for h in found[content])
    return pairs, int(count[of_sample].sum()), len(ranks)


def _digests_aside(paths: list[str]) -> Future:
    """The sha256 of each file, computed by a thread of its own while the caller reads the
    items and builds the anchors (hashlib runs without the GIL, on the core the worker pool
    does not use yet). A daemon thread: an error elsewhere does not wait for it."""
    import threading

    from near_dedup_core.scan.pool import file_digests

    out: Future = Future()

    def run() -> None:
        try:
            out.set_result(file_digests(paths))
        except BaseException as exc:  # noqa: BLE001 (handed to the caller through the future)
            out.set_exception(exc)

    threading.Thread(target=run, name="near-dedup-digests", daemon=True).start()
    return out


def _ref_json(ref: SampleRef, with_domain: bool) -> dict:
    out = {"package_id": ref.package_id, "sample_id": ref.sample_id, "split": ref.split,
           "file": ref.file, "line": ref.line}
    if with_domain:
        out["domain"] = ref.domain
    return out


def _package_json(p: Package) -> dict:
    return {"package_id": p.package_id, "kind": p.kind, "manifest_sha256": p.manifest_sha256,
            "records": p.record_count, "path": str(p.path)}


def summarize(lines: list[dict], evals: list[dict], training_samples: int) -> dict:
    """``summary.json`` from the report lines and the per-eval item counts (``evals``:
    package_id, items, items_checked, items_skipped_short); `verify_contamination` recomputes
    it the same way."""
    leaked: dict[str, set] = defaultdict(set)
    affected: dict[str, set] = defaultdict(set)
    groups: dict[tuple[str, str | None, str], tuple[set, set]] = {}
    contaminated = set()
    for row in lines:
        e, t = row["eval"], row["training"]
        item = e["sample_id"]
        sample = (t["package_id"], t["sample_id"])
        leaked[e["package_id"]].add(item)
        affected[e["package_id"]].add(sample)
        contaminated.add(sample)
        g = groups.setdefault((e["package_id"], t["domain"], t["split"]), (set(), set()))
        g[0].add(item)
        g[1].add(sample)
    out = []
    for ev in evals:
        pid = ev["package_id"]
        by = [{"domain": d, "split": s, "items_leaked": len(g[0]), "training_samples": len(g[1])}
              for (p, d, s), g in sorted(groups.items(),
                                         key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
              if p == pid]
        out.append({**ev, "items_leaked": len(leaked[pid]),
                    "training_samples_affected": len(affected[pid]), "by_training": by})
    return {"evals": out, "pairs": len(lines),
            "training": {"samples": training_samples, "samples_contaminated": len(contaminated)}}


def counts_of(summary: dict) -> dict:
    """The manifest's ``counts`` (all recomputable from the lines and the eval item counts)."""
    ev = summary["evals"]
    return {"pairs": summary["pairs"],
            "items": sum(e["items"] for e in ev),
            "items_checked": sum(e["items_checked"] for e in ev),
            "items_skipped_short": sum(e["items_skipped_short"] for e in ev),
            "items_leaked": sum(e["items_leaked"] for e in ev),
            "training_samples": summary["training"]["samples"],
            "training_samples_contaminated": summary["training"]["samples_contaminated"]}


@dataclass
class ContaminationResult:
    output: Path
    counts: dict

    def summary(self) -> str:
        c = self.counts
        return (f"contamination report {self.output}: {c['items_leaked']:,} of "
                f"{c['items_checked']:,} eval items leaked ({c['items_skipped_short']:,} "
                f"skipped as too short) into {c['training_samples_contaminated']:,} of "
                f"{c['training_samples']:,} training samples; {c['pairs']:,} pairs")


@rare_collections()  # the pool's hits and pairs: see near_dedup_core.collector
def contamination_report(config: NearDedupConfig, eval_paths: Sequence[str | Path],
                         pool_paths: Sequence[str | Path], output_dir: str | Path, *,
                         workers: int = 1, progress: bool = False,
                         index: str | Path | None = None) -> ContaminationResult:
    """Check every eval item against every training sample of the pool; freeze the report
    in ``output_dir`` (see module doc). Nothing is written on any error. With ``index`` (a
    SQLite path or a PostgreSQL URL holding every pool package, as for `scan`), the pool's
    normalized texts are read from the index instead of parsed and normalized again
    (`_probe_index`); the report is the same bytes."""
    output = Path(output_dir)
    evals_p = [Path(p) for p in eval_paths]
    pool_p = [Path(p) for p in pool_paths]
    require_new_output_outside(output, evals_p + pool_p)
    pool = open_packages(pool_p)
    evals = open_evals(evals_p)
    pool_ids = {p.package_id for p in pool}
    for e in evals:
        if e.package_id in pool_ids:
            raise NearDedupError(f"{where(e.package_id)}: given both as an eval package and as "
                                 f"an input; an eval set is not training data")
    config.check_pool_records(sum(p.record_count for p in pool))
    digests = None
    if index is not None:  # imported before the forkserver starts: the workers have it
        from near_dedup_core.index_store import postgres_url
        from near_dedup_core.scan.pool import data_files

        if postgres_url(index) is None:
            index = Path(index)
        digests = _digests_aside(data_files(pool))
    if workers > 1:
        start_forkserver(PRELOAD)  # its start overlaps reading the items below
    items, per_eval, skipped = read_items(evals, pool[0].kind, config, progress)
    state, n_anchors = build_state(items, config, training_sample(pool, config))
    if index is not None and digests is not None:
        pairs, candidates, samples = _probe_index(index, pool, state, config, workers, progress,
                                                  digests)
    else:
        pairs, candidates, samples = _probe_pool(pool, state, config, workers, progress)
    pairs.sort(key=lambda p: (items[p.item].ref.key(), p.sample.key()))
    lines = []
    for pair in pairs:
        item_shingles = int(state.item_start[pair.item + 1] - state.item_start[pair.item])
        lines.append({
            "eval": _ref_json(items[pair.item].ref, False),
            "training": _ref_json(pair.sample, True),
            "containment": pair.common / item_shingles, "item_shingles": item_shingles,
            "common_shingles": pair.common, "span": {"start": pair.start, "end": pair.end},
            "numbers_differ": pair.numbers_differ})
    eval_counts = [{"package_id": e.package_id, "items": per_eval[e.package_id],
                    "items_checked": per_eval[e.package_id] - skipped[e.package_id],
                    "items_skipped_short": skipped[e.package_id]} for e in evals]
    summary = summarize(lines, eval_counts, samples)
    counts = counts_of(summary)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tool_version": __version__,
        "algorithm_version": ALGORITHM_VERSION, "config": config.model_dump(mode="json"),
        "candidates": {"filter": "prefix", "order": ANCHOR_ORDER, "extra_hits": EXTRA_HITS,
                       "anchors": n_anchors, "verified": candidates},
        "evals": [_package_json(e) for e in evals],
        "inputs": [_package_json(p) for p in pool],
        "counts": counts,
        "files": {"contamination.jsonl": {"lines": len(lines)}},
    }
    with atomic_dir(output) as tmp:
        write_jsonl(tmp / "contamination.jsonl", lines)
        write_json(tmp / "summary.json", summary)
        write_json(tmp / "manifest.json", manifest)
        write_checksums(tmp)
    return ContaminationResult(output, counts)


# --------------------------------------------------------------------------- verify


def is_contamination_report(path: Path) -> bool:
    """Whether ``path/manifest.json`` declares a contamination report (no other check)."""
    try:
        return read_json_object(Path(path) / "manifest.json", "report").get("format") == FORMAT
    except NearDedupError:
        return False


def _line_problem(row: dict, threshold: float, evals: dict, inputs: dict) -> str | None:
    for f in LINE_FIELDS:
        if f not in row:
            return f"missing field '{f}'"
    e, t, span = row["eval"], row["training"], row["span"]
    if not isinstance(e, dict) or not isinstance(t, dict) or not isinstance(span, dict):
        return "eval, training and span must be objects"
    for ref, fields in ((e, ("package_id", "sample_id", "split")),
                        (t, ("package_id", "sample_id", "split", "domain"))):
        for f in fields:
            if f not in ref:
                return f"missing field '{f}' in a sample reference"
    if e["package_id"] not in evals:
        return f"eval package {e['package_id']} is not among the manifest's evals"
    if t["package_id"] not in inputs:
        return f"training package {t['package_id']} is not among the manifest's inputs"
    n, c, value = row["item_shingles"], row["common_shingles"], row["containment"]
    if type(n) is not int or type(c) is not int or not 0 < c <= n:
        return "item_shingles and common_shingles must be integers with 0 < common ≤ item"
    if value != c / n:
        return f"containment {value} is not common_shingles / item_shingles = {c / n}"
    if value < threshold:
        return f"containment {value} is below the threshold {threshold}"
    start, end = span.get("start"), span.get("end")
    if type(start) is not int or type(end) is not int or not 0 <= start < end:
        return "span must have integers 0 ≤ start < end"
    if type(row["numbers_differ"]) is not bool:
        return "numbers_differ must be true or false"
    return None


@dataclass
class ContaminationSummary:
    path: Path
    manifest: dict

    @property
    def counts(self) -> dict:
        return self.manifest["counts"]

    def summary(self) -> str:
        c = self.counts
        return (f"contamination report {self.path}: OK — checksums, manifest, summary and "
                f"{c['pairs']:,} pairs consistent ({c['items_leaked']:,} of "
                f"{c['items_checked']:,} eval items leaked into "
                f"{c['training_samples_contaminated']:,} training samples)")


def iter_lines(path: Path) -> Iterator[tuple[int, dict]]:
    return iter_json_objects(path, "contamination.jsonl", f"contamination report {path}")


def verify_contamination(path: str | Path) -> ContaminationSummary:
    """Check a contamination report folder: checksums, manifest, every line, and the summary
    and counts recomputed from the lines. Raises NearDedupError naming the first problem."""
    path = Path(path)
    label = f"contamination report {path}"
    if not path.is_dir():
        raise NearDedupError(f"{label}: not a directory")
    listed = verify_checksums(path, "contamination report")
    for name in ("manifest.json", *FILES):
        if name not in listed:
            raise NearDedupError(f"{label}: {name} is not listed in checksums.sha256")
    manifest = read_json_object(path / "manifest.json", label)
    if manifest.get("format") != FORMAT:
        raise NearDedupError(f"{label}: manifest.json is not a contamination report manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise NearDedupError(f"{label}: format_version {manifest.get('format_version')} is "
                             f"not {FORMAT_VERSION}")
    try:
        threshold = float(manifest["config"]["contamination_threshold"])
        evals = {e["package_id"]: e for e in manifest["evals"]}
        inputs = {i["package_id"]: i for i in manifest["inputs"]}
        recorded_lines = manifest["files"]["contamination.jsonl"]["lines"]
    except (KeyError, TypeError, ValueError):
        raise NearDedupError(f"{label}: manifest.json lacks config, evals, inputs or "
                             f"files") from None
    lines = []
    seen: set[tuple] = set()
    for n, row in iter_lines(path):
        problem = _line_problem(row, threshold, evals, inputs)
        if problem is not None:
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: {problem}")
        key = (row["eval"]["package_id"], row["eval"]["sample_id"],
               row["training"]["package_id"], row["training"]["sample_id"])
        if key in seen:
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: the pair appears twice")
        seen.add(key)
        lines.append(row)
    if recorded_lines != len(lines):
        raise NearDedupError(f"{label}: contamination.jsonl has {len(lines)} lines, "
                             f"manifest.json says {recorded_lines}")
    summary = read_json_object(path / "summary.json", label)
    try:
        eval_counts = [{k: e[k] for k in ("package_id", "items", "items_checked",
                                          "items_skipped_short")} for e in summary["evals"]]
        training = summary["training"]["samples"]
    except (KeyError, TypeError):
        raise NearDedupError(f"{label}: summary.json lacks evals or training") from None
    if [e["package_id"] for e in eval_counts] != list(evals):
        raise NearDedupError(f"{label}: summary.json evals differ from manifest.json evals")
    for e in eval_counts:
        if e["items"] != evals[e["package_id"]].get("records") or \
                e["items_checked"] + e["items_skipped_short"] != e["items"]:
            raise NearDedupError(f"{label}: summary.json item counts of {e['package_id']} do "
                                 f"not add up to its records in manifest.json")
    if training != sum(i.get("records", 0) for i in inputs.values()):
        raise NearDedupError(f"{label}: summary.json training samples differ from the "
                             f"inputs' records in manifest.json")
    recomputed = summarize(lines, eval_counts, training)
    if recomputed != summary:
        raise NearDedupError(f"{label}: summary.json does not match contamination.jsonl")
    if manifest.get("counts") != counts_of(recomputed):
        raise NearDedupError(f"{label}: counts in manifest.json do not match "
                             f"contamination.jsonl and summary.json")
    return ContaminationSummary(path, manifest)


# --------------------------------------------------------------------------- consumers


@dataclass(frozen=True)
class ContaminationView:
    """What a mixture needs from a verified contamination report."""

    path: Path
    manifest_sha256: str
    checksums_sha256: str
    manifest: dict
    contaminated: set[tuple[str, str]]  # training (package_id, sample_id) of the lines
    contaminated_split: dict[tuple[str, str], str]

    @property
    def inputs(self) -> list[dict]:
        return self.manifest["inputs"]


def read_contamination(path: Path) -> ContaminationView:
    """Verify a contamination report and load its contaminated training samples."""
    verify_contamination(path)
    manifest = read_json_object(path / "manifest.json", f"contamination report {path}")
    split: dict[tuple[str, str], str] = {}
    for _, row in iter_lines(path):
        t = row["training"]
        split[(t["package_id"], t["sample_id"])] = t["split"]
    return ContaminationView(path=path, manifest_sha256=sha256_file(path / "manifest.json"),
                             checksums_sha256=sha256_file(path / "checksums.sha256"),
                             manifest=manifest, contaminated=set(split),
                             contaminated_split=split)


def copy_report(src: Path, dest: Path, checksums_sha256: str) -> None:
    """Byte-identical copy of a verified report folder, re-verified at ``dest`` and pinned
    to the checksums file read when it was planned."""
    for rel in [*verify_checksums(src, "contamination report"), "checksums.sha256"]:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
    verify_checksums(dest, "contamination report copy")
    if sha256_file(dest / "checksums.sha256") != checksums_sha256:
        raise NearDedupError(f"contamination report {src} changed while the mixture was built")
