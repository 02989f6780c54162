"""The verify task of `index find`: exact Jaccard of (query text, indexed content) pairs, as
the scan's verify stage computes it (`signature.pair_jaccards` over the normalized texts'
UTF-8), with the numeric/unit guard's verdict on each pair at or above the threshold. A task
gets its queries' normalized texts, or for a query the index holds its content's row id, and
reads the contents' texts from the snapshot (inline), from the index itself (a local worker)
or from the texts shipped with it (Ray)."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.guard import Guard, Sequences, compare, guard_for
from near_dedup_core.params import WorkerParams
from near_dedup_core.signature import MinHasher, pair_jaccards, utf8_batch

#: What a local pool's forkserver imports for `index find`'s workers: the signing and verify
#: tasks and their kernels, and the normalization table (`normalize.warm_up`), which each
#: worker would otherwise build for a batch of enough non-ASCII text.
WORKER_MODULES = ("near_dedup_core.history.sign", "near_dedup_core.history.verify",
                  "near_dedup_core.normalize", "near_dedup_core.signature",
                  "near_dedup_core.guard")


class PairResult(NamedTuple):
    """A verified pair at or above the threshold: its index in the task's pairs, its exact
    Jaccard and the guard's verdict (None, ``numbers`` or ``units``)."""

    k: int
    jaccard: float
    blocked_by: str | None


@lru_cache(maxsize=2)
def _worker_texts(location: str) -> db.TextReader:
    """A local worker's own reader (content rows never change once committed)."""
    return db.open_texts(location)


def verify_queries(source: str | db.TextReader | db.ShippedTexts, params: WorkerParams,
                   queries: list[bytes | int], pairs: np.ndarray,
                   domains: list[frozenset[str]] | None) -> list[PairResult]:
    """The pairs (query, content row id) of ``pairs`` (query: an index into ``queries``,
    each a normalized text as UTF-8 or the row id of the content whose text it is) at or
    above the threshold. ``domains``: per pair, the domains whose extra units the guard
    counts (None: no extra units are configured). Each text is read and hashed once, a
    query's content's with the contents'."""
    reader = _worker_texts(source) if isinstance(source, str) else source
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    given = np.fromiter((isinstance(q, bytes) for q in queries), dtype=bool,
                        count=len(queries))
    shipped = [q for q in queries if isinstance(q, bytes)]
    read = np.asarray([q for q in queries if not isinstance(q, bytes)], dtype=np.int64)
    ids, dense = np.unique(np.concatenate([pairs[:, 1], read]), return_inverse=True)
    dense = dense.reshape(-1) + len(shipped)
    id_list = ids.tolist()
    texts = reader.utf8_texts(id_list)
    buf, offsets = utf8_batch([*shipped, *texts])
    seed = MinHasher(1, params.seed, params.shingle_size).shingle_seed
    text_of = np.zeros(len(queries), dtype=np.int64)  # each query's text in ``buf``
    text_of[given] = np.arange(len(shipped))
    text_of[~given] = dense[len(pairs):]
    left = text_of[pairs[:, 0]]
    right = dense[:len(pairs)]
    jaccards, bad = pair_jaccards(buf, offsets, left, right, params.shingle_size, seed)
    if bad >= len(shipped):
        reader.texts([id_list[bad - len(shipped)]])  # raises, naming the damage
    if bad >= 0:
        raise ValueError(f"a text of find's verify task is not UTF-8 (text {bad})")
    bounds = offsets.tolist()
    seqs: dict[tuple[int, int], Sequences] = {}

    def sequences(guard: Guard, i: int) -> Sequences:  # once per text and guard
        key = (id(guard), i)
        found = seqs.get(key)
        if found is None:
            found = seqs[key] = guard.sequences(buf[bounds[i]:bounds[i + 1]].decode())
        return found

    out = []
    for k in np.flatnonzero(jaccards >= params.threshold).tolist():
        guard = guard_for(params, domains[k] if domains is not None else frozenset())
        verdict = compare(sequences(guard, int(left[k])), sequences(guard, int(right[k])))
        out.append(PairResult(k, float(jaccards[k]), verdict))
    return out
