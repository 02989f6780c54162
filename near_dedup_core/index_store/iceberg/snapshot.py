"""Every read of a scan from one published state of an Iceberg index (`IcebergSnapshot`), the
texts a worker reads (`IcebergTexts`) and the raw-text lookups of an `index` worker
(`IcebergKnownTexts`).

A state is pinned by reading the newest ``commits`` row once: every later read of the scan
names the snapshot id that row records for its table, so batches committed meanwhile never
show (Iceberg snapshots are immutable). The history join runs per band-key bucket
(`bucket_hits`): a task reads its bucket's data files, skipping the row groups whose key
range holds none of its keys, looks its keys up in the files' sorted keys, and returns the
hits; the driver merges them."""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zstandard
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import BooleanExpression, Or
from pyiceberg.types import LongType

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.common import check_binding, longest_run, package_sources_error
from near_dedup_core.index_store.iceberg import datafiles
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.bands import (
    bucket_hits,
    bucket_probes,
    files_by_bucket,
)
from near_dedup_core.index_store.iceberg.keyed import (
    KeyedFiles,
    content_lookup,
    content_rows,
    keyed_lookup,
)
from near_dedup_core.index_store.iceberg.lookup import HashedRows
from near_dedup_core.index_store.invariants import (
    BANDS_MERGED_THROUGH,
    MISSING_SCOPE,
    SIGNATURE_MISMATCH,
    BackgroundCheck,
    check_batch_packages,
    check_meta_keys,
    restore,
)
from near_dedup_core.index_store.records import (
    SAMPLE_COLUMNS,
    BandHits,
    ContentColumns,
    ContentSource,
    ContentSplit,
    IndexCounts,
    IndexedPackage,
    OutsideSource,
)
from near_dedup_core.index_store.texts import ShippedTexts, damaged

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig

#: Threads of an inline scan's per-bucket history join.
JOIN_THREADS = 2
#: At most this many id ranges in one row filter: ids further apart than a range's gap
#: are read as separate ranges, so a lookup of scattered ids reads the files that hold them.
MAX_RANGES = 32
#: Bytes of a raw text's sha256.
SHA256_BYTES = 32


def id_ranges(ids: np.ndarray, column: str) -> BooleanExpression:
    """A row filter on ``column`` covering the sorted ``ids`` with at most `MAX_RANGES`
    ranges (the widest gaps split them); files and row groups outside them are skipped."""
    if len(ids) == 1:
        return it.equal(column, int(ids[0]))
    gaps = np.diff(ids)
    cut = np.sort(np.argsort(gaps)[::-1][:MAX_RANGES - 1]) if len(gaps) else np.zeros(0, int)
    cut = cut[gaps[cut] > 1]
    starts = np.concatenate(([0], cut + 1))
    ends = np.concatenate((cut, [len(ids) - 1]))
    parts: list[BooleanExpression] = [
        it.between(column, int(ids[a]), int(ids[b]))
        for a, b in zip(starts, ends, strict=True)]
    expr = parts[0]
    for p in parts[1:]:
        expr = Or(expr, p)
    return expr


class Pinned:
    """The index's tables at one published state (`tables.published`)."""

    def __init__(self, location: str, *, expected: bool = True) -> None:
        self.location = location
        self.where = it.where(location)
        self.catalog = it.open_catalog(self.where)
        tables = it.load_tables(self.catalog)
        if tables is None or set(tables) - set(it.ADDED_TABLES) \
                != {*it.DATA_TABLES, it.COMMITS} - set(it.ADDED_TABLES):
            raise NearDedupError(f"index {location}: not a near-dedup index (its catalog "
                                 f"lacks the index's tables)")
        self.tables = tables
        #: the data tables this index has (one of an earlier version lacks `ADDED_TABLES`
        #: until its next writer adds them), and the commit table
        self.present = tuple(n for n in it.DATA_TABLES if n in tables)
        self.state = it.published(tables)
        if expected and self.state.n == 0:
            raise NearDedupError(f"index {location}: no batch committed yet; index the inputs "
                                 f"first")

    def read(self, table: str, columns: tuple[str, ...] = ("*",),
             row_filter: BooleanExpression | None = None) -> pa.Table:
        rows = it.read(self.tables[table], self.state.snapshots[table], columns, row_filter)
        # the scan's buffers (each file's rows before they were filtered and concatenated)
        # go back to the system: Arrow's allocator would keep them for later allocations
        pa.default_memory_pool().release_unused()
        return rows

    def rows(self, table: str, columns: tuple[str, ...]) -> list[tuple]:
        t = self.read(table, columns)
        return list(zip(*(t.column(c).to_pylist() for c in columns), strict=True))

    def data_files(self, table: str) -> list[Any]:
        """The data files of ``table`` at the pinned state (pyiceberg ``DataFile``s)."""
        sid = self.state.snapshots[table]
        if sid is None or table not in self.tables:
            return []
        return [task.file for task in self.tables[table].scan(snapshot_id=sid).plan_files()]

    def total_records(self, table: str) -> int:
        """Rows of ``table`` at the pinned state, from its snapshot's summary."""
        sid = self.state.snapshots[table]
        if sid is None or table not in self.tables:
            return 0
        snap = self.tables[table].snapshot_by_id(sid)
        if snap is None:
            raise restore(self.location, f"table {table} lacks snapshot {sid} that the "
                                         f"newest commit records")
        summary = snap.summary
        value = summary.get("total-records") if summary is not None else None
        return int(value) if value is not None else self.read(table, ("*",)).num_rows

    def id_ranges(self, table: str) -> list[tuple[str, int | None, int | None]]:
        """Each data file of ``table`` at the pinned state: its path and the lowest and
        highest ``id`` its manifest entry records (None where it records none)."""
        field_id = self.tables[table].schema().find_field("id").field_id if \
            table in self.tables else 0
        out = []
        for f in self.data_files(table):
            lo = (f.lower_bounds or {}).get(field_id)
            hi = (f.upper_bounds or {}).get(field_id)
            out.append((f.file_path,
                        None if lo is None else int(from_bytes(LongType(), lo)),
                        None if hi is None else int(from_bytes(LongType(), hi))))
        return out

    def max_value(self, table: str, column: str) -> int:
        """The highest value of ``table``'s long ``column`` at the pinned state (0: no row),
        from the upper bounds that its manifests record for each data file; a file without
        one is read."""
        files = self.data_files(table)
        if not files:
            return 0
        field_id = self.tables[table].schema().find_field(column).field_id
        highest = 0
        for f in files:
            if not f.record_count:
                continue
            bound = (f.upper_bounds or {}).get(field_id)
            if bound is not None:
                value = int(from_bytes(LongType(), bound))
            else:
                values = datafiles.parquet_file(f.file_path).read(columns=[column]).column(column)
                value = pc.max(values).as_py() or 0
            highest = max(highest, value)
        return highest


local_path = datafiles.local_path


def read_every_page(location: str, uri: str, name: str) -> None:
    """Read every row group of a data file, each page checked against its CRC32 (when the
    file has them) and decoded: a flipped byte is one line naming the file."""
    try:
        pf = datafiles.parquet_file(uri)
        for g in range(pf.metadata.num_row_groups):
            pf.read_row_group(g, use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise NearDedupError(f"index {location}: damaged (data file {local_path(uri)} of table "
                             f"{name} does not read back: {detail}); restore it from a "
                             f"backup") from None
    finally:
        pa.default_memory_pool().release_unused()


def _read_file(location: str, uri: str, name: str, _: Any) -> None:
    read_every_page(location, uri, name)


class _NoConnection:
    """The connection a `BackgroundCheck` of data files holds: none."""

    def close(self) -> None:
        """Nothing to close."""


def unverified_files(pinned: Pinned) -> list[tuple[str, str]]:
    """The data files of the pinned state (URI, table) that no earlier `index` read in full:
    those added by a snapshot that no commit up to the one before the newest batch records.
    The writer of the newest batch read every file of the state it appended to (this check,
    by induction from the first batch); a file still published now and added by a snapshot
    that an earlier state records was in that state. So a day reads the files published
    since the day before (its batch, a compaction's), not the history."""
    commits = pinned.tables[it.COMMITS]
    rows = commits.scan(snapshot_id=pinned.state.commit_snapshot).to_arrow().to_pylist() \
        if pinned.state.commit_snapshot is not None else []
    batches = [int(r["n"]) for r in rows if r["op"] == "batch"]
    newest = max(batches, default=0)
    seen: set[int] = set()
    for r in rows:
        if int(r["n"]) < newest:
            seen.update(s for s in orjson.loads(r["tables"]).values() if s is not None)
    out = []
    for name in pinned.present:
        sid = pinned.state.snapshots[name]
        if sid is None:
            continue
        table = pinned.tables[name]
        snap = table.snapshot_by_id(sid)
        if snap is None:
            raise restore(pinned.location, f"table {name} lacks snapshot {sid} that the "
                                           f"newest commit records")
        for manifest in snap.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.snapshot_id not in seen:
                    out.append((entry.data_file.file_path, name))
    return out


def files_check(pinned: Pinned, *, idle: bool) -> BackgroundCheck:
    """`BackgroundCheck` of every data file of the pinned state that no earlier `index` read
    (`unverified_files`), read in full (as SQLite's page check reads every page,
    `invariants.sqlite_background_check`): no batch is appended on top of a file that was
    never read back whole, whatever pages it reads itself. (A scan needs no such read: every
    page it reads is checked as it is read, `IcebergSnapshot.verify_pages`; `index check`
    reads every file.)"""
    files = unverified_files(pinned)
    location = pinned.location
    checks: list[Callable[[Any], None]] = [
        functools.partial(_read_file, location, uri, name) for uri, name in files]
    return BackgroundCheck(_NoConnection(), checks, lambda: None, idle=idle)


#: Bytes of content row groups (their texts) that a reader keeps for later reads: a verify
#: worker reads the texts of its chunks' pairs, and later chunks meet some of the same
#: contents; the row groups read least recently are dropped beyond this.
KEPT_ROW_GROUP_BYTES = 16 << 20


#: The columns of a content row group that a text reader reads: the text, its dictionary and
#: its digest (`texts.Digests`).
TEXT_COLUMNS = ("id", "text_z", "dictionary", "content_id", "scope")


class RowGroups:
    """The texts of the contents' data files, read by Parquet row group: the row groups whose
    id range (from the files' statistics) holds a wanted id, the most recently read ones kept
    up to `KEPT_ROW_GROUP_BYTES` (a worker's memory stays bounded however many contents its
    chunks reach). A file is opened (its footer read) only when a wanted id falls in the id
    range its manifest entry records: a reader's start does not grow with the history."""

    def __init__(self, files: list[str] | list[tuple[str, int | None, int | None]]) -> None:
        """``files``: each data file's path, or (path, lowest id, highest id) from its manifest
        entry (None where the manifest records no bound: the file is opened at the first
        read)."""
        entries = [(f, None, None) if isinstance(f, str) else f for f in files]
        self._paths = [path for path, _, _ in entries]
        self._file_lo = np.asarray([lo if lo is not None else np.iinfo(np.int64).min
                                    for _, lo, _ in entries], dtype=np.int64)
        self._file_hi = np.asarray([hi if hi is not None else np.iinfo(np.int64).max
                                    for _, _, hi in entries], dtype=np.int64)
        self._files: dict[int, pq.ParquetFile] = {}
        self._groups: list[tuple[int, int, int, int]] = []  # (lowest id, highest, file, group)
        self._lo = np.zeros(0, dtype=np.int64)
        self._hi = np.zeros(0, dtype=np.int64)
        self._where: list[tuple[int, int]] = []
        self._read: OrderedDict[tuple[int, int], tuple[np.ndarray, pa.Table]] = OrderedDict()
        self._kept: dict[tuple[int, int], int] = {}  # bytes of each kept row group
        self._kept_bytes = 0

    def _open_for(self, wanted: np.ndarray) -> None:
        """Open the files not opened yet whose id range holds one of ``wanted`` (sorted), and
        add their row groups to the sorted ranges."""
        first = np.searchsorted(wanted, self._file_lo, side="left")
        holds = (first < len(wanted)) & (wanted[np.minimum(first, len(wanted) - 1)]
                                         <= self._file_hi)
        new = [f for f in np.flatnonzero(holds).tolist() if f not in self._files]
        if not new:
            return
        for f in new:
            pf = self._files[f] = datafiles.parquet_file(self._paths[f])
            column = pf.schema_arrow.get_field_index("id")
            for g in range(pf.metadata.num_row_groups):
                stats = pf.metadata.row_group(g).column(column).statistics
                self._groups.append((stats.min, stats.max, f, g))
        self._groups.sort(key=lambda t: t[0])
        self._lo = np.asarray([t[0] for t in self._groups], dtype=np.int64)
        self._hi = np.asarray([t[1] for t in self._groups], dtype=np.int64)
        self._where = [(t[2], t[3]) for t in self._groups]

    def blobs(self, wanted: np.ndarray) -> dict[int, tuple[bytes, int | None, bytes, int]]:
        """(text_z, dictionary, content_id, scope) of the ``wanted`` ids (sorted, distinct)
        that the files hold."""
        out: dict[int, tuple[bytes, int | None, bytes, int]] = {}
        dropped = False
        if not len(wanted):
            return out
        self._open_for(wanted)
        at = np.searchsorted(self._lo, wanted, side="right") - 1
        for k in np.unique(at[at >= 0]).tolist():
            ids = wanted[at == k]
            ids = ids[ids <= self._hi[k]]
            if not len(ids):
                continue
            g = self._where[k]
            if g in self._read:
                self._read.move_to_end(g)
            else:
                f, rg = g
                t = self._files[f].read_row_group(rg, columns=list(TEXT_COLUMNS))
                gids = t.column("id").to_numpy()
                if len(gids) > 1 and (np.diff(gids) < 0).any():  # written in id order as a rule
                    t = t.take(pa.array(np.argsort(gids, kind="stable")))
                self._read[g] = (t.column("id").to_numpy(), t)
                self._kept[g] = t.nbytes
                self._kept_bytes += t.nbytes
                while len(self._read) > 1 and self._kept_bytes > KEPT_ROW_GROUP_BYTES:
                    oldest, _ = self._read.popitem(last=False)
                    self._kept_bytes -= self._kept.pop(oldest)
                    dropped = True
            gids, t = self._read[g]
            pos = np.searchsorted(gids, ids)
            pos[pos == len(gids)] = 0
            found = gids[pos] == ids
            rows = t.take(pa.array(pos[found]))
            for cid, *row in zip(ids[found].tolist(),
                                 *(rows.column(c).to_pylist() for c in TEXT_COLUMNS[1:]),
                                 strict=True):
                out[cid] = tuple(row)
        if dropped:
            # the Parquet reader's buffers and the dropped row groups go back to the system
            # (Arrow's allocator would keep them for later allocations)
            pa.default_memory_pool().release_unused()
        return out


def binary_values(values: pa.Array) -> np.ndarray:
    """The bytes of a (large) binary array without nulls, concatenated, as uint8."""
    buffers = values.buffers()
    wide = pa.types.is_large_binary(values.type)
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)[
        values.offset:values.offset + len(values) + 1]
    return np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0]:offsets[-1]]


def row_slices(t: pa.Table, columns: tuple[str, ...], batch: int = 1 << 16
               ) -> Iterator[list[tuple]]:
    """The rows of ``t`` (those ``columns``) as tuples, ``batch`` at a time: only one slice's
    Python objects exist at once (a package's sources stay columns of Arrow memory)."""
    for start in range(0, t.num_rows, batch):
        part = t.slice(start, batch)
        yield list(zip(*(part.column(c).to_pylist() for c in columns), strict=True))


class IcebergTexts:
    """Normalized texts of contents by row id, and the samples' columns, read from the newest
    published state (content and source rows are insert-only: any later state holds the same
    rows for every id a scan knows)."""

    def __init__(self, pinned: Pinned) -> None:
        self._pinned = pinned
        self.path = pinned.location
        self.location = pinned.location
        self._dictionaries: dict[int, bytes] | None = None
        self._scope_keys: dict[int, str] | None = None
        self._groups: RowGroups | None = None

    @classmethod
    def open(cls, location: str) -> IcebergTexts:
        return cls(Pinned(location))

    def close(self) -> None:
        """Nothing stays open between reads."""

    def dictionaries(self) -> dict[int, bytes]:
        if self._dictionaries is None:
            self._dictionaries = {i: bytes(d) for i, d in
                                  self._pinned.rows("dictionaries", ("id", "data"))}
        return self._dictionaries

    def package_sources(self, package_rowid: int, columns: tuple[str, ...]) -> pa.Table:
        t = self._pinned.read("sources", (*columns, "position") if "position" not in columns
                              else columns, it.equal("package", package_rowid))
        return t.sort_by("position")

    def package_origins(self, package_rowid: int) -> Iterator[tuple]:
        cols = ("sample_id", "split", "file", "line", "source")
        t = self.package_sources(package_rowid, cols)
        for rows in row_slices(t, cols):
            yield from rows

    SAMPLE_COLUMNS = SAMPLE_COLUMNS

    def package_column(self, package_rowid: int, column: str) -> list:
        if column not in self.SAMPLE_COLUMNS:
            raise ValueError(f"not a sample column: {column}")
        return self.package_sources(package_rowid, (column,)).column(column).to_pylist()

    def _row_groups(self) -> RowGroups:
        if self._groups is None:
            self._groups = RowGroups(self._pinned.id_ranges("contents"))
        return self._groups

    def scope_keys(self) -> dict[int, str]:
        if self._scope_keys is None:
            self._scope_keys = dict(self._pinned.rows("scopes", ("id", "scope_key")))
        return self._scope_keys

    def _blobs(self, ids: list[int]) -> dict[int, tuple[bytes, int | None, bytes, int]]:
        wanted = np.unique(np.asarray(ids, dtype=np.int64))
        if not len(wanted):
            return {}
        blobs = self._row_groups().blobs(wanted)
        if len(blobs) != len(wanted):
            raise damaged(self.path, f"{len(wanted) - len(blobs):,} content rows are missing")
        return blobs

    def shipped(self, ids: list[int]) -> ShippedTexts:
        rows = self._blobs(ids)
        wanted = {d for _, d, _, _ in rows.values() if d is not None}
        dicts = {d: v for d, v in self.dictionaries().items() if d in wanted}
        keys = self.scope_keys()
        scopes = {scope for _, _, _, scope in rows.values()}
        return ShippedTexts(str(self.path), {c: (t, d) for c, (t, d, _, _) in rows.items()},
                            dicts, {c: (digest, scope) for c, (_, _, digest, scope)
                                    in rows.items()},
                            {s: keys[s] for s in scopes if s in keys})

    def utf8_texts(self, ids: list[int]) -> list[bytes]:
        shipped = self.shipped(ids)
        try:
            return shipped.utf8_texts(list(ids))
        except (zstandard.ZstdError, KeyError, TypeError) as exc:
            raise damaged(self.path, f"a content text does not decompress: {exc}") from None

    def texts(self, ids: list[int]) -> dict[int, str]:
        ids = list(dict.fromkeys(ids))
        try:
            return {cid: t.decode() for cid, t in zip(ids, self.utf8_texts(ids), strict=True)}
        except UnicodeDecodeError as exc:
            raise damaged(self.path, f"a content text does not decompress: {exc}") from None


class IcebergKnownTexts:
    """Contents of the raw compared texts of the published state: (text_sha256, scope key) ->
    content row id, from the row groups of the ``raw_texts`` files (each sorted by
    ``text_sha256``) whose hash range holds an asked sha256 (`keyed.KeyedFiles`; an `index`
    worker keeps the files' footers for its life). Kept longer, it re-reads the published
    state when that moved on: at most once a `RECHECK_S` it asks the catalog for the commit
    table's snapshot, so until then it may answer from the state it read (an `index` writer
    that works blocks inline drops its kept lookups at each batch,
    `ingest.work.forget_known_texts`)."""

    #: Seconds between two checks that the published state is still the one read.
    RECHECK_S = 1.0

    def __init__(self, location: str) -> None:
        self._location = location
        self._rows: KeyedFiles | None = None
        self._keys: dict[int, str] = {}
        self._pinned: Pinned | None = None
        self._checked = 0.0

    def _load(self) -> KeyedFiles:
        now = time.monotonic()
        if self._rows is not None and self._pinned is not None \
                and now - self._checked >= self.RECHECK_S:
            self._checked = now
            commits = self._pinned.tables[it.COMMITS].refresh().current_snapshot()
            if (None if commits is None else commits.snapshot_id) \
                    != self._pinned.state.commit_snapshot:
                self._rows = None
        if self._rows is None:
            pinned = self._pinned = Pinned(self._location, expected=False)
            self._checked = now
            self._keys = dict(pinned.rows("scopes", ("id", "scope_key")))
            self._rows = keyed_lookup(pinned, "raw_texts", "text_sha256", SHA256_BYTES,
                                      ("scope", "content"), it.io_threads(self._location, 1))
        return self._rows

    def contents(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        """(text_sha256, scope key) -> content row id, for the given sha256s; a failed read
        is one line naming the index."""
        from near_dedup_core.index_store.iceberg import errors

        with errors(self._location):
            return self._contents(shas)

    def _contents(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        rows = self._load()
        found = rows.find([bytes(sha) for sha in shas])
        out = {}
        for sha, hits in found.items():
            for scope, content in hits:
                key = self._keys.get(scope)
                if key is None:
                    raise damaged(self._location, MISSING_SCOPE)
                out[(sha, key)] = content
        return out

    def close(self) -> None:
        self._rows = None


class IcebergSnapshot:
    """Every read of a scan from ONE published state of an Iceberg index (module doc), a
    `protocols.Snapshot`."""

    def __init__(self, pinned: Pinned, config: NearDedupConfig | None = None) -> None:
        #: `protocols.Snapshot.join_executor`: where the per-bucket join's tasks run
        self.join_executor: Executor | None = None
        self._texts = IcebergTexts(pinned)
        self._pinned = pinned
        self.path = pinned.location
        self.location = pinned.location
        self._signature_bytes = None if config is None else 2 * config.num_perm
        self._min_chars = None if config is None else config.min_chars
        self._scope_ids: np.ndarray | None = None
        self._content_lookup: HashedRows | KeyedFiles | None = None
        self._meta = dict(pinned.rows("meta", ("key", "value")))
        self._packages = [IndexedPackage(*r) for r in pinned.rows(
            "packages", ("id", "package_id", "kind", "manifest_sha256", "batch", "records"))]
        self._packages.sort(key=lambda p: (p.batch, p.package_id))
        self._batches = pinned.rows("batches", ("seq", "packages"))
        # the count from the snapshot's summary, the highest id from the manifests: no read
        # of the contents' rows, whatever the history holds
        self._content_count = pinned.total_records("contents")
        self._max_content = pinned.max_value("contents", "id")
        self._meta[BANDS_MERGED_THROUGH] = str(self._max_content)
        self._release: Any = None

    @classmethod
    def open_location(cls, location: str, config: NearDedupConfig | None = None
                      ) -> IcebergSnapshot:
        folder = it.where(location).lock_folder
        lock = it.readers_lock(folder, False, location) if folder is not None \
            and folder.is_dir() else None
        if lock is not None:
            lock.__enter__()
        try:
            snap = cls(Pinned(location), config)
            if config is not None:
                check_binding(location, snap._meta, config)
            snap.quick_check()
        except BaseException:
            if lock is not None:
                lock.__exit__(None, None, None)
            raise
        snap._release = lock
        return snap

    def quick_check(self) -> None:
        """The invariants every scan relies on (`invariants.quick_check`), from the pinned
        tables' small rows and their snapshots' row counts."""
        label = self.location
        check_meta_keys(label, self._meta, len(self._batches))
        check_batch_packages(label, self._batches,
                             [(p.package_id, p.batch) for p in self._packages])
        records = sum(p.records for p in self._packages)
        sources = self._pinned.total_records("sources")
        if sources != records:
            raise restore(label, f"the index holds {sources:,} sources, its packages "
                                 f"{records:,} records")
        if self._content_count != self._max_content:
            raise damaged(label, f"{self._max_content - self._content_count:,} content rows "
                                 f"are missing")

    def verify_pages(self) -> None:
        """Nothing to wait for: every page the scan read was checked against its CRC as it
        was read (`tables.read`, `datafiles.parquet_file`: pyarrow's
        ``page_checksum_verification``), and every text against its ``content_id``; the pages
        it did not read cannot change its report. `index check` reads every file."""

    def close(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the index holds
    def meta(self) -> dict[str, str]:
        return dict(self._meta)

    def indexed_packages(self) -> list[IndexedPackage]:
        return list(self._packages)

    def counts(self) -> IndexCounts:
        return IndexCounts(len(self._batches), self._max_content)

    def scope_labels(self) -> dict[int, str]:
        return dict(self._pinned.rows("scopes", ("id", "label")))

    # -- samples and texts (the same reads as a worker's, at the pinned state)
    def package_origins(self, package_rowid: int) -> Iterator[tuple]:
        return self._texts.package_origins(package_rowid)

    def package_column(self, package_rowid: int, column: str) -> list:
        return self._texts.package_column(package_rowid, column)

    def shipped(self, ids: list[int]) -> ShippedTexts:
        return self._texts.shipped(ids)

    def texts(self, ids: list[int]) -> dict[int, str]:
        return self._texts.texts(ids)

    def utf8_texts(self, ids: list[int]) -> list[bytes]:
        return self._texts.utf8_texts(ids)

    def pool_samples(self, package: IndexedPackage, batch: int = 1 << 16
                     ) -> Iterator[list[tuple]]:
        columns = ("sample_id", "split", "content")
        t = self._texts.package_sources(package.rowid, columns)
        if t.num_rows != package.records:
            raise package_sources_error(self.path, package.package_id, t.num_rows,
                                        package.records)
        yield from row_slices(t, columns, batch)

    def sample_rows(self, package: IndexedPackage, batch: int = 1 << 16
                    ) -> Iterator[list[tuple]]:
        columns = ("position", "sample_id", "split", "file", "line", "domain", "content")
        yield from row_slices(self._texts.package_sources(package.rowid, columns), columns, batch)

    def sample_location(self, package: IndexedPackage, nth: int) -> tuple[str, int]:
        t = self._texts.package_sources(package.rowid, ("file", "line"))
        return t.column("file")[nth].as_py(), t.column("line")[nth].as_py()

    def content_columns(self, ids: np.ndarray) -> ContentColumns:
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        n = len(ids)
        width = self._signature_bytes
        if n:
            t = self._pinned.read("contents", ("id", "content_id", "scope", "batch",
                                               "shingles", "signature", "norm_chars"),
                                  id_ranges(ids, "id"))
            t = t.filter(pa.array(np.isin(t.column("id").to_numpy(), ids))).sort_by("id")
        else:
            t = it.arrow_schema("contents").empty_table()
        if t.num_rows != n or not np.array_equal(t.column("id").to_numpy(), ids):
            raise damaged(self.path, f"{n - t.num_rows:,} content rows are missing")
        scope = t.column("scope").to_numpy(zero_copy_only=False).astype(np.int64)
        batch = t.column("batch").to_numpy(zero_copy_only=False).astype(np.int64)
        shingles = pc.fill_null(t.column("shingles"), -1).to_numpy().astype(np.int64)
        # the signatures straight from the column's data buffer (no Python object per row)
        sig = t.column("signature")
        has_signature = sig.is_valid().to_numpy(zero_copy_only=False).astype(bool)
        found = pc.drop_null(sig).combine_chunks()
        lengths = pc.binary_length(found).to_numpy(zero_copy_only=False)
        if len(found) and width is None:
            width = int(lengths[0])
        if (lengths != width).any():
            raise damaged(self.path, "a content signature has the wrong length")
        signatures = np.zeros((n, (width or 2) // 2), dtype=np.uint16)
        if len(found):
            signatures[has_signature] = binary_values(found).view(np.uint16).reshape(
                len(found), -1)
        norm_chars = t.column("norm_chars").to_numpy(zero_copy_only=False).astype(np.int64)
        long = (norm_chars >= self._min_chars if self._min_chars is not None and n
                else np.zeros(n, dtype=bool))
        self._check_columns(scope, has_signature, long)
        return ContentColumns(ids, [bytes(c) for c in t.column("content_id").to_pylist()],
                              scope, batch, shingles, signatures, has_signature, norm_chars)

    def _check_columns(self, scope: np.ndarray, has_signature: np.ndarray,
                       long: np.ndarray) -> None:
        if self._scope_ids is None:
            self._scope_ids = np.asarray(
                [i for (i,) in self._pinned.rows("scopes", ("id",))], dtype=np.int64)
        if not np.isin(scope, self._scope_ids).all():
            raise damaged(self.path, MISSING_SCOPE)
        if self._min_chars is not None and not np.array_equal(has_signature, long):
            raise damaged(self.path, SIGNATURE_MISMATCH)

    def _sources_of(self, ids: list[int], columns: tuple[str, ...]) -> pa.Table:
        wanted = np.unique(np.asarray(ids, dtype=np.int64))
        if not len(wanted):
            return pa.schema([it.arrow_schema("sources").field(c) for c in columns]
                             ).empty_table()
        t = self._pinned.read("sources", columns, id_ranges(wanted, "content"))
        return t.filter(pa.array(np.isin(t.column("content").to_numpy(), wanted)))

    def content_splits(self, ids: list[int]) -> list[ContentSplit]:
        t = self._sources_of(ids, ("content", "split"))
        pairs = sorted(set(zip(t.column("content").to_pylist(), t.column("split").to_pylist(),
                               strict=True)))
        return [ContentSplit(*p) for p in pairs]

    # -- history
    def history_band_hits(self, keys: np.ndarray, pool_contents: list[int],
                          pool_nodes: set[tuple[int, str]]) -> BandHits:
        """Band rows with one of ``keys`` whose content is outside the pool (as on SQLite),
        joined per band-key bucket: one task per bucket that holds probe keys
        (`bucket_hits`), on the scan's executor (`join_executor`: its local worker
        processes or Ray tasks) or, inline, on `JOIN_THREADS` threads of this process (more
        for a warehouse on S3, `tables.io_threads`: the tasks wait on requests)
        (Parquet reads leave the GIL); the hits concatenated (the caller deduplicates and
        sorts them)."""
        mixed = sorted({c for c, split in self.content_splits(pool_contents)
                        if (c, split) not in pool_nodes})
        pool = np.setdiff1d(np.asarray(pool_contents, dtype=np.int64),
                            np.asarray(mixed, dtype=np.int64))
        lo, hi = longest_run(pool)
        skip = np.setdiff1d(pool, np.arange(lo, hi + 1, dtype=np.int64))
        tasks = self.bucket_tasks(np.ascontiguousarray(keys, dtype=np.int64), (lo, hi))
        if self.join_executor is not None:
            futures = [self.join_executor.submit(bucket_hits, paths, probes, skip, lo, hi)
                       for paths, probes in tasks]
            found = [f.result() for f in futures]
        else:
            threads_ = it.io_threads(self.location, JOIN_THREADS)
            with ThreadPoolExecutor(max_workers=threads_) as threads:
                found = list(threads.map(lambda a: bucket_hits(a[0], a[1], skip, lo, hi),
                                         tasks))
        if not found:
            return BandHits(np.zeros(0, np.int64), np.zeros(0, np.int64))
        return BandHits(np.concatenate([k for k, _ in found]),
                        np.concatenate([c for _, c in found]))

    def bucket_tasks(self, keys: np.ndarray, own: tuple[int, int] = (1, 0)
                     ) -> list[tuple[list[str], np.ndarray]]:
        """(data file paths, sorted probe keys) of each bucket that holds probe keys and
        band rows, in bucket order, less the files whose every content lies in ``own``
        (`bands.files_by_bucket`)."""
        table = self._pinned.tables["bands"]
        return bucket_probes(keys, int(self._meta[it.BUCKETS_KEY]), files_by_bucket(
            self._pinned.data_files("bands"), table.schema().find_field("content").field_id,
            own))

    # -- the report
    def outside_sources(self, contents_: list[int],
                        pool_package_ids: set[str]) -> list[OutsideSource]:
        names = {p.rowid: p.package_id for p in self._packages}
        t = self._sources_of(contents_, ("content", "package", "sample_id", "split"))
        out = []
        for c, p, s, split in zip(*(t.column(x).to_pylist() for x in
                                    ("content", "package", "sample_id", "split")), strict=True):
            if names.get(p) not in pool_package_ids:
                out.append(OutsideSource(c, names[p], s, split))
        return out

    # -- provenance (`index find`)
    def scope_keys(self) -> dict[int, str]:
        return dict(self._texts.scope_keys())

    def batch_dates(self) -> dict[int, str]:
        return dict(self._pinned.rows("batches", ("seq", "created_at")))

    def content_rows(self, content_ids: list[bytes]) -> dict[bytes, int]:
        """Probed per bucket in ``content_keys``, as `index` does (`keyed.content_lookup`)."""
        wanted = sorted(set(content_ids))
        if not wanted:
            return {}
        if self._content_lookup is None:
            self._content_lookup = content_lookup(self._pinned)
        return content_rows(self._content_lookup, wanted)

    def content_sources(self, ids: list[int]) -> list[ContentSource]:
        columns = ("content", "package", "sample_id", "split", "text_sha256", "domain")
        t = self._sources_of(ids, columns)
        return sorted(ContentSource(c, p, s, split, bytes(sha), d) for c, p, s, split, sha, d
                      in zip(*(t.column(x).to_pylist() for x in columns), strict=True))
