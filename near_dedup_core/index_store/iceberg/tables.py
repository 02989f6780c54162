"""The Iceberg tables of an index, its catalog and its commit rule (see the package docstring
and docs/iceberg.md): opening the catalog, the state a commit published (`Published`), the
writer's lock and the readers' lock."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyiceberg import expressions
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BinaryType, IntegerType, LongType, NestedField, StringType

from near_dedup_core.errors import NearDedupError

SCHEME = "iceberg://"
NAMESPACE = "near_dedup"
CATALOG_FILE = "catalog.db"
WAREHOUSE = "warehouse"
WRITER_LOCK = "writer.lock"
READERS_LOCK = "readers.lock"
#: meta key: the number of band-key buckets, fixed when the index is created.
BUCKETS_KEY = "iceberg_buckets"
#: Band-key buckets of a new index (docs/iceberg.md says how the count was chosen).
DEFAULT_BUCKETS = 64
BUCKETS_ENV = "NEAR_DEDUP_ICEBERG_BUCKETS"
#: Rows per Parquet row group: a probe skips the band row groups whose key range misses its
#: keys; a text reader reads the content row groups whose id range holds its ids.
ROW_GROUP_ROWS = {"bands": 65_536, "contents": 4_096}

L, B, S = LongType, BinaryType, StringType

#: Each table's columns (name, type), in the order of the SQLite index's columns.
COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "meta": [("key", S), ("value", S)],
    "batches": [("seq", L), ("created_at", S), ("tool_version", S), ("packages", S)],
    "packages": [("id", L), ("package_id", S), ("kind", S), ("manifest_sha256", S),
                 ("batch", L), ("records", L), ("manifest", S)],
    "scopes": [("id", L), ("scope_key", S), ("label", S)],
    "dictionaries": [("id", L), ("batch", L), ("data", B)],
    "contents": [("id", L), ("content_id", B), ("scope", L), ("batch", L), ("norm_chars", L),
                 ("shingles", L), ("signature", B), ("text_z", B), ("dictionary", L)],
    "sources": [("id", L), ("content", L), ("package", L), ("sample_id", S), ("split", S),
                ("file", S), ("line", L), ("position", L), ("text_sha256", B),
                ("domain", S), ("source", S)],
    "raw_texts": [("text_sha256", B), ("scope", L), ("content", L)],
    "bands": [("bucket", IntegerType), ("key", L), ("content", L)],
}
#: The tables a commit publishes, at the snapshot ids its ``commits`` row records.
DATA_TABLES = tuple(COLUMNS)
#: The commit table: one row per commit (a batch, a compaction), the newest row is the
#: published state.
COMMITS = "commits"
COMMIT_COLUMNS = [("n", L), ("op", S), ("at", S), ("tables", S)]
#: The column each table's rows are sorted by inside a data file.
SORTED_BY = {"batches": "seq", "packages": "id", "scopes": "id", "dictionaries": "id",
             "contents": "id", "sources": "id", "raw_texts": "text_sha256", "bands": "key"}


#: pyiceberg's row filters, built from (column, value): its expression classes are pydantic
#: models whose generated signatures the type checker cannot follow.
_EXPR: Any = expressions


def equal(column: str, value: int) -> BooleanExpression:
    return _EXPR.EqualTo(column, value)


def one_of(column: str, values: list[int]) -> BooleanExpression:
    return _EXPR.In(column, values)


def between(column: str, lo: int, hi: int) -> BooleanExpression:
    return _EXPR.And(_EXPR.GreaterThanOrEqual(column, lo), _EXPR.LessThanOrEqual(column, hi))


def schema_of(columns: list[tuple[str, Any]]) -> Schema:
    return Schema(*[NestedField(i, name, kind(), required=False)
                    for i, (name, kind) in enumerate(columns, start=1)])


def arrow_schema(table: str) -> pa.Schema:
    return schema_of(COMMIT_COLUMNS if table == COMMITS else COLUMNS[table]).as_arrow()


def local_path(uri: str) -> str:
    """The local path of a ``file://`` URI (as pyiceberg records them)."""
    return uri[len("file://"):] if uri.startswith("file://") else uri


def folder_of(location: str) -> Path:
    """The folder of ``iceberg:///absolute/folder``; anything else is refused."""
    rest = location[len(SCHEME):]
    if not rest.startswith("/") or rest.startswith("//") or "?" in rest or "#" in rest:
        raise NearDedupError(f"index {location}: give an absolute local folder as "
                             f"iceberg:///absolute/folder")
    return Path(rest)


def catalog(folder: Path, *, create: bool = False) -> Catalog:
    """pyiceberg's SQL catalog in ``folder/catalog.db``, its warehouse in ``folder/warehouse``.
    A reader never creates the catalog's tables (its file stays byte-for-byte as it was)."""
    return SqlCatalog("near_dedup", uri=f"sqlite:///{folder / CATALOG_FILE}",
                      warehouse=(folder / WAREHOUSE).as_uri(),
                      init_catalog_tables="true" if create else "false")


def _properties(table: str) -> dict[str, str]:
    # a conflicting commit fails instead of being replayed on the new state: the writer
    # decides (docs/iceberg.md, "Two writers")
    return {"commit.retry.num-retries": "0",
            "write.parquet.row-group-limit": str(ROW_GROUP_ROWS.get(table, 65_536)),
            # texts are zstd frames already, ids and signatures are hashes: no codec helps
            "write.parquet.compression-codec": "uncompressed" if table == "contents" else "zstd"}


def create_tables(cat: Catalog) -> dict[str, Table]:
    """The data tables and the commit table of a new index."""
    try:
        cat.create_namespace(NAMESPACE)
    except Exception:  # noqa: BLE001 -- exists already (a first batch killed earlier)
        pass
    out = {}
    for name in (*DATA_TABLES, COMMITS):
        columns = COMMIT_COLUMNS if name == COMMITS else COLUMNS[name]
        schema = schema_of(columns)
        spec = PartitionSpec()
        order = SortOrder()
        if name == "bands":
            spec = PartitionSpec(PartitionField(source_id=1, field_id=1000,
                                                transform=IdentityTransform(), name="bucket"))
        if name in SORTED_BY:
            source = [c for c, _ in columns].index(SORTED_BY[name]) + 1
            order = SortOrder(SortField(source_id=source, transform=IdentityTransform()))
        out[name] = cat.create_table(f"{NAMESPACE}.{name}", schema=schema, partition_spec=spec,
                                     sort_order=order, properties=_properties(name))
    return out


def drop_tables(cat: Catalog) -> None:
    """Drop every table (their files stay, as orphans): a first batch killed before its
    commit left tables that no commit published."""
    for name in (*DATA_TABLES, COMMITS):
        try:
            cat.drop_table(f"{NAMESPACE}.{name}")
        except NoSuchTableError:
            pass


def load_tables(cat: Catalog) -> dict[str, Table] | None:
    """Every table of the index, or None when the catalog holds none of them."""
    try:
        names = {ident[-1] for ident in cat.list_tables(NAMESPACE)}
    except NoSuchNamespaceError:
        return None
    if not names:
        return None
    return {name: cat.load_table(f"{NAMESPACE}.{name}") for name in (*DATA_TABLES, COMMITS)
            if name in names}


@dataclass(frozen=True)
class Published:
    """The state of the index that the newest ``commits`` row publishes: the commit table's
    snapshot and each data table's recorded snapshot id (None: no row yet)."""

    n: int  # commits so far (0: nothing published)
    commit_snapshot: int | None
    snapshots: dict[str, int | None]


def published(tables: dict[str, Table]) -> Published:
    """The published state: the newest row of the commit table's current snapshot."""
    commits = tables[COMMITS]
    current = commits.current_snapshot()
    if current is None:
        return Published(0, None, {t: None for t in DATA_TABLES})
    rows = commits.scan(snapshot_id=current.snapshot_id).to_arrow().to_pylist()
    if not rows:
        return Published(0, current.snapshot_id, {t: None for t in DATA_TABLES})
    newest = max(rows, key=lambda r: r["n"])
    recorded = orjson.loads(newest["tables"])
    return Published(int(newest["n"]), current.snapshot_id,
                     {t: recorded.get(t) for t in DATA_TABLES})


def read(table: Table, snapshot: int | None, columns: tuple[str, ...] = ("*",),
         row_filter: BooleanExpression | None = None) -> pa.Table:
    """Rows of ``table`` at ``snapshot`` (an empty table of those columns when None)."""
    if snapshot is None:
        schema = table.schema().as_arrow()
        if columns != ("*",):
            schema = pa.schema([schema.field(c) for c in columns])
        return schema.empty_table()
    return table.scan(row_filter=row_filter if row_filter is not None else AlwaysTrue(),
                      selected_fields=columns, snapshot_id=snapshot).to_arrow()


def busy_timeout() -> float:
    return float(os.environ.get("NEAR_DEDUP_BUSY_TIMEOUT", 30.0))


@contextmanager
def writer_lock(folder: Path, label: str, timeout: float | None = None) -> Iterator[None]:
    """The writer's lock (``folder/writer.lock``, ``flock``): one batch, compaction or expiry
    at a time on this machine; released by the kernel when the process ends, also by a kill."""
    timeout = busy_timeout() if timeout is None else timeout
    fd = os.open(folder / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise NearDedupError(f"index {label}: busy, another near-dedup run writes "
                                         f"it (waited {timeout:g}s); try again when it has "
                                         f"finished") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


@contextmanager
def readers_lock(folder: Path, exclusive: bool, label: str) -> Iterator[None]:
    """A scan holds ``folder/readers.lock`` shared for its life; expiry takes it exclusive
    and refuses to run while any scan holds it (the snapshots a scan pinned stay)."""
    path = folder / READERS_LOCK
    if not path.exists():
        if exclusive:
            path.touch()
        else:
            yield
            return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            if exclusive:
                raise NearDedupError(f"index {label}: a scan is reading it; expire old "
                                     f"snapshots when no scan runs") from None
            fcntl.flock(fd, fcntl.LOCK_SH)  # an expiry is running: wait for it
        yield
    finally:
        os.close(fd)
