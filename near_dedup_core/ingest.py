"""`index`: append one batch of snapshot packages to the index, as one transaction.

Pipeline (one pass over the packages' records, both cores busy):

1. main process: stream and validate records (package.stream_records), check ``max_chars``,
   group them in chunks;
2. workers, stage "identify": compared text → scope key, normalized text, content_id,
   text_sha256;
3. main: contents already in the index or earlier in the batch only get a new source row
   (their signatures are never recomputed); new ones get a row id;
4. workers, stage "sign": MinHash signature, shingle-set size, LSH band keys, zstd text;
5. main: executemany into contents/bands/sources inside the open transaction.

Any failure — a bad line in the last package, a limit, a crash or SIGKILL — leaves the index as
it was before the batch: the transaction is only committed at the end, and a brand-new index
is built in a temporary sibling file that is renamed into place after the commit.
Results do not depend on the number of workers.
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np
import orjson

from near_dedup_core import __version__
from near_dedup_core import index_store as db
from near_dedup_core.compare import compared_text, content_id, cpt_scope, sft_scope, text_sha256
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.index_store import postgres as pg
from near_dedup_core.normalize import normalize
from near_dedup_core.package import Package, Record, open_packages, stream_records
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.signature import MinHasher, band_keys, stored_values
from near_dedup_core.workers import parallelism, work_pool

CHUNK = 1024
DICT_REFRESH = 100_000  # new contents per trained text dictionary


@dataclass
class IndexResult:
    index: Path | str  # a SQLite path, or a PostgreSQL location without its password
    batch: int | None
    packages_added: list[str] = field(default_factory=list)
    packages_skipped: list[str] = field(default_factory=list)
    records: int = 0
    new_contents: int = 0
    new_sources: int = 0

    @property
    def known_contents(self) -> int:
        """Sources whose content was already indexed (or appeared earlier in this batch)."""
        return self.new_sources - self.new_contents

    def summary(self) -> str:
        if self.batch is None:
            return (f"index {self.index}: nothing to do, already indexed with the same manifest: "
                    f"{', '.join(self.packages_skipped)}")
        text = (f"index {self.index}: batch {self.batch} added {', '.join(self.packages_added)}: "
                f"{self.records:,} records, {self.new_contents:,} new contents, "
                f"{self.known_contents:,} sources of already known contents")
        if self.packages_skipped:
            text += f"; already indexed: {', '.join(self.packages_skipped)}"
        return text


# --------------------------------------------------------------------------- worker stages


@lru_cache(maxsize=4)
def _hasher(num_perm: int, seed: int, shingle_size: int) -> MinHasher:
    return MinHasher(num_perm, seed, shingle_size)


def identify(kind: str, items: list[tuple[object, str]]) -> list[tuple[str, str, bytes, bytes, str]]:
    """Stage 2: for (scope source, compared text) items → (scope key, scope label, content_id,
    text_sha256, normalized text). The scope source is the tokenizer (cpt) or the record (sft)."""
    out = []
    scope_cache: dict[int, tuple[str, str]] = {}
    for scope_src, raw in items:
        if kind == "cpt":
            scope = scope_cache.get(id(scope_src))
            if scope is None:
                s = cpt_scope(scope_src)  # type: ignore[arg-type]
                scope = scope_cache[id(scope_src)] = (s.key, s.label)
        else:
            s = sft_scope(scope_src)  # type: ignore[arg-type]
            scope = (s.key, s.label)
        norm = normalize(raw)
        out.append((scope[0], scope[1], content_id(scope[0], norm), text_sha256(raw), norm))
    return out


def sign(params: tuple[int, int, int, int, int, int], texts: list[str],
         dictionary: bytes | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    """Stage 4: stored (16-bit) signatures, shingle-set sizes, band keys and compressed texts
    of new contents.
    Texts shorter than min_chars get no signature (rows of zeros, ignored by the caller)."""
    num_perm, seed, shingle_size, bands, rows, min_chars = params
    hasher = _hasher(num_perm, seed, shingle_size)
    long_idx = [i for i, t in enumerate(texts) if len(t) >= min_chars]
    sigs = np.zeros((len(texts), num_perm), dtype=np.uint16)
    sizes = np.zeros(len(texts), dtype=np.int64)
    if long_idx:
        s, z = hasher.signatures_and_sizes([texts[i] for i in long_idx])
        sigs[long_idx] = stored_values(s)
        sizes[long_idx] = z
    keys = band_keys(sigs, bands, rows)
    return sigs, sizes, keys, db.compress_texts(texts, dictionary)


# --------------------------------------------------------------------------- the batch


@dataclass(slots=True)
class _Pending:
    records: list[Record]
    package_rowids: list[int]
    future: Future


class _BatchWriter:
    """Holds the open transaction's state: id maps, pending work, counters."""

    def __init__(self, store: db.BatchTransaction, config: NearDedupConfig, batch: int,
                 executor: Executor, workers: int, kind: str, progress: Progress) -> None:
        self.store = store
        self.config = config
        self.batch = batch
        self.executor = executor
        self.window = max(2, 2 * workers)
        self.kind = kind
        self.progress = progress
        self.params = (config.num_perm, config.seed, config.shingle_size, config.bands,
                       config.rows, config.min_chars)
        self.scope_ids = store.scope_ids()
        self.next_content = store.max_content_rowid() + 1
        self.first_content = self.next_content
        self.band_keys: list[np.ndarray] = []  # written at the end, in key order
        self.band_contents: list[np.ndarray] = []
        self.batch_contents: dict[bytes, int] = {}
        self.ref_targets: dict[str, dict[str, db.RefTarget]] = {}
        self.stage2: collections.deque[_Pending] = collections.deque()
        self.stage4: collections.deque[tuple[list, int | None, Future]] = collections.deque()
        self.new_contents = 0
        self.new_sources = 0
        self.dictionary: tuple[int | None, bytes | None] = (None, None)
        self.dictionary_uses = DICT_REFRESH  # contents compressed with the current dictionary

    # -- refs
    def track_targets(self, package_ids: set[str], indexed: dict[str, int]) -> None:
        """Remember (content, text_sha256, domain) per sample of packages that refs point into;
        already indexed ones are read from the index."""
        for pid in package_ids:
            self.ref_targets[pid] = self.store.ref_targets(indexed[pid]) if pid in indexed else {}

    # -- stage 1
    def add_chunk(self, records: list[Record], package_rowids: list[int], tokenizers: dict) -> None:
        items = []
        for rec in records:
            if rec.ref is None:
                raw = compared_text(self.kind, rec.data)
                if len(raw) > self.config.max_chars:
                    raise LimitExceeded(
                        f"{where(rec.package_id, rec.file, rec.line)}: sample {rec.sample_id} has "
                        f"{len(raw):,} characters, over max_chars {self.config.max_chars:,}")
                scope_src = tokenizers[rec.package_id] if self.kind == "cpt" else rec.data
                items.append((scope_src, raw))
        fut = self.executor.submit(identify, self.kind, items)
        self.stage2.append(_Pending(records, package_rowids, fut))
        while len(self.stage2) > self.window:
            self._finish_identify(self.stage2.popleft())
        self._drain_sign(limit=self.window)

    def flush(self) -> None:
        while self.stage2:
            self._finish_identify(self.stage2.popleft())
        self._drain_sign(limit=0)
        self._write_bands()

    # -- stage 3
    def _scope_id(self, key: str, label: str) -> int:
        sid = self.scope_ids.get(key)
        if sid is None:
            sid = self.scope_ids[key] = self.store.add_scope(key, label)
        return sid

    def _known(self, cids: list[bytes]) -> dict[bytes, int]:
        """Row ids of contents indexed by earlier batches."""
        if self.first_content == 1:  # the index holds no content yet
            return {}
        return self.store.known_contents([c for c in set(cids) if c not in self.batch_contents])

    def _finish_identify(self, pending: _Pending) -> None:
        results = pending.future.result()
        known = self._known([r[2] for r in results])
        new_texts: list[str] = []
        new_rows: list[tuple[int, bytes, int, int]] = []  # (rowid, content_id, scope, chars)
        source_rows = []
        it = iter(results)
        for rec, pkg_rowid in zip(pending.records, pending.package_rowids):
            domain = rec.data.get("domain")
            if rec.ref is None:
                key, label, cid, sha, norm = next(it)
                rowid = self.batch_contents.get(cid) or known.get(cid)
                if rowid is None:
                    rowid = self.next_content
                    self.next_content += 1
                    self.batch_contents[cid] = rowid
                    new_texts.append(norm)
                    new_rows.append((rowid, cid, self._scope_id(key, label), len(norm)))
            else:
                target = self.ref_targets[rec.ref[0]][rec.ref[1]]
                rowid, sha = target.content, target.text_sha256
                if domain is None:
                    domain = target.domain
            targets = self.ref_targets.get(rec.package_id)
            if targets is not None:
                targets[rec.sample_id] = db.RefTarget(rowid, sha, domain)
            source = rec.data.get("source")
            source_rows.append((None, rowid, pkg_rowid, rec.sample_id, rec.split, rec.file, rec.line,
                                rec.position, sha, domain,
                                None if source is None else orjson.dumps(source).decode()))
        self.store.add_sources(source_rows)
        self.new_sources += len(source_rows)
        if new_texts:
            if self.dictionary_uses >= DICT_REFRESH:  # follow the batch as its text drifts
                self._train_dictionary(new_texts)
            self.dictionary_uses += len(new_texts)
            dict_id, dict_data = self.dictionary
            self.stage4.append((new_rows, dict_id,
                                self.executor.submit(sign, self.params, new_texts, dict_data)))
        self.progress.advance(len(pending.records))
        self._drain_sign(limit=self.window)

    def _train_dictionary(self, texts: list[str]) -> None:
        """A new zstd dictionary from these texts; the current one stays if they are too few."""
        data = db.train_text_dictionary(texts)
        if data is not None:
            self.dictionary = (self.store.add_dictionary(self.batch, data), data)
            self.dictionary_uses = 0

    # -- stage 5
    def _drain_sign(self, limit: int) -> None:
        """Write finished signing work in order; wait while more than ``limit`` is pending."""
        while self.stage4 and (len(self.stage4) > limit or self.stage4[0][2].done()):
            rows, dict_id, fut = self.stage4.popleft()
            self._write_contents(rows, dict_id, *fut.result())
            pause_point("index-write")

    def _write_contents(self, rows, dict_id, sigs, sizes, keys, blobs) -> None:
        min_chars = self.config.min_chars
        content_rows = []
        long_rows = []
        for i, (rowid, cid, scope_id, nchars) in enumerate(rows):
            is_long = nchars >= min_chars
            content_rows.append((rowid, cid, scope_id, self.batch, nchars,
                                 int(sizes[i]) if is_long else None,
                                 sigs[i].tobytes() if is_long else None, blobs[i], dict_id))
            if is_long:
                long_rows.append(i)
        self.store.add_contents(content_rows)
        if long_rows:
            rowids = np.asarray([rows[i][0] for i in long_rows], dtype=np.int64)
            self.band_keys.append(keys[long_rows].reshape(-1))
            self.band_contents.append(np.repeat(rowids, keys.shape[1]))
        self.new_contents += len(content_rows)

    def _write_bands(self) -> None:
        """All band rows of the batch in key order: the B-tree is filled front to back."""
        if not self.band_keys:
            return
        keys = np.concatenate(self.band_keys)
        contents = np.concatenate(self.band_contents)
        order = np.lexsort((contents, keys))
        self.store.add_bands(keys[order], contents[order])
        self.band_keys, self.band_contents = [], []


# --------------------------------------------------------------------------- entry point


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_known(pkgs: Sequence[Package], indexed: dict[str, db.IndexedPackage]) -> None:
    for pkg in pkgs:
        known = indexed.get(pkg.package_id)
        if known is not None and known.manifest_sha256 != pkg.manifest_sha256:
            raise NearDedupError(
                f"{where(pkg.package_id, 'manifest.json')}: package is already indexed with "
                f"manifest sha256 {known.manifest_sha256[:12]}…, this one is "
                f"{pkg.manifest_sha256[:12]}…; "
                f"packages are immutable: publish a new package id")


def _append_batch(engine, config: NearDedupConfig, pkgs: list[Package], result: IndexResult,
                  workers: int, executor: str, progress: bool) -> None:
    with engine.begin() as conn:  # BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any error
        _append_in(conn, config, pkgs, result, workers, executor, progress)


def _append_in(conn, config: NearDedupConfig, pkgs: list[Package], result: IndexResult,
               workers: int, executor: str, progress: bool) -> None:
    """The batch inside the open transaction of ``conn``."""
    kind = pkgs[0].kind
    store = db.BatchTransaction.on(conn)
    values = store.meta()
    if values.get("kind", kind) != kind:
        raise NearDedupError(f"index {result.index}: holds {values['kind']} packages; "
                             f"{kind} packages need their own index")
    indexed = store.indexed_packages()
    _check_known(pkgs, indexed)
    new = [p for p in pkgs if p.package_id not in indexed]
    result.packages_skipped = [p.package_id for p in pkgs if p.package_id in indexed]
    result.packages_added = [p.package_id for p in new]
    if not new:
        for _ in stream_records(pkgs):  # the inputs are still validated in full
            pass
        return
    if "kind" not in values:
        store.set_kind(kind)
    seq = store.add_batch(_now(), __version__, [p.package_id for p in new])
    indexed_rowids = {pid: known.rowid for pid, known in indexed.items()}
    rowids = dict(indexed_rowids)
    for pkg in new:
        rowids[pkg.package_id] = store.add_package(
            pkg.package_id, pkg.kind, pkg.manifest_sha256, seq, pkg.record_count,
            orjson.dumps(pkg.manifest).decode())
    result.batch = seq
    new_ids = {p.package_id for p in new}
    new_records = sum(p.record_count for p in new)
    bar = Progress("index: records", new_records, enabled=progress)
    if new_records <= 2 * CHUNK and executor == "local":  # too little work for processes
        workers = 1
    with work_pool(executor, workers) as pool:
        writer = _BatchWriter(store, config, seq, pool, parallelism(pool, workers), kind, bar)
        targets = {d for p in new for d in p.depends_on}
        writer.track_targets(targets, indexed_rowids)
        tokenizers = {p.package_id: p.tokenizer for p in pkgs}
        chunk: list[Record] = []
        chunk_rowids: list[int] = []
        for rec in stream_records(pkgs):
            if rec.package_id not in new_ids:
                continue
            chunk.append(rec)
            chunk_rowids.append(rowids[rec.package_id])
            if len(chunk) >= CHUNK:
                writer.add_chunk(chunk, chunk_rowids, tokenizers)
                chunk, chunk_rowids = [], []
        if chunk:
            writer.add_chunk(chunk, chunk_rowids, tokenizers)
        writer.flush()
    bar.finish()
    result.records = sum(p.record_count for p in new)
    result.new_contents = writer.new_contents
    result.new_sources = writer.new_sources


def index_packages(index_path: str | Path, config: NearDedupConfig,
                   package_paths: Sequence[str | Path], *, workers: int = 1,
                   executor: str = "local", progress: bool = False) -> IndexResult:
    """Validate the packages and append them to the index as one batch (see module doc).
    ``index_path`` is a SQLite file or a ``postgresql://`` URL."""
    paths = [Path(p) for p in package_paths]
    url = db.postgres_url(index_path)
    if url is None:
        db.check_index_path(Path(index_path), paths)
    pkgs = open_packages(paths)
    config.check_pool_records(sum(p.record_count for p in pkgs),
                              "; split it into several batches")
    if url is not None:
        return _index_postgres(url, config, pkgs, workers, executor, progress)
    index_path = Path(index_path)
    result = IndexResult(index=index_path, batch=None)
    created = _missing_dirs(index_path.parent)
    try:
        with db.writer_lock(index_path), db.database_errors(index_path):
            try:
                _index_locked(index_path, config, pkgs, result, workers, executor, progress)
            except (LookupError, ValueError, TypeError, AttributeError) as exc:
                if index_path.is_file():
                    db.raise_if_damaged(index_path, exc)
                raise
    except BaseException:
        for folder in created:  # made for this batch, which failed: leave no trace of it
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return result


def _missing_dirs(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _index_locked(index_path: Path, config: NearDedupConfig, pkgs: list[Package],
                  result: IndexResult, workers: int, executor: str,
                  progress: bool) -> None:
    values = db.existing_meta(index_path)
    if values is not None:
        db.check_binding(index_path, values, config)
        engine = db.open_writable(index_path)
        try:
            _append_batch(engine, config, pkgs, result, workers, executor, progress)
        finally:
            engine.dispose()
        return
    # under the writer lock any temporary sibling is left over from a killed first batch
    for stale in index_path.parent.glob(f".{index_path.name}.tmp-*"):
        stale.unlink()
    tmp = index_path.with_name(f".{index_path.name}.tmp-{os.getpid()}")
    engine = db.open_writable(tmp)
    try:
        db.create_schema(engine, config, _now())
        _append_batch(engine, config, pkgs, result, workers, executor, progress)
        engine.dispose()
        if result.batch is not None:
            os.rename(tmp, index_path)
    finally:
        engine.dispose()
        _remove_db_files(tmp)


def _index_postgres(url: str, config: NearDedupConfig, pkgs: list[Package], workers: int,
                    executor: str, progress: bool) -> IndexResult:
    """The batch on a PostgreSQL index: lock, initialise an empty database and append, all in
    one transaction, so a failure or a killed client leaves the database as it was."""
    result = IndexResult(index=pg.label(url), batch=None)
    engine = pg.engine(url)
    try:
        with engine.begin() as conn:
            pg.lock_writer(conn, url)
            values = pg.read_meta_or_none(conn, url)
            if values is None:
                pg.create_schema(conn, config, _now())
            else:
                db.check_binding(pg.label(url), values, config)
            _append_in(conn, config, pkgs, result, workers, executor, progress)
    except pg.driver_errors() as exc:
        raise pg.connect_error(url, exc) from None
    finally:
        engine.dispose()
    return result


def _remove_db_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = path.with_name(path.name + suffix)
        if p.exists():
            p.unlink()
