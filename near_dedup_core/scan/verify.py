"""Stage 4, verify: exact Jaccard of the hashed shingle sets of each candidate pair,
recomputed from the normalized texts stored in the index, in parallel workers. Pairs at or
above the threshold become relations (`Matches`); the numeric/unit guard marks those it keeps
apart (``blocked_by``)."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.guard import Guard, Sequences, compare, guard_for
from near_dedup_core.params import WorkerParams
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.scan.records import (
    BLOCKED_BY,
    Matches,
    Nodes,
    Pool,
    Verified,
    distinct,
)
from near_dedup_core.signature import MinHasher, components, pair_jaccards, utf8_batch
from near_dedup_core.workers import Executors, parallelism

#: pairs per work chunk (a connected component is kept whole up to four times this)
VERIFY_CHUNK = 20_000
#: Once fewer pairs remain than ``CHUNKS_PER_WORKER × workers × VERIFY_CHUNK``, chunks
#: shrink to that share of the rest, down to this many pairs (see `component_chunks`).
MIN_VERIFY_CHUNK = 2_000
CHUNKS_PER_WORKER = 8
#: A chunk's cost relative to its distinct texts' sizes, per unit of its pairs' mean text
#: sizes (see `_chunk_cost`).
PAIR_COST = 0.05


@lru_cache(maxsize=2)
def _worker_texts(index_path: str) -> db.TextReader:
    """A verify worker's own read connection (content rows never change once written, so it
    reads the same texts as the scan's snapshot for the ids the scan knows)."""
    return db.open_texts(index_path)


def verify_pairs(source: str | db.TextReader | db.ShippedTexts, params: WorkerParams,
                 pairs: np.ndarray, domains: dict[int, frozenset[str]] | None
                 ) -> list[Verified]:
    """Exact Jaccard of (content, content) pairs (an (n, 2) array); returns the pairs at or
    above the threshold. ``source`` is the scan's snapshot (inline), a Ray task's shipped
    texts, or, in a local worker, the index location to read the texts from.

    The texts are decompressed to UTF-8 bytes, joined into one buffer, and go through
    `signature.pair_jaccards` in one call; only the texts of pairs at or above the threshold
    are decoded to strings, one at a time, for the numeric/unit guard (whose sequences are
    kept per text and guard)."""
    reader = _worker_texts(source) if isinstance(source, str) else source
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    ids, dense = np.unique(pairs, return_inverse=True)
    dense = dense.reshape(-1, 2)
    id_list = ids.tolist()
    buf, offsets = utf8_batch(reader.utf8_texts(id_list))
    seed = MinHasher(1, params.seed, params.shingle_size).shingle_seed
    jaccards, bad = pair_jaccards(buf, offsets, dense[:, 0], dense[:, 1], params.shingle_size,
                                  seed)
    if bad >= 0:
        reader.texts([id_list[bad]])  # raises, naming the damage
        # (a shipped text names the index by its label, as a PostgreSQL index does)
        where = cast(Path, reader.label) if isinstance(reader, db.ShippedTexts) else reader.path
        raise db.damaged(where, f"the text of content row {id_list[bad]} is not UTF-8")
    bounds = offsets.tolist()
    seqs: dict[tuple[int, int], Sequences] = {}

    def sequences(guard: Guard, i: int) -> Sequences:
        key = (id(guard), i)
        found = seqs.get(key)
        if found is None:
            found = seqs[key] = guard.sequences(buf[bounds[i]:bounds[i + 1]].decode())
        return found

    out = []
    passed = np.flatnonzero(jaccards >= params.threshold)
    for k, (x, y), j in zip(passed.tolist(), dense[passed].tolist(),
                            jaccards[passed].tolist(), strict=True):
        a, b = id_list[x], id_list[y]
        doms = (domains.get(a, frozenset()) | domains.get(b, frozenset())) if domains else frozenset()
        guard = guard_for(params, doms)
        out.append(Verified(k, j, compare(sequences(guard, x), sequences(guard, y))))
    return out


def warm_up() -> None:
    """Run `verify_pairs` once in this process, on three texts of a sentence that differ in
    one number: its compiled kernels are loaded (from numba's cache, or compiled) and the
    guard without extra units is built, its patterns compiled. Run in the forkserver of the
    scan's worker pool (`near_dedup_core._forkserver`), while the scan's own process loads the
    pool and finds its candidates: each worker forked from it then starts its first chunk at
    once (on the 20k set, 0.13 s of CPU over the two workers, the guard's patterns most of
    it)."""
    utf8 = [(f"The river rose by {n} metres over the night. The town closed the old bridge "
             "before dawn, moved the market to the square by the church, and asked every "
             "family on the lower streets to carry what they could to the school on the "
             "hill, where the volunteers had set out beds, blankets and hot soup.").encode()
            for n in (3, 4, 3)]
    texts = db.ShippedTexts("warm-up", {k: (blob, None) for k, blob in
                                         enumerate(db.compress_texts(utf8, None))}, {},
                            None, {})
    pairs = np.array([[0, 1], [0, 2], [1, 2]], dtype=np.int64)
    verify_pairs(texts, WorkerParams.of(NearDedupConfig()), pairs, None)


def component_chunks(content_pairs: np.ndarray, workers: int = 1) -> list[np.ndarray]:
    """Pair indexes cut into work chunks that keep connected components together, so each
    worker computes a content's shingle set about once (chunks of a giant component are cut
    by size): a chunk ends at the first component boundary once it holds ``size`` pairs, or
    at ``4 * size`` pairs. ``size`` is ``VERIFY_CHUNK`` while more pairs remain than
    ``CHUNKS_PER_WORKER`` such chunks per worker; after that it is that share of the pairs
    still to cut (at least ``MIN_VERIFY_CHUNK``), so the chunks shrink towards the end and
    the last ones to run are short: a worker that finishes early waits little for the
    other (guided self-scheduling)."""
    m = len(content_pairs)
    if m == 0:
        return []
    share = CHUNKS_PER_WORKER * workers
    ids, dense = np.unique(content_pairs, return_inverse=True)
    dense = dense.reshape(-1, 2)
    comp = components(dense[:, 0], dense[:, 1], len(ids))[dense[:, 0]]
    order = np.lexsort((dense[:, 1], dense[:, 0], comp))
    comp_sorted = comp[order]
    boundaries = np.flatnonzero(comp_sorted[1:] != comp_sorted[:-1]) + 1
    chunks = []
    start = 0
    while start < m:
        size = min(VERIFY_CHUNK, max(MIN_VERIFY_CHUNK, -(-(m - start) // share)))
        at = np.searchsorted(boundaries, start + size)
        end = int(boundaries[at]) if at < len(boundaries) else m
        end = min(end, start + 4 * size, m)
        chunks.append(order[start:end])
        start = end
    return chunks


def _chunk_cost(content_pairs: np.ndarray, sizes: np.ndarray) -> float:
    """The estimated time of verifying a chunk, in units of a text's size (``sizes[p]``: the
    shingle-set sizes of the texts of ``content_pairs[p]``). Each distinct text of a chunk
    is read, decompressed, hashed, and decoded for the guard once (most of a chunk's time
    when its texts are long and each is in few pairs), and each pair probes one text's
    shingles. Fitted on the chunks of the 20k set (least squares over 68 chunk times:
    22 ns per distinct byte, 1.15 ns per pair byte, rank correlation 0.88 with the times,
    0.42 for the pair count)."""
    first = np.unique(content_pairs.reshape(-1), return_index=True)[1]
    return float(sizes.reshape(-1)[first].sum() + PAIR_COST * sizes.sum() / 2)


def costliest_first(chunks: list[np.ndarray], content_pairs: np.ndarray, sizes: np.ndarray
                    ) -> list[np.ndarray]:
    """The chunks (pair indexes into ``content_pairs``) by decreasing `_chunk_cost`, ties in
    their order: the longest-processing-time-first rule, so that a worker that ends early
    finds short chunks left. On the 20k set, a chunk of 2,000 pairs among 2,252 long texts
    took longer than one of 23,000 pairs; ordered by pair count it ran last, alone."""
    cost = [_chunk_cost(content_pairs[c], sizes[c]) for c in chunks]
    return [chunks[k] for k in sorted(range(len(chunks)), key=lambda k: -cost[k])]


def _domains(pool: Pool, config: NearDedupConfig) -> dict[int, frozenset[str]] | None:
    """Each content's sample domains (by content row id), when the config has
    domain-specific units."""
    if not config.extra_units:
        return None
    s = pool.samples
    if s.domain is None or s.domain_labels is None:
        raise ValueError("the pool was loaded without sample domains")
    labels = s.domain_labels
    found: dict[int, set[str]] = defaultdict(set)
    pairs = np.unique(np.stack([pool.contents.rowid[s.content], s.domain], axis=1), axis=0)
    for c, d in pairs.tolist():
        label = labels[d]
        if label:
            found[c].add(label)
    return {c: frozenset(d) for c, d in found.items()}


class _Batch(NamedTuple):
    """Pairs handed to the workers together: node pairs (pool) or (node, history content)
    pairs, their chunks (pair indexes) and the futures of the chunks submitted so far."""

    history: bool
    pairs: np.ndarray
    chunks: list[np.ndarray]
    args: list[np.ndarray]
    futures: deque[Future]


class VerifyJob:
    """The verify stage under way. Pool pairs and history pairs are added separately (the
    pool's as soon as they are known, while the main process still looks up the history).
    Where the workers read the index themselves (a local pool), every chunk is submitted
    when added, and they verify while the main process goes on; otherwise (inline, or Ray,
    whose tasks are shipped their texts read from the scan's snapshot) chunks are submitted
    when collected, at most two per worker ahead. Results are taken in submission order."""

    def __init__(self, snap: db.Snapshot, pool: Pool, nodes: Nodes,
                 config: NearDedupConfig, ex: Executor, executor: Executors,
                 progress: bool) -> None:
        self._snap = snap
        self._rowid = pool.contents.rowid
        self._shingles = np.maximum(pool.contents.shingles, 1)
        self._node_content = nodes.content
        self._ex = ex
        self._workers = executor.workers
        self._in_process = executor.in_process
        self._reads_index = executor.workers_read_index
        self._eager = self._reads_index and not self._in_process
        self._progress = progress
        self._domains = _domains(pool, config)
        self._params = WorkerParams.of(config)
        self._batches: list[_Batch] = []

    def add_pool(self, pairs: np.ndarray) -> None:
        """Node pairs (a, b), a < b."""
        contents = self._node_content[pairs]
        self._add(False, pairs, self._rowid[contents].reshape(-1, 2),
                  self._shingles[contents].reshape(-1, 2))

    def add_history(self, pairs: np.ndarray) -> None:
        """(node, history content row id) pairs."""
        contents = self._node_content[pairs[:, 0]]
        # a history text's size is not at hand: its node's stands for it (a candidate's
        # texts are alike, a match's are of similar size)
        self._add(True, pairs, np.stack([self._rowid[contents], pairs[:, 1]],
                                        axis=1).reshape(-1, 2),
                  np.repeat(self._shingles[contents], 2).reshape(-1, 2))

    def _add(self, history: bool, pairs: np.ndarray, content_pairs: np.ndarray,
             sizes: np.ndarray) -> None:
        content_pairs = content_pairs.astype(np.int64)
        # costliest first, so that the last chunks to run are short ones (the matches are
        # sorted when collected: the order of the chunks does not change the report)
        chunks = costliest_first(component_chunks(content_pairs, self._workers), content_pairs,
                                 sizes)
        args = [content_pairs[c] for c in chunks]
        futures: deque[Future] = deque()
        if self._eager:
            futures.extend(self._submit(arg) for arg in args)
        self._batches.append(_Batch(history, pairs, chunks, args, futures))

    def _submit(self, arg: np.ndarray) -> Future:
        """One chunk's task: it reads its texts from the scan's snapshot (inline), from the
        index itself (a local worker), or from the texts shipped with it."""
        source: str | db.Snapshot | db.ShippedTexts
        if self._in_process:
            source = self._snap
        elif self._reads_index:
            source = self._snap.location
        else:
            source = self._snap.shipped(distinct(arg).tolist())
        return self._ex.submit(verify_pairs, source, self._params, arg,
                               self._chunk_domains(arg))

    def _chunk_domains(self, arg: np.ndarray) -> dict[int, frozenset[str]] | None:
        if self._domains is None:
            return None
        return {c: self._domains[c] for c in distinct(arg).tolist() if c in self._domains}

    def _results(self, batch: _Batch, bar: Progress) -> Iterator[list[Verified]]:
        pending = batch.futures
        todo = iter(batch.args[len(pending):])
        window = 2 * parallelism(self._ex, self._workers)
        for c in batch.chunks:
            while len(pending) < window and (arg := next(todo, None)) is not None:
                pending.append(self._submit(arg))
            yield pending.popleft().result()
            bar.advance(len(c))
            pause_point("scan-verify-pool")

    def collect(self) -> tuple[Matches, Matches]:
        """Pool matches (``later`` the later node, ``other`` the earlier one) and history
        matches (``other`` the history content), each sorted by (later, other)."""
        bar = Progress("scan: verify pairs", sum(len(b.pairs) for b in self._batches),
                       enabled=self._progress)
        found: dict[bool, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {False: [],
                                                                              True: []}
        code = {b: i for i, b in enumerate(BLOCKED_BY)}
        for batch in self._batches:
            for c, res in zip(batch.chunks, self._results(batch, bar), strict=True):
                if res:
                    k, j, b = zip(*res, strict=True)
                    found[batch.history].append((
                        batch.pairs[c[np.asarray(k, dtype=np.int64)]],
                        np.asarray(j, dtype=np.float64),
                        np.asarray([code[x] for x in b], dtype=np.int8)))
        bar.finish()
        out = []
        for history in (False, True):
            parts = found[history]
            pairs = np.concatenate([p for p, _, _ in parts]) if parts else \
                np.zeros((0, 2), dtype=np.int64)
            jac = np.concatenate([j for _, j, _ in parts]) if parts else np.zeros(0)
            blk = np.concatenate([b for _, _, b in parts]) if parts else \
                np.zeros(0, dtype=np.int8)
            if history:  # (node, history content): the node is the later side
                out.append(_matches(pairs[:, 0], pairs[:, 1], jac, blk))
            else:  # (a, b), a < b: b is the later node
                out.append(_matches(pairs[:, 1], pairs[:, 0], jac, blk))
        return out[0], out[1]


def _matches(later: np.ndarray, other: np.ndarray, jaccard: np.ndarray,
             blocked: np.ndarray) -> Matches:
    order = np.lexsort((other, later))
    return Matches(later[order], other[order], jaccard[order], blocked[order])
