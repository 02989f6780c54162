"""One appended batch on an Iceberg index (`IcebergBatch`, `iceberg_batch`): the batch's rows
are gathered while `index` works and written when it succeeds, one table append after
another, then published by one append to the ``commits`` table (the commit point).

The rule (docs/iceberg.md, "Commits"): readers read each data table at the snapshot id that
the newest ``commits`` row records. A writer, under the writer's lock, first returns every
data table whose current snapshot is not the recorded one (the leftovers of a killed writer)
to the recorded snapshot, then appends; the ``commits`` append checks that the commit table
is still at the snapshot the writer read (no retry), so a batch is published whole or not
at all, never twice."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.batch import BandWrite, BatchTransaction, RefTarget
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.snapshot import IcebergSnapshot, Pinned, bucket_of
from near_dedup_core.index_store.schema import binding_rows
from near_dedup_core.index_store.snapshot import IndexedPackage, check_binding


class IcebergBatch(BatchTransaction):
    """The writes of one batch, gathered in memory and committed by `commit`."""

    served = False

    def __init__(self, pinned: Pinned, config: NearDedupConfig, created_at: str,
                 fresh: bool) -> None:
        self.conn = None  # type: ignore[assignment]
        self.pinned = pinned
        self.label = pinned.location
        self.reader_location = None if fresh else pinned.location
        self.seq = None
        self.config = config
        self.new: dict[str, list[tuple]] = {t: [] for t in it.DATA_TABLES}
        self.band_parts: list[tuple[np.ndarray, np.ndarray]] = []
        if fresh:
            rows = binding_rows(config, created_at)
            buckets = int(os.environ.get(it.BUCKETS_ENV, it.DEFAULT_BUCKETS))
            rows.append({"key": it.BUCKETS_KEY, "value": str(buckets)})
            self.new["meta"] = [(r["key"], r["value"]) for r in rows]
            self._meta = {k: v for k, v in self.new["meta"]}
        else:
            self._meta = dict(pinned.rows("meta", ("key", "value")))
        self._packages = {r[1]: IndexedPackage(*r) for r in pinned.rows(
            "packages", ("id", "package_id", "kind", "manifest_sha256", "batch", "records"))}
        self._scopes = {k: i for i, k in pinned.rows("scopes", ("id", "scope_key"))}
        ids = pinned.read("contents", ("id",)).column("id").to_numpy()
        self._max_content = int(ids.max()) if len(ids) else 0
        self._next_source = pinned.total_records("sources") + 1
        self._dicts = pinned.rows("dictionaries", ("id", "data"))
        seqs = [s for (s,) in pinned.rows("batches", ("seq",))]
        self._max_seq = max(seqs, default=0)
        self._content_ids: dict[bytes, int] | None = None

    # -- the index as a whole
    def meta(self) -> dict[str, str]:
        return dict(self._meta)

    def set_kind(self, kind: str) -> None:
        self.new["meta"].append(("kind", kind))
        self._meta["kind"] = kind

    def indexed_packages(self) -> dict[str, IndexedPackage]:
        return dict(self._packages)

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
        t = self.pinned.read("sources", ("sample_id", "content", "text_sha256", "domain"),
                             it.equal("package", package_rowid))
        return {sid: RefTarget(c, bytes(sha), dom) for sid, c, sha, dom in zip(
            *(t.column(x).to_pylist() for x in ("sample_id", "content", "text_sha256",
                                                 "domain")), strict=True)}

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        if self._content_ids is None:
            t = self.pinned.read("contents", ("content_id", "id"))
            self._content_ids = dict(zip((bytes(c) for c in t.column("content_id").to_pylist()),
                                         t.column("id").to_pylist(), strict=True))
        known = self._content_ids
        return {c: known[c] for c in content_ids if c in known}

    def known_raw_texts(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        from near_dedup_core.index_store.iceberg.snapshot import IcebergKnownTexts

        if not hasattr(self, "_known"):
            self._known = IcebergKnownTexts(self.pinned.location)
        if self.pinned.state.n == 0:
            return {}
        return self._known.contents(shas)

    def add_sources(self, rows: list[tuple]) -> None:
        start = self._next_source
        self._next_source += len(rows)
        self.new["sources"].extend((start + i, *r[1:]) for i, r in enumerate(rows))

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
        self.new["contents"].extend(rows)
        if rows:
            self._max_content = max(self._max_content, max(r[0] for r in rows))

    def upgrade_schema(self, values: dict[str, str]) -> None:
        """An Iceberg index is created at the current schema."""

    def write_bands(self, ranges: Iterable[tuple[np.ndarray, np.ndarray]],
                    announce: Callable[[str], None] = lambda _text: None) -> BandWrite:
        """The batch's band rows: written per bucket at commit (one table, no fold)."""
        for keys, contents in ranges:
            self.band_parts.append((np.asarray(keys, dtype=np.int64),
                                    np.asarray(contents, dtype=np.int64)))
        return BandWrite("bands", 0)

    def add_bands(self, table: str, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        self.band_parts.append((keys, content_rowids))

    def add_raw_texts(self, rows: list[tuple[bytes, int, int]]) -> None:
        self.new["raw_texts"].extend(rows)

    # -- the commit
    def band_table(self) -> pa.Table | None:
        if not self.band_parts:
            return None
        keys = np.concatenate([k for k, _ in self.band_parts])
        contents = np.concatenate([c for _, c in self.band_parts])
        buckets = bucket_of(keys, int(self._meta[it.BUCKETS_KEY]))
        if len(keys) > 1 and not (np.diff(keys) >= 0).all():  # given in key order as a rule
            order = np.lexsort((contents, keys))
            keys, contents, buckets = keys[order], contents[order], buckets[order]
        order = np.argsort(buckets, kind="stable")  # by bucket, each in (key, content) order
        return pa.Table.from_arrays([pa.array(buckets[order]), pa.array(keys[order]),
                                     pa.array(contents[order])],
                                    schema=it.arrow_schema("bands"))

    def commit(self, created_at: str) -> None:
        """Append every table that has new rows, then publish them by one ``commits`` row."""
        snapshots = dict(self.pinned.state.snapshots)
        for name in it.DATA_TABLES:
            if name == "bands":
                bands = self.band_table()
                if bands is not None:
                    table = self.pinned.tables[name]
                    table.add_files(write_band_files(table, bands), check_duplicate_files=False)
                    current = table.current_snapshot()
                    assert current is not None
                    snapshots[name] = current.snapshot_id
                continue
            if self.new[name]:
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
            table.append(data)
            current = table.current_snapshot()
            assert current is not None
            snapshots[name] = current.snapshot_id
        publish(self.pinned, "batch", created_at, snapshots)


#: Threads that write a batch's band files, one file per bucket (Parquet encoding and
#: compression leave the GIL).
WRITE_THREADS = 2


def write_band_files(table: Table, bands: pa.Table) -> list[str]:
    """One Parquet file per bucket of ``bands`` (sorted by bucket, then key) under the
    table's data folder, written in parallel; their URIs, for one ``add_files`` commit."""
    buckets = bands.column("bucket").to_numpy()
    cuts = np.flatnonzero(np.diff(buckets)) + 1
    starts = np.concatenate(([0], cuts)).tolist()
    ends = np.concatenate((cuts, [len(buckets)])).tolist()
    plain = pa.schema([pa.field(f.name, f.type) for f in bands.schema])  # no field ids
    bands = bands.cast(plain)
    data = f"{table.location().rstrip('/')}/data"
    commit = uuid.uuid4().hex

    def write(part: tuple[int, int]) -> str:
        start, end = part
        bucket = int(buckets[start])
        uri = f"{data}/bucket={bucket}/{commit}-{bucket:05d}.parquet"
        fs, path = it.output(uri)
        pq.write_table(bands.slice(start, end - start), path, filesystem=fs,
                       compression="zstd", row_group_size=it.ROW_GROUP_ROWS["bands"])
        return uri

    with ThreadPoolExecutor(WRITE_THREADS) as threads:
        return list(threads.map(write, zip(starts, ends, strict=True)))


def to_arrow(name: str, rows: list[tuple]) -> pa.Table:
    schema = it.arrow_schema(name)
    columns = list(zip(*rows, strict=True))
    return pa.Table.from_arrays([pa.array(list(col), type=schema.field(i).type)
                                 for i, col in enumerate(columns)], schema=schema)


def publish(pinned: Pinned, op: str, at: str, snapshots: dict[str, int | None]) -> None:
    """The commit point: one ``commits`` row recording ``snapshots``; refused (one line,
    nothing published) when another writer committed since ``pinned`` was read."""
    row = to_arrow(it.COMMITS, [(pinned.state.n + 1, op, at, orjson.dumps(snapshots).decode())])
    commits = pinned.tables[it.COMMITS]
    try:
        commits.append(row)
    except CommitFailedException:
        raise NearDedupError(f"index {pinned.location}: another writer committed meanwhile; "
                             f"nothing of this run was published; run it again") from None


def restore_leftovers(pinned: Pinned) -> bool:
    """Return each data table whose current snapshot is not the one the newest commit
    records (a killed writer's appends) to the recorded snapshot; whether any was."""
    restored = False
    for name in it.DATA_TABLES:
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


def open_for_write(location: str, cat: Catalog) -> tuple[Pinned, bool]:
    """The published state for a writer (under its lock), the tables created for a new
    index; ``fresh``: no batch was published yet."""
    place = it.where(location)
    if not it.has_tables(cat):
        it.create_tables(cat)
        if place.lock_folder is not None:
            (place.lock_folder / it.READERS_LOCK).touch()
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

    with ExitStack() as stack:
        with errors(location):  # the catalog's, the storage's and pyiceberg's: one line
            cat = stack.enter_context(it.writer(it.where(location)))
            pinned, fresh = open_for_write(location, cat)
            if not fresh:
                check_binding(location, pinned_meta(pinned), config, writing=True)
                IcebergSnapshot(pinned, config).quick_check()
            batch = IcebergBatch(pinned, config, created_at, fresh)
        yield batch
        if batch.seq is not None:
            with errors(location):
                batch.commit(created_at)


def pinned_meta(pinned: Pinned) -> dict[str, str]:
    return dict(pinned.rows("meta", ("key", "value")))
