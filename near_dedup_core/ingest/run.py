"""`index_packages`, the entry point of `index`: checks the inputs against the index, opens
the batch's transaction (a staged file for a brand-new SQLite index, the writer's lock
otherwise) and runs the pipeline of `near_dedup_core.ingest` in it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from near_dedup_core import __version__
from near_dedup_core import index_store as db
from near_dedup_core.collector import rare_collections
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import utc_now
from near_dedup_core.index_store import postgres as pg
from near_dedup_core.ingest import batch, work
from near_dedup_core.ingest.batch import BatchWriter
from near_dedup_core.package import Package, open_packages
from near_dedup_core.progress import Progress
from near_dedup_core.workers import Executors, choose_executor, parallelism, work_pool

__all__ = ["IndexResult", "batch", "index_packages", "work"]


@dataclass
class IndexResult:
    index: Path | str  # a SQLite path, or a PostgreSQL location without its password
    batch: int | None
    packages_added: list[str] = field(default_factory=list)
    packages_skipped: list[str] = field(default_factory=list)
    records: int = 0
    new_contents: int = 0
    new_sources: int = 0
    bands: db.BandWrite | None = None  # where the batch's band rows went

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
        if self.bands is not None and self.bands.folded:
            text += (f"; {self.bands.folded:,} band rows of earlier batches folded from "
                     f"bands_recent into bands")
        return text


# --------------------------------------------------------------------------- entry point


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
                  executor: Executors, progress: bool, known_texts: str | None) -> None:
    with engine.begin() as conn:  # BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any error
        _append_in(conn, config, pkgs, result, executor, progress, known_texts)


def _append_in(conn, config: NearDedupConfig, pkgs: list[Package], result: IndexResult,
               executor: Executors, progress: bool, known_texts: str | None) -> None:
    """The batch inside the open transaction of ``conn``; ``known_texts`` is where workers
    can read the committed index (None: they cannot, and sign every text)."""
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
        with work_pool("local", 1) as inline:  # the inputs are still validated in full
            BatchWriter(store, config, 0, inline, 1, None, Progress("", 0, enabled=False)
                        ).run(pkgs, {})
        return
    store.upgrade_schema(values)
    if "kind" not in values:
        store.set_kind(kind)
    seq = store.add_batch(utc_now(), __version__, [p.package_id for p in new])
    indexed_rowids = {pid: known.rowid for pid, known in indexed.items()}
    rowids = {}
    for pkg in new:
        rowids[pkg.package_id] = store.add_package(
            pkg.package_id, pkg.kind, pkg.manifest_sha256, seq, pkg.record_count,
            orjson.dumps(pkg.manifest).decode())
    result.batch = seq
    new_records = sum(p.record_count for p in new)
    bar = Progress("index: records", new_records, enabled=progress)
    executor = executor.for_work(new_records, 2 * batch.BLOCK_LINES)  # little: no processes
    if store.max_content_rowid() == 0:  # nothing to look up
        known_texts = None
    # local worker processes parse the lines from memory shared with this process
    shared = batch.shared_blocks(executor.workers) if executor.shares_memory else None
    try:
        init, initargs = ((work.init_worker, shared.worker_args()) if shared is not None
                          else (None, ()))
        with work_pool(executor, executor.workers, init, initargs, work.WORKER_MODULES) as pool:
            writer = BatchWriter(store, config, seq, pool, parallelism(pool, executor.workers),
                                 known_texts, bar, shared)
            writer.track_targets({d for p in new for d in p.depends_on}, indexed_rowids)
            writer.run(pkgs, rowids)
    finally:
        if shared is not None:
            shared.close()
    bar.finish()
    result.records = new_records
    result.new_contents = writer.new_contents
    result.new_sources = writer.new_sources
    result.bands = writer.bands


def index_packages(index_path: str | Path, config: NearDedupConfig,
                   package_paths: Sequence[str | Path], *, workers: int = 1,
                   executor: str | Executors = "local", progress: bool = False) -> IndexResult:
    """Validate the packages and append them to the index as one batch (see module doc).
    ``index_path`` is a SQLite file or a ``postgresql://`` URL; ``executor`` and ``workers``
    say where the signing runs (`workers.choose_executor`)."""
    chosen = choose_executor(executor, workers)
    paths = [Path(p) for p in package_paths]
    url = db.postgres_url(index_path)
    if url is None:
        db.check_index_path(Path(index_path), paths)
    pkgs = open_packages(paths)
    config.check_pool_records(sum(p.record_count for p in pkgs),
                              "; split it into several batches")
    if url is not None:
        with rare_collections():
            return _index_postgres(url, config, pkgs, chosen, progress)
    index_path = Path(index_path)
    result = IndexResult(index=index_path, batch=None)
    created = _missing_dirs(index_path.parent)
    try:
        with db.writer_lock(index_path), db.database_errors(index_path), rare_collections():
            try:
                _index_locked(index_path, config, pkgs, result, chosen, progress)
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
                  result: IndexResult, executor: Executors,
                  progress: bool) -> None:
    values = db.existing_meta(index_path)
    if values is not None:
        db.check_binding(index_path, values, config, writing=True)
        engine = db.open_writable(index_path)
        # local workers read the committed index on connections of their own
        known_texts = str(index_path.resolve()) if executor.workers_read_index else None
        try:
            _append_batch(engine, config, pkgs, result, executor, progress,
                          known_texts)
        finally:
            engine.dispose()
        return
    # under the writer lock any temporary sibling is left over from a killed first batch
    for stale in index_path.parent.glob(f".{index_path.name}.tmp-*"):
        stale.unlink()
    tmp = index_path.with_name(f".{index_path.name}.tmp-{os.getpid()}")
    engine = db.open_writable(tmp, staged=True)  # no journal: on any failure it is deleted
    try:
        db.create_schema(engine, config, utc_now())
        _append_batch(engine, config, pkgs, result, executor, progress, None)
        engine.dispose()
        if result.batch is not None:
            db.publish_staged(tmp, index_path)
    finally:
        engine.dispose()
        _remove_db_files(tmp)


def _index_postgres(url: str, config: NearDedupConfig, pkgs: list[Package],
                    executor: Executors, progress: bool) -> IndexResult:
    """The batch on a PostgreSQL index: lock, initialise an empty database and append, all in
    one transaction, so a failure or a killed client leaves the database as it was."""
    result = IndexResult(index=pg.label(url), batch=None)
    engine = pg.engine(url)
    try:
        with engine.begin() as conn:
            pg.lock_writer(conn, url)
            values = pg.read_meta_or_none(conn, url)
            if values is None:
                pg.create_schema(conn, config, utc_now())
            else:
                db.check_binding(pg.label(url), values, config, writing=True)
            _append_in(conn, config, pkgs, result, executor, progress, url)
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
