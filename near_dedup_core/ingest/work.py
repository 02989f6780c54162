"""The worker side of `index`: one block of lines in, the block's rows out.

A worker gets the raw bytes of whole JSONL lines (`package.LineBlock`; a local pool's
worker reads them from memory it shares with the main process) and does everything
that does not need the batch's state, so that the main process only assigns row ids and
writes:

1. parse and check every line (`package.parse_block`), take each record's compared text,
   check ``max_chars``, and hash it (``text_sha256``);
2. look the (text_sha256, scope) pairs up among the raw texts already indexed by earlier
   batches (`index_store.RawTextLookup`, on the worker's own read connection): a known raw text
   has a known content, which is never normalized or signed again;
3. normalize the rest, derive their content ids, and sign and compress each distinct one:
   MinHash signature, shingle-set size, LSH band keys, zstd text.

A content that only the main process can tell is known (earlier in this batch, or indexed
under another raw text that normalizes the same) is signed here in vain and dropped there:
that costs time, never a wrong row. A block picked by the main process also trains a zstd
dictionary on its new texts (``train``): the first block of a batch compresses its own texts
with it (``use_trained``), any other keeps it for the next group of blocks. The blocks sent
while the first one is still under way return their texts uncompressed (``compress``
false): the main process compresses them with its dictionary once it has it.

The first bad line or a ``max_chars`` breach ends the block's work: the result carries the
records before it (for the checks across records, which the main process applies in order)
and the located error, which the main process raises when it reaches that block.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import orjson

from near_dedup_core import index_store as db
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.package import LineBlock, attach_shared, parse_block
from near_dedup_core.params import WorkerParams

if TYPE_CHECKING:
    from near_dedup_core.signature import MinHasher, Spans

#: What a worker runs, for the pool's forkserver to import before it forks one (the main
#: process of a pooled `index` imports this module for its records alone, and never the
#: kernels: numba, about 0.3 s of CPU): this module, the kernels' modules, then their
#: warm-up (numba's CPU target and the normalization table, `near_dedup_core._forkserver`).
WORKER_MODULES = (__name__, "near_dedup_core.compare",
                  "near_dedup_core.normalize", "near_dedup_core.signature")


class BlockJob(NamedTuple):
    block: LineBlock
    params: WorkerParams
    tokenizer: dict | None  # the package's (cpt scope)
    known_texts: str | None  # where to look raw texts up (SQLite path, PostgreSQL URL), or None
    dictionary: bytes | None  # zstd dictionary to compress with
    train: bool  # train a new dictionary on this block's new texts
    use_trained: bool  # compress with the dictionary just trained (if any), not ``dictionary``
    validate_only: bool  # a package indexed before: check its lines, nothing else
    compress: bool = True  # False: ``NewContents.blobs`` are the texts' UTF-8, uncompressed


class NewContents(NamedTuple):
    """Distinct contents of a block that the index did not know by their raw text, in order
    of first appearance."""

    content_ids: list[bytes]
    scopes: list[int]  # index into BlockResult.scopes
    norm_chars: np.ndarray  # int64
    sizes: np.ndarray  # shingle-set sizes (0 below min_chars)
    sigs: np.ndarray  # (n, num_perm) uint16 stored values (zeros below min_chars)
    keys: np.ndarray  # (n, bands) int64 band keys
    blobs: list[bytes]  # zstd texts (their UTF-8 when the job said not to compress)


class BlockResult(NamedTuple):
    """One block's records in line order. Per record: its sample id, domain, source JSON,
    text_sha256 (None for a ref), scope (index into ``scopes``, -1 for a ref), the row id of
    its content when its raw text is known (else 0) and otherwise its index in ``new``."""

    sample_ids: list[str]
    refs: dict[int, tuple[str, str]]
    domains: list[str | None]
    sources: list[str | None]
    shas: list[bytes | None]
    scope_of: list[int]
    known: list[int]
    new_of: list[int]
    scopes: list[tuple[str, str]]  # (scope key, label)
    new: NewContents | None
    dictionary: bytes | None  # trained on this block (``train``), if its texts sufficed
    problem: NearDedupError | None


@lru_cache(maxsize=4)
def _hasher(num_perm: int, seed: int, shingle_size: int) -> MinHasher:
    from near_dedup_core.signature import MinHasher

    return MinHasher(num_perm, seed, shingle_size)


_in_pool = False  # this process is a worker of a local pool (`init_worker` ran)
_kept_known_texts: dict[str, db.RawTextLookup] = {}


def init_worker(shared_fd: int | None, shared_size: int) -> None:
    """The initializer of a local pool's worker: maps the pass's `package.SharedBlocks`
    (when ``shared_fd`` is given)."""
    global _in_pool
    _in_pool = True
    if shared_fd is not None:
        attach_shared(shared_fd, shared_size)


def forget_known_texts() -> None:
    """Drop the raw-text lookups this process keeps (`_known_contents`): the writer's own
    process calls it at each batch's start and end, so that a batch never looks raw texts up
    in a lookup kept from an earlier batch, which may still read the state that batch was
    pinned at (an Iceberg lookup checks at most once a second that the published state moved
    on) and miss the texts committed since."""
    kept = list(_kept_known_texts.values())
    _kept_known_texts.clear()
    for known in kept:
        known.close()


def _known_contents(location: str, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
    """Raw-text lookups on a read connection of this worker. A pool worker keeps its
    connection (and its page cache) for its life, which ends before the writer closes the
    index; inline, in the writer's own process, a lookup is kept for one batch
    (`forget_known_texts`) and a SQLite connection for one block only
    (`index_store.IndexBackend.inline_readers_close`): the writer closes last and removes the
    index's -wal and -shm files."""
    index = db.open_index(location)
    if _in_pool or not index.inline_readers_close:
        known = _kept_known_texts.get(location)
        if known is None:
            known = _kept_known_texts[location] = index.known_texts(cached=True)
        return known.contents(shas)
    known = index.known_texts()
    try:
        return known.contents(shas)
    finally:
        known.close()


def sign(params: WorkerParams, texts: list[str], utf8: list[bytes], spans: list[Spans],
         dictionary: bytes | None, compress: bool = True
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    """Stored (16-bit) signatures, shingle-set sizes, band keys and compressed texts (their
    UTF-8 if not ``compress``) of normalized texts, given with their UTF-8 and the code
    points at hand (`signature.Spans`). Texts shorter than min_chars get no signature (rows
    of zeros)."""
    from near_dedup_core.signature import band_keys, renumber, stored_values

    hasher = _hasher(params.num_perm, params.seed, params.shingle_size)
    chars = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    long_idx = np.flatnonzero(chars >= params.min_chars)
    sigs = np.zeros((len(texts), params.num_perm), dtype=np.uint16)
    sizes = np.zeros(len(texts), dtype=np.int64)
    if len(long_idx):
        long_row = np.full(len(texts), -1, dtype=np.int64)
        long_row[long_idx] = np.arange(len(long_idx))
        s, z = hasher.signatures_and_sizes([texts[i] for i in long_idx.tolist()],
                                           renumber(spans, long_row))
        sigs[long_idx] = stored_values(s)
        sizes[long_idx] = z
    keys = band_keys(sigs, params.bands, params.rows)
    return sigs, sizes, keys, db.compress_texts(utf8, dictionary) if compress else utf8


def process_block(job: BlockJob) -> BlockResult:
    """Steps 1–3 of the module doc for one block."""
    from near_dedup_core.compare import (
        compared_text,
        content_id_in,
        cpt_scope,
        scope_hash,
        sft_scope,
        text_sha256,
    )
    from near_dedup_core.normalize import normalize_spans
    from near_dedup_core.signature import renumber

    block, params = job.block, job.params
    parsed = parse_block(block)
    problem = parsed.problem
    sample_ids: list[str] = []
    refs: dict[int, tuple[str, str]] = {}
    domains: list[str | None] = []
    sources: list[str | None] = []
    shas: list[bytes | None] = []
    scope_of: list[int] = []
    raws: list[str | None] = []
    scopes: list[tuple[str, str]] = []
    scope_index: dict[str, int] = {}
    if job.validate_only:
        return BlockResult([r[0] for r in parsed.records],
                           {k: r[2] for k, r in enumerate(parsed.records) if r[2] is not None},
                           [], [], [], [], [], [], [], None, None, problem)
    cpt = None
    if block.kind == "cpt":
        assert job.tokenizer is not None, "a cpt package has a tokenizer (open_packages)"
        cpt = cpt_scope(job.tokenizer)
    for k, (sample_id, data, ref) in enumerate(parsed.records):
        if ref is None:
            raw = compared_text(block.kind, data)
            if len(raw) > params.max_chars:
                problem = LimitExceeded(
                    f"{where(block.package_id, block.file, block.first_line + k)}: sample "
                    f"{sample_id} has {len(raw):,} characters, over max_chars "
                    f"{params.max_chars:,}")
                break
            scope = cpt if cpt is not None else sft_scope(data)
            index = scope_index.get(scope.key)
            if index is None:
                index = scope_index[scope.key] = len(scopes)
                scopes.append((scope.key, scope.label))
            scope_of.append(index)
            shas.append(text_sha256(raw))
            raws.append(raw)
        else:
            refs[k] = ref
            scope_of.append(-1)
            shas.append(None)
            raws.append(None)
        sample_ids.append(sample_id)
        domain = data.get("domain")
        domains.append(domain)
        source = data.get("source")
        sources.append(None if source is None else orjson.dumps(source).decode())
    n = len(sample_ids)
    known = [0] * n
    new_of = [-1] * n
    if problem is not None:
        return BlockResult(sample_ids, refs, domains, sources, shas, scope_of, known, new_of,
                           scopes, None, None, problem)
    if job.known_texts is not None:
        found = _known_contents(job.known_texts, sorted({s for s in shas if s is not None}))
        for k in range(n):
            sha = shas[k]
            if sha is not None:
                known[k] = found.get((sha, scopes[scope_of[k]][0]), 0)
    todo = [k for k in range(n) if raws[k] is not None and not known[k]]
    normalized, spans = normalize_spans([raws[k] for k in todo])  # type: ignore[misc]
    encoded = [t.encode() for t in normalized]
    scope_hashes = [scope_hash(key) for key, _label in scopes]
    first: dict[bytes, int] = {}
    cids: list[bytes] = []
    new_scopes: list[int] = []
    picked: list[int] = []  # the position in ``normalized`` of each new content's text
    for j, k in enumerate(todo):
        cid = content_id_in(scope_hashes[scope_of[k]], encoded[j])
        index = first.get(cid)
        if index is None:
            index = first[cid] = len(cids)
            cids.append(cid)
            new_scopes.append(scope_of[k])
            picked.append(j)
        new_of[k] = index
    texts = [normalized[j] for j in picked]
    utf8 = [encoded[j] for j in picked]
    dictionary = job.dictionary
    trained = None
    if job.train:
        trained = db.train_text_dictionary(utf8)
        if trained is not None and job.use_trained:
            dictionary = trained
    new = None
    if texts:
        new_row = np.full(len(normalized), -1, dtype=np.int64)
        new_row[picked] = np.arange(len(picked))
        sigs, sizes, keys, blobs = sign(params, texts, utf8, renumber(spans, new_row),
                                        dictionary, job.compress)
        new = NewContents(cids, new_scopes, np.fromiter(map(len, texts), np.int64, len(texts)),
                          sizes, sigs, keys, blobs)
    return BlockResult(sample_ids, refs, domains, sources, shas, scope_of, known, new_of,
                       scopes, new, trained, None)
