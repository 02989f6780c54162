"""One appended batch on an Iceberg index (`IcebergBatch`, `iceberg_batch`): the batch's rows
are written into data files while `index` works and registered when it succeeds, one table
commit after another, then published by one append to the ``commits`` table (the commit
point).

Where the rows go while the batch runs: the band rows, in chunks of `BAND_CHUNK_ROWS`, to
tasks of the index's executor (its worker processes, or Ray tasks), each of which writes one
file per band-key bucket of its share (`write_band_files`) and returns their paths; the
``contents`` and ``sources`` rows, as they come (in id order), into Parquet files that the
writer streams row group by row group (`RowFiles`); the small tables' rows stay in memory.
The commit registers the files with one ``add_files`` per table. Until the ``commits``
append, no reader sees any of them; a failed batch removes them, a killed one leaves them
as orphan files that no snapshot references (`index check` lists them, `index expire`
removes them).

The rule (docs/iceberg.md, "Commits"): readers read each data table at the snapshot id that
the newest ``commits`` row records. A writer, under the writer's lock, first returns every
data table whose current snapshot is not the recorded one (the leftovers of a killed writer)
to the recorded snapshot, then appends; the ``commits`` append checks that the commit table
is still at the snapshot the writer read (no retry of the commit itself: a refused batch is
run again on the new state by `ingest.run`), so a batch is published whole or not at all,
never twice. A batch's workers' results are kept as work files (`resume`) for its rerun
after a kill."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.common import check_binding
from near_dedup_core.index_store.iceberg import datafiles, directory
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.bands import (
    BAND_FILE_OPTIONS as BAND_FILE_OPTIONS,
)
from near_dedup_core.index_store.iceberg.bands import (
    BandFile,
    BandSpec,
    bucket_of,
    write_band_files,
)
from near_dedup_core.index_store.iceberg.keyed import (
    KeyedFiles,
    KeyedWriter,
    content_lookup,
    content_rows,
)
from near_dedup_core.index_store.iceberg.lookup import HashedRows
from near_dedup_core.index_store.iceberg.resume import IcebergWorkFiles
from near_dedup_core.index_store.iceberg.snapshot import IcebergSnapshot, Pinned, files_check
from near_dedup_core.index_store.records import BandWrite, IndexedPackage, RefTarget
from near_dedup_core.index_store.schema import binding_rows
from near_dedup_core.progress import pause_point

#: Band rows that the writer gathers before handing them to the executor's tasks (about
#: 64 MB of keys and content ids): each chunk becomes one file per bucket, so a batch of R
#: band rows has ``ceil(R / BAND_CHUNK_ROWS)`` files per bucket (docs/iceberg.md, "Measured").
BAND_CHUNK_ROWS = 1 << 22
#: A streamed table's data file is closed, and the next one begun, past this size (pyiceberg's
#: default target size of a data file).
TARGET_FILE_BYTES = 512 << 20
#: The tables whose rows are streamed into data files as they come (in id order).
STREAMED = ("contents", "sources")


class IcebergBatch:
    """The writes of one batch (a `protocols.Batch`): band rows to the executor's tasks,
    content and source rows streamed into data files, the rest gathered in memory;
    registered by `commit`."""

    served = False

    def __init__(self, pinned: Pinned, config: NearDedupConfig, created_at: str,
                 fresh: bool) -> None:
        self.pinned = pinned
        self.label = pinned.location
        self.reader_location: str | None = None if fresh else pinned.location
        self.seq: int | None = None
        self.config = config
        self.new: dict[str, list[tuple]] = {t: [] for t in it.DATA_TABLES}
        #: the batch's files carry this prefix (a failed batch removes them by it)
        self.prefix = uuid.uuid4().hex
        self.streams: dict[str, RowFiles | KeyedWriter] = {
            name: RowFiles(pinned.tables[name], name, self.prefix) for name in STREAMED}
        if "content_keys" in pinned.tables:
            self.streams["content_keys"] = KeyedWriter(
                pinned.tables["content_keys"], "content_keys", self.prefix, "content_id",
                ("id",))
        self.raw_parts: list[pa.Table] = []
        self.band_files: list[BandFile] = []
        self.band_tasks: list[BandTasks] = []
        self.committing = False
        #: takedown acts recorded (`add_takedown`): published even without a batch row
        self.takedowns = 0
        if fresh:
            rows = binding_rows(config, created_at)
            rows.append({"key": it.BUCKETS_KEY, "value": str(it.bucket_count())})
            self.new["meta"] = [(r["key"], r["value"]) for r in rows]
            self._meta = {k: v for k, v in self.new["meta"]}
        else:
            self._meta = dict(pinned.rows("meta", ("key", "value")))
        self._packages = {r[1]: IndexedPackage(*r) for r in pinned.rows(
            "packages", ("id", "package_id", "kind", "manifest_sha256", "batch", "records"))}
        self._scopes = {k: i for i, k in pinned.rows("scopes", ("id", "scope_key"))}
        self._max_content = pinned.max_value("contents", "id")
        self._next_source = pinned.total_records("sources") + 1
        self._dicts = pinned.rows("dictionaries", ("id", "data"))
        seqs = [s for (s,) in pinned.rows("batches", ("seq",))]
        self._max_seq = max(seqs, default=0)
        self._content_ids: HashedRows | KeyedFiles | None = None
        self.work: IcebergWorkFiles | None = None

    # -- the index as a whole
    def meta(self) -> dict[str, str]:
        return dict(self._meta)

    def set_kind(self, kind: str) -> None:
        self.new["meta"].append(("kind", kind))
        self._meta["kind"] = kind

    def indexed_packages(self) -> dict[str, IndexedPackage]:
        return dict(self._packages)

    def add_takedown(self, key: str, act_json: str) -> None:
        """A takedown act's ``meta`` row, published by the batch's commit."""
        if key in self._meta:
            raise ValueError(f"meta key {key} is recorded already")
        self.new["meta"].append((key, act_json))
        self._meta[key] = act_json
        self.takedowns += 1

    def add_batch(self, created_at: str, tool_version: str, package_ids: list[str]) -> int:
        self.seq = self._max_seq + 1
        self.new["batches"].append((self.seq, created_at, tool_version,
                                    orjson.dumps(package_ids).decode()))
        return self.seq

    def add_package(self, package_id: str, kind: str, manifest_sha256: str, batch: int,
                    records: int, manifest_json: str) -> int:
        rowid = max((p.rowid for p in self._packages.values()), default=0) + 1
        self._packages[package_id] = IndexedPackage(rowid, package_id, kind, manifest_sha256,
                                                    batch, records)
        self.new["packages"].append((rowid, package_id, kind, manifest_sha256, batch, records,
                                     manifest_json))
        return rowid

    # -- scopes, contents, sources
    def scope_ids(self) -> dict[str, int]:
        return dict(self._scopes)

    def add_scope(self, scope_key: str, label: str) -> int:
        rowid = max(self._scopes.values(), default=0) + 1
        self._scopes[scope_key] = rowid
        self.new["scopes"].append((rowid, scope_key, label))
        return rowid

    def max_content_rowid(self) -> int:
        return self._max_content

    def ref_targets(self, package_rowid: int) -> dict[str, RefTarget]:
        with reading(self.label):
            return self._ref_targets(package_rowid)

    def _ref_targets(self, package_rowid: int) -> dict[str, RefTarget]:
        t = self.pinned.read("sources", ("sample_id", "content", "text_sha256", "domain"),
                             it.equal("package", package_rowid))
        return {sid: RefTarget(c, bytes(sha), dom) for sid, c, sha, dom in zip(
            *(t.column(x).to_pylist() for x in ("sample_id", "content", "text_sha256",
                                                 "domain")), strict=True)}

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        """The row ids of the ``content_ids`` that the published state holds, from the
        ``content_keys`` files probed per bucket (`keyed.content_lookup`)."""
        with reading(self.label):
            return self._known_contents(content_ids)

    def _known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        if self._content_ids is None:
            self._content_ids = content_lookup(self.pinned)
        return content_rows(self._content_ids, content_ids)

    def known_raw_texts(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        from near_dedup_core.index_store.iceberg.snapshot import IcebergKnownTexts

        if not hasattr(self, "_known"):
            self._known = IcebergKnownTexts(self.pinned.location)
        if self.pinned.state.n == 0:
            return {}
        return self._known.contents(shas)  # one line naming the index on a failed read

    def add_sources(self, rows: list[tuple]) -> None:
        start = self._next_source
        self._next_source += len(rows)
        self.streams["sources"].add([(start + i, *r[1:]) for i, r in enumerate(rows)])

    def add_dictionary(self, batch: int, data: bytes) -> int:
        rowid = max((i for i, _ in self._dicts), default=0) + 1
        self._dicts.append((rowid, data))
        self.new["dictionaries"].append((rowid, batch, data))
        return rowid

    def newest_dictionary(self) -> tuple[int, bytes] | None:
        if not self._dicts:
            return None
        rowid, data = max(self._dicts, key=lambda d: d[0])
        return rowid, bytes(data)

    def add_contents(self, rows: list[tuple]) -> None:
        """Content rows, given in id order (`RowFiles` keeps each file sorted by id)."""
        if rows:
            if rows[0][0] <= self._max_content:
                raise ValueError("content rows must come in id order")
            self.streams["contents"].add(rows)
            if "content_keys" in self.streams:
                self.streams["content_keys"].add([(r[1], r[0]) for r in rows])
            self._max_content = max(self._max_content, max(r[0] for r in rows))

    def upgrade_schema(self, values: dict[str, str]) -> None:
        """An Iceberg index is created at the current schema."""

    def work_files(self, inputs: str) -> IcebergWorkFiles | None:
        """The workers' results kept for a rerun of this batch if it is killed
        (`resume.IcebergWorkFiles`); none for a first batch (its tables are made anew)."""
        if self.reader_location is None:
            return None
        self.work = IcebergWorkFiles(self.pinned, inputs, self)
        return self.work

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The batch's writes so far with its data files closed (its band tasks finished):
        what a rerun takes over (`restore_state`), as JSON values and byte strings."""
        if any(not t.finished for t in self.band_tasks):
            raise ValueError("the band tasks of the batch are not finished")
        head = {"streams": {name: s.close() for name, s in self.streams.items()},
                "band_files": [list(f) for f in self.band_files],
                "scopes": [list(r) for r in self.new["scopes"]],
                "dictionaries": [[i, b] for i, b, _ in self.new["dictionaries"]],
                "next_source": self._next_source, "max_content": self._max_content}
        blobs = {f"dictionary-{i}": bytes(d) for i, _, d in self.new["dictionaries"]}
        if self.raw_parts:
            self.raw_parts = [pa.concat_tables(self.raw_parts)]
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.raw_parts[0].schema) as out:
                out.write_table(self.raw_parts[0])
            blobs["raw_texts"] = sink.getvalue().to_pybytes()
        return head, blobs

    def restore_state(self, head: dict[str, Any], blobs: dict[str, bytes]) -> None:
        """Take over the writes of a killed earlier try's checkpoint (`checkpoint_state`)."""
        for name, paths in head["streams"].items():
            self.streams[name].paths = list(paths)
        self.band_files = [BandFile(p, b, r) for p, b, r in head["band_files"]]
        for rowid, key, label in head["scopes"]:
            self._scopes[key] = rowid
            self.new["scopes"].append((rowid, key, label))
        for rowid, batch in head["dictionaries"]:
            data = blobs[f"dictionary-{rowid}"]
            self._dicts.append((rowid, data))
            self.new["dictionaries"].append((rowid, batch, data))
        self._next_source, self._max_content = head["next_source"], head["max_content"]
        if "raw_texts" in blobs:
            self.raw_parts = [pa.ipc.open_stream(blobs["raw_texts"]).read_all()]

    def checkpoint_files(self, head: dict[str, Any]) -> list[str]:
        """The data files a checkpoint's ``head`` names."""
        return [p for paths in head["streams"].values() for p in paths] \
            + [f[0] for f in head["band_files"]]

    def band_writer(self, executor: Executor, parallelism: int) -> BandTasks:
        """The batch's band rows go, a chunk at a time, to tasks of ``executor`` that write
        them as data files (`BandTasks`)."""
        tasks = BandTasks(self, executor, parallelism)
        self.band_tasks.append(tasks)
        return tasks

    def write_bands(self, ranges: Iterable[tuple[np.ndarray, np.ndarray]],
                    announce: Callable[[str], None] = lambda _text: None) -> BandWrite:
        """Band rows given at the end (in (key, content) order): written per bucket here, in
        this process (one table, no fold)."""
        spec = self.band_spec()
        for keys, contents in ranges:
            self.band_files += write_band_files(spec, np.asarray(keys, dtype=np.int64),
                                                np.asarray(contents, dtype=np.int64))
        return BandWrite("bands", 0)

    def add_bands(self, table: str, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        self.band_files += write_band_files(self.band_spec(), keys, content_rowids)

    def band_spec(self) -> BandSpec:
        table = self.pinned.tables["bands"]
        return BandSpec(f"{table.location().rstrip('/')}/data", dict(table.io.properties),
                        self.prefix, int(self._meta[it.BUCKETS_KEY]))

    def add_raw_texts(self, rows: list[tuple[bytes, int, int]]) -> None:
        if rows:
            self.raw_parts.append(to_arrow("raw_texts", rows))

    # -- the commit
    def discard(self) -> None:
        """Remove every data file this batch wrote, when it failed before its commit began
        (none is registered; a commit that failed midway leaves its files to the tables'
        unpublished snapshots, which the next writer steps over)."""
        if self.committing:
            return
        for stream in self.streams.values():
            stream.discard()
        io = self.pinned.tables["bands"].io
        for f in self.band_files:
            io.delete(f.path)
        self.band_files = []
        # files of tasks whose results never came back (a local index: found by prefix)
        data = Path(datafiles.local_path(self.band_spec().data))
        if data.is_dir():
            for path in data.glob(f"bucket=*/{self.prefix}-*.parquet"):
                path.unlink(missing_ok=True)

    def commit(self, created_at: str, op: str = "batch") -> None:
        """Register every table's new files or rows (one Iceberg commit each), then publish
        them by one ``commits`` row (``op``: what it records, a batch or takedown acts)."""
        self.committing = True
        snapshots = dict(self.pinned.state.snapshots)
        keyed: list[tuple[str, str]] = []  # (table, URI) of the keyed files added
        for name in it.DATA_TABLES:
            paths = None
            if name == "bands":
                if any(not t.finished for t in self.band_tasks):
                    raise ValueError("the band tasks of the batch are not finished")
                paths = [f.path for f in self.band_files]
            elif name in self.streams:
                paths = self.streams[name].close()
            elif name == directory.TABLE and name in self.pinned.tables and keyed:
                # one file per keyed table (`directory.by_table`)
                table = self.pinned.tables[name]
                paths = [write_rows_file(table, name, part, f"{self.prefix}-{of}") for of, part
                         in directory.by_table(directory.rows_of(self.label, keyed)).items()]
            if name in directory.KEYED and paths:
                keyed += [(name, p) for p in paths]
            if paths is not None:
                if paths:
                    table = self.pinned.tables[name]
                    table.add_files(paths, check_duplicate_files=False)
                    current = table.current_snapshot()
                    assert current is not None
                    snapshots[name] = current.snapshot_id
                continue
            if name == "raw_texts" and self.raw_parts:
                data = pa.concat_tables(self.raw_parts)
                self.raw_parts = []
                data = data.take(pc.sort_indices(data, sort_keys=[("text_sha256", "ascending")]))
            elif self.new[name]:
                rows = self.new[name]
                if name in it.SORTED_BY and name != "sources":
                    key = [c for c, _ in it.COLUMNS[name]].index(it.SORTED_BY[name])
                    rows = sorted(rows, key=lambda r: r[key])
                data = to_arrow(name, rows)
            else:
                data = None
            if data is None:
                continue
            table = self.pinned.tables[name]
            path = write_rows_file(table, name, data, self.prefix)
            if name in directory.KEYED:
                keyed.append((name, path))
            table.add_files([path], check_duplicate_files=False)
            current = table.current_snapshot()
            assert current is not None
            snapshots[name] = current.snapshot_id
        pause_point("index-publish")
        publish(self.pinned, op, created_at, snapshots)
        if self.work is not None:
            # published: a failure to tidy up leaves files that the next commit removes
            with suppress(Exception):
                self.work.drop_through(self.pinned)


class BandTasks:
    """The band rows of one batch handed to ``executor`` as they come, a chunk of
    `BAND_CHUNK_ROWS` rows at a time (`add`): each chunk is split by bucket into
    ``parallelism`` shares of consecutive buckets, one `write_band_files` task each, so that
    a chunk makes one file per bucket. `finish` waits for every task."""

    chunk_rows = BAND_CHUNK_ROWS

    def __init__(self, batch: IcebergBatch, executor: Executor, parallelism: int) -> None:
        self.batch = batch
        self.executor = executor
        self.parallelism = max(1, parallelism)
        self.spec = batch.band_spec()
        self.futures: list[tuple[Future, int]] = []
        self.finished = True

    def add(self, keys: np.ndarray, contents: np.ndarray) -> None:
        if not len(keys):
            return
        self.finished = False
        shares = self.parallelism
        share = (bucket_of(keys, self.spec.buckets).astype(np.int64) * shares
                 // self.spec.buckets)
        for s in range(shares):
            at = np.flatnonzero(share == s) if shares > 1 else slice(None)
            part_keys, part_contents = keys[at], contents[at]
            if len(part_keys):
                self.futures.append((self.executor.submit(write_band_files, self.spec,
                                                          part_keys, part_contents),
                                     len(part_keys)))

    def finish(self) -> BandWrite:
        """Every task's files, recorded in the batch; a task that failed raises here."""
        for future, rows in self.futures:
            files: list[BandFile] = future.result()
            self.batch.band_files += files
            if sum(f.rows for f in files) != rows:
                raise ValueError(f"a band task wrote {sum(f.rows for f in files):,} rows of "
                                 f"{rows:,}")
        self.futures = []
        self.finished = True
        return BandWrite("bands", 0)


def write_rows_file(table: Table, name: str, rows: pa.Table, prefix: str) -> str:
    """One data file of ``rows`` (a batch's rows of a small table, or its raw texts) under
    ``table``'s data folder, written as `RowFiles` writes (page checksums); its URI, for
    ``add_files``."""
    path = f"{table.location().rstrip('/')}/data/{prefix}-{name}.parquet"
    schema = datafiles.with_checksum_mark(plain_schema(name))
    with table.io.new_output(path).create(overwrite=True) as out:
        pq.write_table(rows.cast(schema), out, compression=codec(name),
                       row_group_size=it.ROW_GROUP_ROWS.get(name, 65_536), **datafiles.CHECKED_WRITES)
    return path


def plain_schema(name: str) -> pa.Schema:
    """The Arrow schema of ``name``'s rows without Iceberg field ids: files registered by
    ``add_files`` must not carry them (the table maps columns by name)."""
    return pa.schema([pa.field(f.name, f.type) for f in it.arrow_schema(name)])


def codec(name: str) -> str:
    # texts are zstd frames already, ids and signatures are hashes: no codec helps contents
    return "none" if name == "contents" else "zstd"


class RowFiles:
    """Rows of one table streamed, as they come, into Parquet files under its data folder:
    row groups of the table's size (`tables.ROW_GROUP_ROWS`), a new file past
    `TARGET_FILE_BYTES`. Only the rows of the row group being filled stay in memory. `close`
    gives the files' URIs, `discard` removes them."""

    def __init__(self, table: Table, name: str, prefix: str) -> None:
        self.name = name
        self.io = table.io
        self.data = f"{table.location().rstrip('/')}/data"
        self.prefix = prefix
        self.schema = datafiles.with_checksum_mark(plain_schema(name))
        self.group_rows = it.ROW_GROUP_ROWS.get(name, 65_536)
        self.pending: list[tuple] = []
        self.paths: list[str] = []
        self.rows = 0
        self._out: Any = None
        self._writer: pq.ParquetWriter | None = None

    def add(self, rows: list[tuple]) -> None:
        self.pending.extend(rows)
        self.rows += len(rows)
        if len(self.pending) >= self.group_rows:
            full = len(self.pending) // self.group_rows * self.group_rows
            self._write(self.pending[:full])
            del self.pending[:full]

    def _write(self, rows: list[tuple]) -> None:
        if self._writer is None:
            path = f"{self.data}/{self.prefix}-{len(self.paths):05d}.parquet"
            self.paths.append(path)
            self._out = self.io.new_output(path).create(overwrite=True)
            self._writer = pq.ParquetWriter(self._out, self.schema, compression=codec(self.name),
                                            **datafiles.CHECKED_WRITES)
        self._writer.write_table(to_arrow(self.name, rows, self.schema),
                                 row_group_size=self.group_rows)
        if self._out.tell() >= TARGET_FILE_BYTES:
            self._close_file()

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._out.close()
            self._writer = self._out = None

    def close(self) -> list[str]:
        """The files written, the last row group flushed."""
        if self.pending:
            self._write(self.pending)
            self.pending = []
        self._close_file()
        return list(self.paths)

    def discard(self) -> None:
        self.pending = []
        try:
            self._close_file()
        finally:
            for path in self.paths:
                self.io.delete(path)
            self.paths = []


def to_arrow(name: str, rows: list[tuple], schema: pa.Schema | None = None) -> pa.Table:
    schema = it.arrow_schema(name) if schema is None else schema
    columns = list(zip(*rows, strict=True))
    return pa.Table.from_arrays([pa.array(list(col), type=schema.field(i).type)
                                 for i, col in enumerate(columns)], schema=schema)


def publish(pinned: Pinned, op: str, at: str, snapshots: dict[str, int | None]) -> None:
    """The commit point: one ``commits`` row recording ``snapshots``; refused (`LostCommit`,
    nothing published: `ingest.run` runs the batch again on the new state) when another
    writer committed since ``pinned`` was read."""
    row = to_arrow(it.COMMITS, [(pinned.state.n + 1, op, at, orjson.dumps(snapshots).decode())])
    commits = pinned.tables[it.COMMITS]
    try:
        commits.append(row)
    except CommitFailedException:
        from near_dedup_core.index_store.iceberg import lost_commit

        raise lost_commit(pinned.location) from None


def metadata_version(uri: str) -> int:
    """The version of a table metadata file (pyiceberg names them ``NNNNN-<uuid>``)."""
    head = uri.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if head.isdigit() else -1


def check_pointers(pinned: Pinned) -> None:
    """The catalog's pointers agree: a data table ahead of the snapshot the newest commit
    records is a killed writer's leftover, unless a newer metadata file of the ``commits``
    table (one the catalog does not point at) records a commit that publishes it: the
    catalog's ``commits`` pointer was then moved back, and returning the tables to the
    recorded state would drop published batches. One line."""
    ahead = {}
    for name in pinned.present:
        current = pinned.tables[name].current_snapshot()
        if current is not None and current.snapshot_id != pinned.state.snapshots[name]:
            ahead[name] = current.snapshot_id
    if not ahead:
        return
    from pyiceberg.table import StaticTable

    commits = pinned.tables[it.COMMITS]
    at = commits.metadata_location
    version = metadata_version(at)
    for f in datafiles.list_files(at.rsplit("/", 1)[0], ".metadata.json"):
        if metadata_version(f.uri) <= version:
            continue
        newer = StaticTable.from_metadata(f.uri, properties=commits.io.properties)
        snap = newer.current_snapshot()
        if snap is None:
            continue
        for row in it.read(newer, snap.snapshot_id).to_pylist():
            recorded = orjson.loads(row["tables"])
            if row["n"] > pinned.state.n and any(recorded.get(t) == s for t, s in ahead.items()):
                raise NearDedupError(
                    f"index {pinned.location}: damaged (the catalog points the commits table "
                    f"at commit {pinned.state.n:,}, its metadata {datafiles.local_path(f.uri)} "
                    f"records commit {row['n']:,}, which the data tables hold: the catalog "
                    f"was moved back); restore the catalog from a backup")


def restore_leftovers(pinned: Pinned) -> bool:
    """Return each data table whose current snapshot is not the one the newest commit
    records (a killed writer's appends) to the recorded snapshot; whether any was. A
    catalog whose ``commits`` pointer was moved back is refused (`check_pointers`)."""
    check_pointers(pinned)
    restored = False
    for name in pinned.present:
        table: Table = pinned.tables[name]
        recorded = pinned.state.snapshots[name]
        current = table.current_snapshot()
        now = None if current is None else current.snapshot_id
        if now == recorded:
            continue
        if recorded is None:
            raise NearDedupError(f"index {pinned.location}: table {name} has rows that no "
                                 f"commit published and no published state to return to; "
                                 f"restore it from a backup")
        table.manage_snapshots().set_current_snapshot(snapshot_id=recorded).commit()
        restored = True
    return restored


def open_for_write(location: str, cat: SqlCatalog) -> tuple[Pinned, bool]:
    """The published state for a writer (under its lock), the tables created for a new
    index; ``fresh``: no batch was published yet."""
    place = it.where(location)
    if not it.has_tables(cat):
        it.create_tables(cat)
        if place.lock_folder is not None:
            (place.lock_folder / it.READERS_LOCK).touch()
    else:  # an index of an earlier version gets the tables it lacks
        it.add_missing_tables(cat, it.load_tables(cat) or {})
    pinned = Pinned(location, expected=False)
    if pinned.state.n == 0:  # a first batch killed before its commit: start again
        it.drop_tables(cat)
        it.create_tables(cat)
        pinned = Pinned(location, expected=False)
        return pinned, True
    if restore_leftovers(pinned):
        pinned = Pinned(location, expected=False)
    return pinned, False


@contextmanager
def iceberg_batch(location: str, config: NearDedupConfig, created_at: str
                  ) -> Iterator[IcebergBatch]:
    """One batch on the Iceberg index at ``location``: the writer's set-up (`tables.writer`:
    the lock of the local form, nothing left of a new index that fails), the published state
    (leftovers of a killed writer returned), the batch's rows, one commit on success and
    nothing published on failure."""
    from near_dedup_core.index_store.iceberg import errors

    it.bucket_count()  # a malformed setting is refused before anything is written
    with ExitStack() as stack:
        with errors(location):  # the catalog's, the storage's and pyiceberg's: one line
            cat = stack.enter_context(it.writer(it.where(location)))
            pinned, fresh = open_for_write(location, cat)
            files = None
            if not fresh:
                check_binding(location, pinned_meta(pinned), config, writing=True)
                IcebergSnapshot(pinned, config).quick_check()
                # … and every data file reads back, checked meanwhile
                files = files_check(pinned, idle=False)
                stack.callback(files.close)
            batch = IcebergBatch(pinned, config, created_at, fresh)
        try:
            with files.explains_failures() if files is not None else nullcontext():
                yield batch
            if files is not None:
                with errors(location):
                    files.result()
            if batch.seq is not None or (batch.takedowns and not fresh):
                with errors(location):
                    batch.commit(created_at, "batch" if batch.seq is not None else "takedown")
        except BaseException as exc:
            # the files it wrote (a new local index's folder goes as well); one it cannot
            # remove (the storage unreachable) is an orphan, never read, that `index check`
            # lists: the error to report stays the batch's own
            with suppress(Exception):
                batch.discard()
            if batch.work is not None and isinstance(exc, Exception):
                # an error (bad input, a lost commit), not a signal: a rerun would not
                # resume from them
                with suppress(Exception):
                    batch.work.drop()
            raise


@contextmanager
def reading(location: str) -> Iterator[None]:
    """A read of the published state inside a batch's body (the ingest asks, the index
    answers): its storage's, pyarrow's and pyiceberg's errors as one line naming the index
    (`iceberg.errors`), not as an error of the run."""
    from near_dedup_core.index_store.iceberg import errors

    with errors(location):
        yield


def pinned_meta(pinned: Pinned) -> dict[str, str]:
    return dict(pinned.rows("meta", ("key", "value")))
