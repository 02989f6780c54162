"""Stage 4, verify: exact Jaccard of the hashed shingle sets of each candidate pair,
recomputed from the normalized texts stored in the index, in parallel workers. Pairs at or
above the threshold become relations (`Match`); the numeric/unit guard marks those it keeps
apart (``blocked_by``)."""

from __future__ import annotations

from collections import defaultdict, deque
from concurrent.futures import Future
from functools import lru_cache

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.guard import Guard, Sequences, compare, guard_for
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.scan.records import Candidates, Match, Node, Pool, Verified, VerifyParams
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
    by size)."""
    m = len(content_pairs)
    if m == 0:
        return []
    ids, dense = np.unique(content_pairs, return_inverse=True)
    dense = dense.reshape(-1, 2)
    comp = components(dense[:, 0], dense[:, 1], len(ids))[dense[:, 0]]
    order = np.lexsort((dense[:, 1], dense[:, 0], comp))
    comp_sorted = comp[order]
    chunks = []
    start = 0
    for k in range(1, m + 1):
        size = k - start
        if k == m or (size >= VERIFY_CHUNK and comp_sorted[k] != comp_sorted[k - 1]) \
                or size >= 4 * VERIFY_CHUNK:
            chunks.append(order[start:k])
            start = k
    return chunks


def _domains(nodes: list[Node], config: NearDedupConfig) -> dict[int, frozenset[str]] | None:
    """Each content's sample domains, when the config has domain-specific units."""
    if not config.extra_units:
        return None
    found: dict[int, set[str]] = defaultdict(set)
    for n in nodes:
        found[n.content].update(s.domain for s in n.samples if s.domain)
    return {c: frozenset(d) for c, d in found.items()}


def verify_candidates(snap: db.IndexSnapshot, pool: Pool, nodes: list[Node], cand: Candidates,
                      config: NearDedupConfig, workers: int, progress: bool,
                      executor: str = "local"
                      ) -> tuple[dict[int, list[Match]], dict[int, list[Match]]]:
    """Verified relations per later node: pool matches (``other`` the earlier node) and
    history matches (``other`` the history content)."""
    jobs: list[tuple[str, int, int]] = []  # (kind, node a, node b | history content)
    for a, b in cand.pool_pairs.tolist():
        jobs.append(("pool", a, b))
    for i, h in cand.history_pairs:
        jobs.append(("hist", i, h))
    content_pairs = np.asarray([(nodes[a].content, nodes[b].content) if kind == "pool"
                                else (nodes[a].content, b) for kind, a, b in jobs],
                               dtype=np.int64).reshape(-1, 2)
    domains = _domains(nodes, config)
    params = VerifyParams.of(config)
    bar = Progress("scan: verify pairs", len(jobs), enabled=progress)
    chunks = _local_chunks(content_pairs)
    path = snap.location
    args = [content_pairs[c] for c in chunks]
    results: list[list[Verified]] = []
    if executor == "ray":
        results = _verify_on_ray(snap, chunks, args, params, domains, workers, bar)
    elif workers > 1 and len(chunks) > 1:
        with process_pool(workers) as ex:
            for c, res in zip(chunks, ex.map(verify_pairs, [path] * len(args), [params] * len(args),
                                             args, [domains] * len(args))):
                results.append(res)
                bar.advance(len(c))
                pause_point("scan-verify-pool")
    else:
        for c, arg in zip(chunks, args):
            results.append(verify_pairs(snap, params, arg, domains))
            bar.advance(len(c))
    bar.finish()
    near: dict[int, list[Match]] = defaultdict(list)
    hist: dict[int, list[Match]] = defaultdict(list)
    for c, res in zip(chunks, results):
        for k, j, blocked in res:
            kind, a, b = jobs[int(c[k])]
            if kind == "pool":
                near[b].append(Match(a, j, blocked))  # b is the later node (a < b)
            else:
                hist[a].append(Match(b, j, blocked))
    return near, hist


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
