"""Stage 4, verify: exact Jaccard of the hashed shingle sets of each candidate pair,
recomputed from the normalized texts stored in the index, in parallel workers. Pairs at or
above the threshold become relations (`Matches`); the numeric/unit guard marks those it keeps
apart (``blocked_by``)."""

from __future__ import annotations

from collections import defaultdict, deque
from concurrent.futures import Executor, Future
from functools import lru_cache

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.guard import Guard, Sequences, compare, guard_for
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.scan.records import (
    BLOCKED_BY,
    Candidates,
    Matches,
    Nodes,
    Pool,
    Verified,
    VerifyParams,
)
from near_dedup_core.signature import MinHasher, components, pair_jaccards
from near_dedup_core.workers import parallelism, process_pool, work_pool

#: pairs per work chunk (a connected component is kept whole up to four times this)
VERIFY_CHUNK = 20_000


@lru_cache(maxsize=2)
def _worker_texts(index_path: str) -> db.IndexTexts:
    """A verify worker's own read connection (content rows never change once written, so it
    reads the same texts as the scan's snapshot for the ids the scan knows)."""
    return db.open_texts(index_path)


def verify_pairs(source: str | db.IndexTexts | db.ShippedTexts, params: VerifyParams,
                 pairs: np.ndarray, domains: dict[int, frozenset[str]] | None
                 ) -> list[Verified]:
    """Exact Jaccard of (content, content) pairs (an (n, 2) array); returns the pairs at or
    above the threshold. ``source`` is the scan's snapshot (inline), a Ray task's shipped
    texts, or, in a local worker, the index location to read the texts from.

    The texts are decompressed to UTF-8 bytes and go through `signature.pair_jaccards` in
    one call; only the texts of pairs at or above the threshold are decoded to strings, for
    the numeric/unit guard (each text read once per chunk and guard)."""
    config = NearDedupConfig.model_validate_json(params.config_json)
    reader = _worker_texts(source) if isinstance(source, str) else source
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    ids, dense = np.unique(pairs, return_inverse=True)
    dense = dense.reshape(-1, 2)
    id_list = ids.tolist()
    blobs = reader.utf8_texts(id_list)
    seed = MinHasher(1, params.seed, params.shingle_size).shingle_seed
    jaccards, bad = pair_jaccards(blobs, dense[:, 0], dense[:, 1], params.shingle_size, seed)
    if bad >= 0:
        reader.texts([id_list[bad]])  # names the damage
        raise NearDedupError(f"index {source}: the text of content row {id_list[bad]} is not "
                             f"UTF-8")
    texts: dict[int, str] = {}
    seqs: dict[tuple[int, int], Sequences] = {}

    def sequences(guard: Guard, i: int) -> Sequences:
        key = (id(guard), i)
        found = seqs.get(key)
        if found is None:
            text = texts.get(i)
            if text is None:
                text = texts[i] = blobs[i].decode()
            found = seqs[key] = guard.sequences(text)
        return found

    out = []
    for k in np.flatnonzero(jaccards >= params.threshold).tolist():
        a, b = id_list[dense[k, 0]], id_list[dense[k, 1]]
        doms = (domains.get(a, frozenset()) | domains.get(b, frozenset())) if domains else frozenset()
        guard = guard_for(config, doms)
        blocked = compare(sequences(guard, int(dense[k, 0])), sequences(guard, int(dense[k, 1])))
        out.append(Verified(k, float(jaccards[k]), blocked))
    return out


def _local_chunks(content_pairs: np.ndarray) -> list[np.ndarray]:
    """Pair indexes cut into work chunks that keep connected components together, so each
    worker computes a content's shingle set about once (chunks of a giant component are cut
    by size): a chunk ends at the first component boundary once it holds ``VERIFY_CHUNK``
    pairs, or at ``4 * VERIFY_CHUNK`` pairs."""
    m = len(content_pairs)
    if m == 0:
        return []
    ids, dense = np.unique(content_pairs, return_inverse=True)
    dense = dense.reshape(-1, 2)
    comp = components(dense[:, 0], dense[:, 1], len(ids))[dense[:, 0]]
    order = np.lexsort((dense[:, 1], dense[:, 0], comp))
    comp_sorted = comp[order]
    boundaries = np.flatnonzero(comp_sorted[1:] != comp_sorted[:-1]) + 1
    chunks = []
    start = 0
    while start < m:
        at = np.searchsorted(boundaries, start + VERIFY_CHUNK)
        end = int(boundaries[at]) if at < len(boundaries) else m
        end = min(end, start + 4 * VERIFY_CHUNK, m)
        chunks.append(order[start:end])
        start = end
    return chunks


def _domains(pool: Pool, config: NearDedupConfig) -> dict[int, frozenset[str]] | None:
    """Each content's sample domains (by content row id), when the config has
    domain-specific units."""
    if not config.extra_units:
        return None
    s = pool.samples
    found: dict[int, set[str]] = defaultdict(set)
    pairs = np.unique(np.stack([pool.contents.rowid[s.content], s.domain], axis=1), axis=0)
    for c, d in pairs.tolist():
        label = s.domain_labels[d]
        if label:
            found[c].add(label)
    return {c: frozenset(d) for c, d in found.items()}


class VerifyJob:
    """The verify stage under way: chunks submitted to the workers (or, inline, computed when
    collected). Between `start` and `collect` the caller's process is free for other work."""

    def __init__(self, snap: db.IndexSnapshot, pool: Pool, nodes: Nodes, cand: Candidates,
                 config: NearDedupConfig, ex: Executor | None, workers: int, progress: bool,
                 executor: str) -> None:
        rowid = pool.contents.rowid
        content_pairs = np.concatenate([
            rowid[nodes.content[cand.pool_pairs]].reshape(-1, 2),
            np.stack([rowid[nodes.content[cand.history_pairs[:, 0]]],
                      cand.history_pairs[:, 1]], axis=1)]).astype(np.int64).reshape(-1, 2)
        self._cand = cand
        self._snap = snap
        self._workers = workers
        self._executor = executor
        self._domains = _domains(pool, config)
        self._params = VerifyParams.of(config)
        self._bar = Progress("scan: verify pairs", len(content_pairs), enabled=progress)
        self._chunks = _local_chunks(content_pairs)
        self._args = [content_pairs[c] for c in self._chunks]
        self._futures: list[Future] | None = None
        if executor != "ray" and ex is not None:
            self._futures = [ex.submit(verify_pairs, snap.location, self._params, arg,
                                       self._chunk_domains(arg)) for arg in self._args]

    def _chunk_domains(self, arg: np.ndarray) -> dict[int, frozenset[str]] | None:
        if self._domains is None:
            return None
        return {c: self._domains[c] for c in np.unique(arg).tolist() if c in self._domains}

    def collect(self) -> tuple[Matches, Matches]:
        """Pool matches (``later`` the later node, ``other`` the earlier one) and history
        matches (``other`` the history content), each sorted by (later, other)."""
        results: list[list[Verified]] = []
        if self._executor == "ray":
            results = _verify_on_ray(self._snap, self._chunks, self._args, self._params,
                                     self._domains, self._workers, self._bar)
        elif self._futures is not None:
            for c, fut in zip(self._chunks, self._futures):
                results.append(fut.result())
                self._bar.advance(len(c))
                pause_point("scan-verify-pool")
        else:
            for c, arg in zip(self._chunks, self._args):
                results.append(verify_pairs(self._snap, self._params, arg,
                                            self._chunk_domains(arg)))
                self._bar.advance(len(c))
        self._bar.finish()
        index, jaccard, blocked = [], [], []
        code = {b: i for i, b in enumerate(BLOCKED_BY)}
        for c, res in zip(self._chunks, results):
            if res:
                k, j, b = zip(*res)
                index.append(c[np.asarray(k, dtype=np.int64)])
                jaccard.append(np.asarray(j, dtype=np.float64))
                blocked.append(np.asarray([code[x] for x in b], dtype=np.int8))
        g = np.concatenate(index) if index else np.zeros(0, dtype=np.int64)
        jac = np.concatenate(jaccard) if jaccard else np.zeros(0, dtype=np.float64)
        blk = np.concatenate(blocked) if blocked else np.zeros(0, dtype=np.int8)
        n_pool = len(self._cand.pool_pairs)
        is_pool = g < n_pool
        pool_pairs = self._cand.pool_pairs[g[is_pool]]
        hist_pairs = self._cand.history_pairs[g[~is_pool] - n_pool]
        near = _matches(pool_pairs[:, 1], pool_pairs[:, 0], jac[is_pool], blk[is_pool])
        hist = _matches(hist_pairs[:, 0], hist_pairs[:, 1], jac[~is_pool], blk[~is_pool])
        return near, hist


def _matches(later: np.ndarray, other: np.ndarray, jaccard: np.ndarray,
             blocked: np.ndarray) -> Matches:
    order = np.lexsort((other, later))
    return Matches(later[order], other[order], jaccard[order], blocked[order])


def verify_candidates(snap: db.IndexSnapshot, pool: Pool, nodes: Nodes, cand: Candidates,
                      config: NearDedupConfig, workers: int, progress: bool,
                      executor: str = "local") -> tuple[Matches, Matches]:
    """Verified relations (see `VerifyJob.collect`), with a process pool of ``workers`` of
    its own (or Ray, or inline for one worker)."""
    if executor == "ray" or workers <= 1:
        return VerifyJob(snap, pool, nodes, cand, config, None, workers, progress,
                         executor).collect()
    with process_pool(workers) as ex:
        return VerifyJob(snap, pool, nodes, cand, config, ex, workers, progress,
                         executor).collect()


def _verify_on_ray(snap: db.IndexSnapshot, chunks: list[np.ndarray],
                   args: list[np.ndarray], params: VerifyParams,
                   domains: dict[int, frozenset[str]] | None, workers: int,
                   bar: Progress) -> list[list[Verified]]:
    """The chunks as Ray tasks, each shipped with its contents' compressed texts read from the
    scan's snapshot (`index_store.ShippedTexts`): a task never opens the index. At most two
    tasks per cluster CPU are in flight, and results are taken in submission order."""
    results: list[list[Verified]] = []
    pending: deque[tuple[int, Future]] = deque()
    with work_pool("ray", workers) as ex:
        window = 2 * parallelism(ex, workers)
        for c, arg in zip(chunks, args):
            texts = snap.shipped(np.unique(arg).tolist())
            pending.append((len(c), ex.submit(verify_pairs, texts, params, arg, domains)))
            while len(pending) > window:
                n, fut = pending.popleft()
                results.append(fut.result())
                bar.advance(n)
        while pending:
            n, fut = pending.popleft()
            results.append(fut.result())
            bar.advance(n)
    return results
