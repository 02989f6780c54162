"""`index_packages`, the entry point of `index`: checks the inputs against the index, opens
the batch's transaction through the index's backend (`index_store.IndexBackend.batch`: the
writer's lock, a staged file for a brand-new SQLite index, the data files an Iceberg batch
registers at its commit) and runs the pipeline of
`near_dedup_core.ingest` in it."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from near_dedup_core import __version__
from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import utc_now
from near_dedup_core.index_store import BandWrite, Batch
from near_dedup_core.ingest import batch, replay, work
from near_dedup_core.ingest.batch import BatchWriter
from near_dedup_core.package import Package, open_packages
from near_dedup_core.progress import Progress
from near_dedup_core.storage import parse_location
from near_dedup_core.wording import count
from near_dedup_core.workers import Executors, choose_executor, parallelism, work_pool

__all__ = ["IndexResult", "batch", "index_packages", "work"]


@dataclass
class IndexResult:
    index: Path | str  # the index's label: a SQLite path, a PostgreSQL URL without its
    #                    password, an Iceberg location
    batch: int | None
    packages_added: list[str] = field(default_factory=list)
    packages_skipped: list[str] = field(default_factory=list)
    records: int = 0
    new_contents: int = 0
    new_sources: int = 0
    bands: BandWrite | None = None  # where the batch's band rows went
    blocks: int = 0  # blocks of new packages' lines the workers had to work on
    resumed: int = 0  # … whose results a killed earlier run of the batch had kept

    @property
    def known_contents(self) -> int:
        """Sources whose content was already indexed (or appeared earlier in this batch)."""
        return self.new_sources - self.new_contents

    def summary(self) -> str:
        if self.batch is None:
            return (f"index {self.index}: nothing to do, already indexed with the same manifest: "
                    f"{', '.join(self.packages_skipped)}")
        text = (f"index {self.index}: batch {self.batch} added {', '.join(self.packages_added)}: "
                f"{count(self.records, 'record')}, {count(self.new_contents, 'new text')}, "
                f"{count(self.known_contents, 'repeat')} of texts seen before")
        if self.packages_skipped:
            text += f"; already indexed: {', '.join(self.packages_skipped)}"
        if self.bands is not None and self.bands.folded:
            text += (f"; {count(self.bands.folded, 'lookup key')} of earlier batches merged "
                     f"into the main lookup table")
        if self.resumed:
            text += (f"; resumed: {self.resumed:,} of {count(self.blocks, 'block')} taken from "
                     f"an interrupted run")
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


def _append_in(store: Batch, config: NearDedupConfig, pkgs: list[Package],
               result: IndexResult, executor: Executors, progress: bool) -> None:
    """The batch inside the open transaction of ``store``; its ``reader_location`` is where
    workers can read the committed index (None: they cannot, and sign every text)."""
    kind = pkgs[0].kind
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
    # the workers' results that a killed earlier try of this batch kept (`replay`)
    kept = store.work_files(replay.inputs_digest(pkgs, {p.package_id for p in new}, config))
    left, planned = new_records, executor.workers
    if kept is not None and kept.names():
        # about this many records are left to work on: few, and the pool's start (about
        # 2 s of CPU per worker) costs more than the work; the blocks are worked inline
        left = max(0, new_records - len(kept.names()) * batch.BLOCK_LINES)
        left = left if left > RESUME_INLINE_RECORDS else 0
    executor = executor.for_work(left, 2 * batch.BLOCK_LINES)  # little: no processes
    # where workers read the committed index: processes of this machine, or any machine
    # for a server
    known_texts = (store.reader_location if executor.workers_read_index or store.served
                   else None)
    if store.max_content_rowid() == 0:  # nothing to look up
        known_texts = None
    # local worker processes parse the lines from memory shared with this process
    shared = batch.shared_blocks(executor.workers) if executor.shares_memory else None
    work.forget_known_texts()  # inline blocks read the state this batch was pinned at
    try:
        init, initargs = ((work.init_worker, shared.worker_args()) if shared is not None
                          else (None, ()))
        with work_pool(executor, executor.workers, init, initargs, work.WORKER_MODULES) as pool:
            # a rerun worked inline keeps the blocks in flight of the pool it replaces, so
            # that its jobs (which blocks wait for the first dictionary) are the kept ones
            width = parallelism(pool, executor.workers) if left else planned
            writer = BatchWriter(store, config, seq, pool, width, known_texts, bar, shared,
                                 ranges=executor.reads_storage, work=kept)
            writer.track_targets({d for p in new for d in p.depends_on}, indexed_rowids)
            writer.run(pkgs, rowids)
    finally:
        work.forget_known_texts()
        if shared is not None:
            shared.close()
    bar.finish()
    result.records = new_records
    result.new_contents = writer.new_contents
    result.new_sources = writer.new_sources
    result.bands = writer.bands
    result.blocks = writer.submitted
    result.resumed = writer.reused


#: A rerun of a killed batch with at most about this many records left to work on (its
#: blocks whose results the killed try kept aside) works them in this process, without
#: starting the worker pool.
RESUME_INLINE_RECORDS = 32 * batch.BLOCK_LINES
#: Tries of a batch whose commit another writer's beats (an Iceberg index with a shared
#: catalog, whose writers take no lock): each runs the batch on the newly published state.
COMMIT_TRIES = 5
#: Up to this many seconds (times the try) between two tries, at random, so that writers
#: that collided do not collide again in step.
RETRY_PAUSE = 1.0


def index_packages(index: str | Path | db.Index, config: NearDedupConfig,
                   package_paths: Sequence[str | Path], *, workers: int = 1,
                   executor: str | Executors = "local", progress: bool = False) -> IndexResult:
    """Validate the packages and append them to the index as one batch (see module doc).
    ``index`` is a backend (`index_store.open_index`), a SQLite path, a ``postgresql://``
    URL or an ``iceberg://`` location; ``executor`` and ``workers`` say where the signing runs
    (`workers.choose_executor`)."""
    chosen = choose_executor(executor, workers)
    index = db.open_index(index)
    paths = [parse_location(p) for p in package_paths]
    index.check_target([p.local_path for p in paths if p.local_path is not None])
    pkgs = open_packages(paths)
    config.check_pool_records(sum(p.record_count for p in pkgs),
                              "; split it into several batches")
    for attempt in range(1, COMMIT_TRIES + 1):
        result = IndexResult(index=index.file or index.label, batch=None)
        try:
            with index.batch(config, utc_now()) as store:
                _append_in(store, config, pkgs, result, chosen, progress)
            return result
        except db.LostCommit:
            # another writer published first: the batch number, the row ids and every
            # "seen before" depend on the state, so the whole batch runs again on the new one
            if attempt == COMMIT_TRIES:
                raise NearDedupError(
                    f"index {result.index}: another writer committed first {COMMIT_TRIES} "
                    f"times in a row; nothing of this run was published; run it again"
                ) from None
            time.sleep(random.uniform(0, RETRY_PAUSE * attempt))
    raise AssertionError("unreachable")
