"""What the workers run: the anchor table over all items (`build_state`, anchors ordered by
their rarity in a sample of the pool, `training_sample`), and the probe of training texts
against it, from raw line blocks (`probe_block`) or from an index's normalized texts
(`probe_contents`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.contamination.exact import (
    FULL,
    MAX_TOLERANCE,
    ROLES,
    exact_batch,
    item_words,
    prefix_hashes,
    run_hashes,
    word_table,
)
from near_dedup_core.contamination.items import EvalItem, SampleRef, text_reader
from near_dedup_core.contamination.kernels import (
    POSTED_HITS,
    anchor_bits,
    build_key_table,
    common_in_span,
    least_overlap,
    prefix_plan,
    probe_batch,
    widen,
)
from near_dedup_core.contamination.setaside import WORD
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.guard import Guard
from near_dedup_core.normalize import (
    build_table,
    normalize,
    normalize_code_points,
    span_at,
    text_at,
)
from near_dedup_core.package import LineBlock, Package, dependency_order, head_records, parse_block
from near_dedup_core.signature import MinHasher, code_points, utf8_code_points

SAMPLE_RECORDS = 1_000
SAMPLE_CHARS = 4_000_000
ANCHOR_ORDER = (f"document frequency among {SAMPLE_RECORDS:,} training samples from the heads of "
                f"the pool's data files, then among the eval items, then hash")
#: imported by the worker pool's forkserver: `warm_up`
PRELOAD = (__name__,)
ANCHOR_BITS_PER_ANCHOR = 16
MAX_ANCHOR_BITS = 1 << 24


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
    posted_need: np.ndarray
    late_flat: np.ndarray
    late_start: np.ndarray
    item_flat: np.ndarray
    item_start: np.ndarray
    item_chars: np.ndarray
    words: np.ndarray
    max_words: int
    has_length: np.ndarray
    run_table: np.ndarray
    run_vals: np.ndarray
    run_postings: np.ndarray
    run_bits: np.ndarray
    prefix_bits: np.ndarray
    word_flat: np.ndarray
    word_start: np.ndarray
    word_fixed: np.ndarray
    tolerance: np.ndarray
    #: the numbers and identifiers (`fixed_words`) of each item found by its words, None for
    #: others
    short_numbers: list[Counter[str] | None]


class Hits(NamedTuple):
    """Verified pairs as columns, one row a pair, sorted by (sample, item, common, start, end,
    compare_numbers, exact): a worker's result, so that a million matches of a common text
    cost no object each on their way to the report."""

    #: the text (or record) among those probed together
    sample: np.ndarray
    #: the eval item
    item: np.ndarray
    #: the item's shingles (containment) or words (exact) found in the span
    common: np.ndarray
    #: [start, end) of the matched span in the normalized training text
    start: np.ndarray
    end: np.ndarray
    #: whether the report compares the numbers of the span with the item's (`numbers_of`):
    #: for every containment match, and for an exact match with words that differ
    compare_numbers: np.ndarray
    #: method "exact", else "containment"
    exact: np.ndarray
    #: each row's matched span; rows with the same span share one string
    text: list[str]

    @property
    def size(self) -> int:
        return len(self.text)

    @classmethod
    def empty(cls) -> Hits:
        def none(dtype: Any) -> np.ndarray:
            return np.zeros(0, dtype=dtype)

        return cls(none(np.int64), none(np.int64), none(np.int64), none(np.int64),
                   none(np.int64), none(bool), none(bool), [])

    @classmethod
    def concat(cls, parts: list[Hits]) -> Hits:
        """The rows of ``parts``, one after another."""
        if not parts:
            return cls.empty()

        def joined(column: str) -> np.ndarray:
            return np.concatenate([getattr(p, column) for p in parts])

        return cls(joined("sample"), joined("item"), joined("common"), joined("start"),
                   joined("end"), joined("compare_numbers"), joined("exact"),
                   [text for p in parts for text in p.text])


_STATE: ProbeState | None = None


def init_probe_worker(state: ProbeState) -> None:
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


def probe_texts(texts: list[str]) -> tuple[Hits, np.ndarray]:
    """Normalize, hash and probe raw training texts (in a worker): the verified pairs
    (``Hits.sample`` indexes ``texts``) and the number of candidates of each text."""
    cps, offsets = normalize_code_points(texts)
    return _probe_points(cps, offsets)


def _probe_points(cps: np.ndarray, offsets: np.ndarray, verify: bool = True
                  ) -> tuple[Hits, np.ndarray]:
    """`probe_texts` of normalized texts given as code points (`signature.code_points`).
    The kernel widens a pair's span and counts its common shingles when every character
    widening tests is ASCII; else (and for every pair, without ``verify``) it is done here,
    with the same arithmetic."""
    st = _STATE
    assert st is not None, "worker not initialized"
    hasher = MinHasher(1, st.seed, st.shingle_size)
    per_text = np.zeros(len(offsets) - 1, dtype=np.int64)
    found = probe_batch(cps, offsets, st.shingle_size, hasher.shingle_seed, st.bits,
                        st.table, st.vals, st.postings, st.need, st.posted_need, st.late_flat,
                        st.late_start, st.item_flat, st.item_start,
                        st.item_chars, st.threshold, per_text, verify)
    exact = exact_batch(cps, offsets, st.words, st.max_words, st.has_length, st.run_table,
                        st.run_vals, st.run_postings, st.word_flat, st.word_fixed,
                        st.word_start, st.tolerance, st.run_bits, st.prefix_bits)
    contained: list[tuple[int, int, int, int, int]] = []
    texts: list[str] = []
    spans: dict[str, str] = {}  # one string for the matches of one span
    for i, it, _, start, end, in_run, wide_start, wide_end, local in found:
        if local == -1:  # not checked by the kernel (`kernels.probe_batch`)
            norm = text_at(cps, offsets, int(i))
            item = st.item_flat[st.item_start[it]:st.item_start[it + 1]]
            wide_start, wide_end = widen(norm, int(start), int(end))
            # at most the run's matched windows and one window per character widened
            bound = int(in_run) + int(start - wide_start) + int(wide_end - end)
            if bound / len(item) < st.threshold:
                continue
            local = common_in_span(cps, int(offsets[i]) + wide_start,
                                   int(offsets[i]) + wide_end, st.shingle_size,
                                   hasher.shingle_seed, item)
            if local / len(item) < st.threshold:
                continue  # the shingles are scattered, not one nearly contiguous copy
        span = span_at(cps, offsets, int(i), int(wide_start), int(wide_end))
        if not holds_numbers(st.short_numbers[it], span):
            continue  # another date, version or count: another line of a template
        contained.append((int(i), int(it), int(local), int(wide_start), int(wide_end)))
        texts.append(spans.setdefault(span, span))
    # (text, item, common shingles or words, start, end) of every match
    matched = np.asarray(exact, dtype=np.int64).reshape(-1, 5)[:, [0, 1, 4, 2, 3]]
    rows = np.concatenate([np.asarray(contained, dtype=np.int64).reshape(-1, 5), matched])
    for i, start, end in matched[:, [0, 3, 4]].tolist():
        span = span_at(cps, offsets, i, start, end)
        texts.append(spans.setdefault(span, span))
    words = matched[:, 2]
    is_exact = np.arange(len(rows)) >= len(contained)
    compare = np.ones(len(rows), dtype=bool)
    compare[is_exact] = words < (st.word_start[1:] - st.word_start[:-1])[rows[is_exact, 1]]
    order = np.lexsort((is_exact, compare, rows[:, 4], rows[:, 3], rows[:, 2], rows[:, 1],
                        rows[:, 0]))  # the order of `Hits`
    return Hits(rows[order, 0], rows[order, 1], rows[order, 2], rows[order, 3], rows[order, 4],
                compare[order], is_exact[order], [texts[k] for k in order.tolist()]), per_text


_ASCII_DIGIT = re.compile(r"[0-9]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")


def numbers_of(guard: Guard, text: str) -> tuple[str, ...]:
    """The numbers of a normalized text (`Guard.sequences`), without reading an ASCII text
    that holds no digit (where the guard finds none)."""
    if text.isascii() and _ASCII_DIGIT.search(text) is None:
        return ()
    return guard.sequences(text)[0]


class BlockProbe(NamedTuple):
    """A line block of the pool, probed: per record in line order its sample id, ref and own
    domain, and its candidates (0 for a ref, whose text is its target's); the verified pairs
    (``Hits.sample`` indexes the records); and the first problem of the block (a bad line,
    which ends the records before it, or a ``max_chars`` breach, which ends them after that
    record), which the main process raises once it has applied the rules across records to
    the records before it."""

    ids: list[str]
    refs: list[tuple[str, str] | None]
    domains: list[str | None]
    candidates: np.ndarray
    hits: Hits
    problem: NearDedupError | None


def probe_block(block: LineBlock, max_chars: int) -> BlockProbe:
    """Parse and check a block's lines (`package.parse_block`), take each record's compared
    text and probe the texts (`probe_texts`); runs in a worker."""
    parsed = parse_block(block)
    text_of = text_reader(block.kind, block.kind)
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
        return BlockProbe(ids, refs, domains, candidates, Hits.empty(), problem)
    hits, per_text = probe_texts(texts)
    candidates[at] = per_text
    return BlockProbe(ids, refs, domains, candidates,
                      hits._replace(sample=np.asarray(at, dtype=np.int64)[hits.sample]), None)


def probe_block_carrying(state: ProbeState, block: LineBlock, max_chars: int) -> BlockProbe:
    """`probe_block` in a worker that was not given the state when it started (a Ray task)."""
    init_probe_worker(state)
    return probe_block(block, max_chars)


def probe_utf8_carrying(state: ProbeState, texts: list[bytes], ids: list[int],
                        index_path: str) -> tuple[Hits, np.ndarray]:
    """`probe_contents` of texts read by the driver (``texts``: the UTF-8 normalized texts of
    content rows ``ids``), in a worker that does not open the index (a Ray task)."""
    from near_dedup_core import index_store as db

    init_probe_worker(state)
    cps, offsets, bad = utf8_code_points(texts)
    if bad >= 0:
        raise db.damaged(Path(index_path), f"the text of content row {ids[bad]} is not UTF-8")
    return _probe_points(cps, offsets)


_READERS: dict[str, Any] = {}


def probe_contents(source: Any, ids: list[int]) -> tuple[Hits, np.ndarray]:
    """Probe the normalized texts of these content rows (``Hits.sample`` indexes ``ids``).
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


def anchor_postings(a_hash: np.ndarray, a_item: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct anchors, offset of each one's block, postings) from the (anchor, item)
    entries sorted by anchor: one int32 array of blocks ``[mark, count, item, …]``, the
    ``count`` items of an anchor next to its count, so that a hit reads one place."""
    first = np.flatnonzero(np.concatenate([a_hash[:1] == a_hash[:1], a_hash[1:] != a_hash[:-1]]))
    distinct = a_hash[first]
    plen = np.diff(np.append(first, len(a_hash)))
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
    text_of = text_reader(kind, kind)
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
    plan_of = {n: (n, least_overlap(n, t)) if exhaustive else prefix_plan(n, t)
               for n in np.unique(sizes).tolist()}
    plans = [plan_of[n] for n in sizes.tolist()]
    short = np.asarray([len(it.text) < config.contamination_min_chars for it in items],
                       dtype=bool)
    exact_state = _exact_state(items, short, t)
    p = np.asarray([plan[0] for plan in plans], dtype=np.int64)
    p[short] = 0  # a short item is found by its words (`exact`), not by its shingles
    need = [plan[1] for plan in plans]
    # every item's shingles in rarity order (a rank over the distinct shingles), its first p
    by_rank = np.lexsort((distinct_all, df, sample_df))
    rank = np.empty(len(distinct_all), dtype=np.int64)
    rank[by_rank] = np.arange(len(distinct_all))
    item_of = np.repeat(np.arange(len(items), dtype=np.int64), sizes)
    d = max(len(distinct_all), 1)
    rarest_first = distinct_all[by_rank[np.sort(item_of * d + rank[at]) % d]]
    in_item = np.arange(len(item_flat)) - item_start[item_of]
    need_of = np.asarray(need, np.int64)
    # the last need − POSTED_HITS anchors of an item are looked up, not posted (`probe_batch`)
    late = np.minimum(need_of - np.minimum(need_of, POSTED_HITS), p)
    posted = in_item < (p - late)[item_of]
    is_late = ~posted & (in_item < p[item_of])
    late_start = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(late, out=late_start[1:])
    a_hash = rarest_first[posted]
    a_item = item_of[posted].astype(np.int32)
    order = np.lexsort((a_item, a_hash))
    distinct, block, postings = anchor_postings(a_hash[order], a_item[order])
    size = 1
    while size < 2 * max(len(distinct), 1):
        size *= 2
    table, vals = build_key_table(distinct, block, size)
    n_bits = 1 << 16
    while n_bits < min(ANCHOR_BITS_PER_ANCHOR * len(distinct), MAX_ANCHOR_BITS):
        n_bits *= 2
    state = ProbeState(
        seed=config.seed, shingle_size=config.shingle_size, threshold=t,
        config_json=config.canonical_json(), bits=anchor_bits(distinct, n_bits), table=table,
        vals=vals, postings=postings, need=need_of.astype(np.int32),
        posted_need=(need_of - late).astype(np.int32),
        late_flat=rarest_first[is_late], late_start=late_start, item_flat=item_flat,
        item_start=item_start, item_chars=np.asarray([span_width(len(it.text), config)
                                                      for it in items], np.int64),
        **exact_state)
    return state, int(p.sum())


def span_width(chars: int, config: NearDedupConfig) -> int:
    """The width of training text in which an item's matched shingles are counted: its
    own length and a quarter more (an edited copy may be a little longer), so a match is
    one nearly contiguous copy, never shingles scattered over a long text."""
    return max(chars + chars // 4 + config.shingle_size, 1)


#: items of at most this many words are found by their words (`exact`), not by their shingles
EXACT_MAX_WORDS = 16


def tolerance_of(letter_words: int, threshold: float) -> int:
    """The words of an item that may differ in a match (`exact`): as many of its
    ``letter_words`` words with a letter as leave the rest at or above the threshold
    (``(W − k) / W ≥ t``), at most `MAX_TOLERANCE`; its numbers never differ."""
    return min(letter_words - least_overlap(letter_words, threshold), MAX_TOLERANCE) \
        if letter_words else 0


def _exact_state(items: list[EvalItem], short: np.ndarray, threshold: float
                 ) -> dict[str, Any]:
    """The run table of the items found by their words (`exact`): those shorter than ``contamination_min_chars`` or of at most `EXACT_MAX_WORDS` words, with a
    letter (an item of digits alone, a number, is no item). Each item's whole run is in it,
    and, for an item that tolerates k differing words (`tolerance_of`), its k + 1 parts
    (`exact.part_start`): one of them is intact when at most k words differ."""
    table = word_table()
    texts = [it.text for it in items]
    cps, offsets = code_points(texts) if texts else (np.zeros(0, np.uint8),
                                                     np.zeros(1, np.int64))
    flat = np.zeros(max(int(offsets[-1]), 1), dtype=np.uint64)
    number = np.zeros(len(flat), dtype=np.bool_)
    fixed = np.zeros(len(flat), dtype=np.bool_)
    start = np.zeros(len(items) + 1, dtype=np.int64)
    runs = np.zeros(len(items), dtype=np.uint64)
    item_words(cps, offsets, table, flat, number, fixed, start, runs)
    n_words = np.diff(start)
    letters = np.asarray([_ASCII_LETTER.search(t) is not None if t.isascii() else has_letter(t)
                          for t in texts], dtype=bool)
    by_words = (short | (n_words <= EXACT_MAX_WORDS)) & (n_words > 0) & letters
    chosen = np.flatnonzero(by_words)
    so_far = np.concatenate([[0], np.cumsum(number[:start[-1]], dtype=np.int64)])
    numbers = so_far[start[1:]] - so_far[start[:-1]]
    tolerance = np.zeros(len(items), dtype=np.int64)
    letter_words = (n_words - numbers)[chosen]
    by_count = {w: tolerance_of(w, threshold) for w in np.unique(letter_words).tolist()}
    tolerance[chosen] = [by_count[w] for w in letter_words.tolist()]
    # the k + 1 parts of each item that tolerates k words (`exact.part_start`)
    tolerant = np.flatnonzero(tolerance)
    parts = tolerance[tolerant] + 1
    part_item = np.repeat(tolerant, parts)
    part_of = np.repeat(parts, parts)
    q = np.arange(len(part_item)) - np.repeat(np.cumsum(parts) - parts, parts)
    lo = q * n_words[part_item] // part_of
    hi = (q + 1) * n_words[part_item] // part_of
    key = np.concatenate([runs[chosen], run_hashes(flat, start[part_item] + lo,
                                                   start[part_item] + hi)])
    post = np.concatenate([chosen * ROLES + FULL, part_item * ROLES + 1 + q])
    length = np.concatenate([n_words[chosen], hi - lo])
    order = np.lexsort((post, key))
    distinct, block, postings = anchor_postings(key[order], post[order].astype(np.int32))
    size = 1
    while size < 2 * max(len(distinct), 1):
        size *= 2
    run_table, run_vals = build_key_table(distinct, block, size)
    n_bits = 1 << 16
    while n_bits < min(ANCHOR_BITS_PER_ANCHOR * len(distinct), MAX_ANCHOR_BITS):
        n_bits *= 2
    first = np.concatenate([start[chosen], start[part_item] + lo])
    prefixes = np.unique(prefix_hashes(flat, first, first + length))
    p_bits = 1 << 16
    while p_bits < min(ANCHOR_BITS_PER_ANCHOR * len(prefixes), MAX_ANCHOR_BITS):
        p_bits *= 2
    max_words = int(length.max()) if len(length) else 0
    has_length = np.zeros(max_words + 1, dtype=np.bool_)
    has_length[length] = True
    return {"words": table, "max_words": max_words, "has_length": has_length,
            "run_table": run_table, "run_vals": run_vals, "run_postings": postings,
            "run_bits": anchor_bits(distinct, n_bits),
            "prefix_bits": anchor_bits(prefixes, p_bits),
            "word_flat": flat, "word_fixed": fixed, "word_start": start,
            "tolerance": tolerance,
            "short_numbers": [(_NO_NUMBERS if text.isascii() and _ASCII_DIGIT.search(text) is None
                               else Counter(fixed_words(text)))
                              if by_words[k] else None for k, text in enumerate(texts)]}


#: the numbers of an item found by its words that holds none (one object, never changed)
_NO_NUMBERS: Counter[str] = Counter()


def holds_numbers(numbers: Counter[str] | None, span: str) -> bool:
    """Whether a matched span holds every number and identifier of an item found by its
    words (``numbers``, `ProbeState.short_numbers`; None: an item of more words, whose
    numbers may differ)."""
    if not numbers:
        return True
    return not numbers - Counter(fixed_words(span))


def fixed_words(text: str) -> list[str]:
    """The words of a normalized text that never differ in a match of a short item
    (`exact.item_words`): its numbers (digits alone) and identifiers (ASCII letters and
    digits, a digit among them: ``task1``, ``f90``)."""
    return [w for w in WORD.findall(text) if w.isdigit() or
            (w.isascii() and _ASCII_DIGIT.search(w) is not None)]


def has_letter(text: str) -> bool:
    """Whether a normalized text holds a letter (not only digits, signs and spaces)."""
    return any(c.isalpha() for c in text)
