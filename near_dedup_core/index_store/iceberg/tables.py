"""The Iceberg tables of an index, its catalog and its commit rule (see the package docstring
and docs/iceberg.md): where an index lives (`where`), opening the catalog, the tables'
schemas and layout, the state a commit published (`Published`), the writer's lock and the
readers' lock. Its data files are reached through `datafiles`."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
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
from near_dedup_core.index_store.iceberg.datafiles import (
    FILE_IO,
    read_source,
    s3_location,
    s3fs_of,
)
from near_dedup_core.index_store.iceberg.datafiles import local_path as local_path

SCHEME = "iceberg://"
NAMESPACE = "near_dedup"
CATALOG_FILE = "catalog.db"
WAREHOUSE = "warehouse"
WRITER_LOCK = "writer.lock"
READERS_LOCK = "readers.lock"
#: meta key: the number of band-key buckets of the published state; `index compact` grows
#: it with the index (`bands.buckets_for`).
BUCKETS_KEY = "iceberg_buckets"
#: Band-key buckets of a new index (docs/iceberg.md, "Buckets grow with the index"): few
#: files a batch while the index is small, enough tasks for the history join's workers.
DEFAULT_BUCKETS = 16
BUCKETS_ENV = "NEAR_DEDUP_ICEBERG_BUCKETS"
#: The bucket counts a new index takes (docs/iceberg.md: 10^10 contents want 16,384).
MAX_BUCKETS = 65_536


def bucket_count() -> int:
    """The bucket count a new index starts at: `BUCKETS_ENV` if set, else `DEFAULT_BUCKETS`; a
    setting that is not a whole number from 1 to `MAX_BUCKETS` is one line."""
    value = os.environ.get(BUCKETS_ENV)
    if value is None:
        return DEFAULT_BUCKETS
    try:
        count = int(value.strip())
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_BUCKETS:
        raise NearDedupError(f"{BUCKETS_ENV}={value!r}: not a bucket count; give a whole "
                             f"number from 1 to {MAX_BUCKETS:,} (or leave it unset: "
                             f"{DEFAULT_BUCKETS})")
    return count
#: Rows per Parquet row group: a probe skips the band row groups whose key range misses its
#: keys; a text reader reads the content row groups whose id range holds its ids.
#: An `index`'s lookups (`keyed`) read the row groups of ``content_keys`` and ``raw_texts``
#: whose hash range holds one of their keys: at most this many rows a key.
ROW_GROUP_ROWS = {"bands": 65_536, "contents": 4_096, "content_keys": 1_024, "raw_texts": 1_024}

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
    # the contents' row ids by content_id, partitioned by hash bucket (`keyed`)
    "content_keys": [("bits", IntegerType), ("bucket", IntegerType), ("content_id", B),
                     ("id", L)],
    # the row groups of the keyed tables' files, read from their footers (`directory`)
    "key_directory": [("keyed", S), ("file", S), ("row_groups", L), ("rows", B),
                      ("lowest", B), ("highest", B), ("filter_offsets", B),
                      ("filter_lengths", B)],
}
#: Bytes of the key of a keyed table (`keyed`).
KEY_BYTES = {"content_keys": 16, "raw_texts": 32}
#: The tables a commit publishes, at the snapshot ids its ``commits`` row records.
DATA_TABLES = tuple(COLUMNS)
#: Data tables that an index made by an earlier version lacks until its next writer adds
#: them (`add_missing_tables`); a reader takes a missing one as empty.
ADDED_TABLES = ("content_keys", "key_directory")
#: Data tables that describe how the other tables' data files lie, not what the index
#: holds: two indexes of the same batches hold the same rows in every other table.
LAYOUT_TABLES = ("key_directory",)
#: The commit table: one row per commit (a batch, a compaction), the newest row is the
#: published state.
COMMITS = "commits"
COMMIT_COLUMNS = [("n", L), ("op", S), ("at", S), ("tables", S)]
#: The column each table's rows are sorted by inside a data file.
SORTED_BY = {"batches": "seq", "packages": "id", "scopes": "id", "dictionaries": "id",
             "contents": "id", "sources": "id", "raw_texts": "text_sha256", "bands": "key",
             "content_keys": "content_id", "key_directory": "file"}


#: pyiceberg's row filters, built from (column, value): its expression classes are pydantic
#: models whose generated signatures the type checker cannot follow.
_EXPR: Any = expressions


def equal(column: str, value: int | str) -> BooleanExpression:
    return _EXPR.EqualTo(column, value)


def between(column: str, lo: int, hi: int) -> BooleanExpression:
    return _EXPR.And(_EXPR.GreaterThanOrEqual(column, lo), _EXPR.LessThanOrEqual(column, hi))


def schema_of(columns: list[tuple[str, Any]]) -> Schema:
    return Schema(*[NestedField(i, name, kind(), required=False)
                    for i, (name, kind) in enumerate(columns, start=1)])


def arrow_schema(table: str) -> pa.Schema:
    return schema_of(COMMIT_COLUMNS if table == COMMITS else COLUMNS[table]).as_arrow()


#: The schemes of an index location: a local (or shared-file-system) folder, and a warehouse
#: on S3 (or an S3-compatible server) whose catalog is a shared PostgreSQL database.
S3_SCHEME = "iceberg+s3://"
#: The one query parameter of a location: the shared catalog's database URL, to the end.
CATALOG_PARAM = "catalog="
#: The longest catalog name pyiceberg's SQL catalog stores (its ``catalog_name`` column).
MAX_CATALOG_NAME = 255
#: Seconds a catalog server gets to accept a connection (libpq's ``connect_timeout``).
CATALOG_CONNECT_TIMEOUT = 10
USAGE = ("give iceberg:///absolute/folder, iceberg:///absolute/folder?catalog=postgresql://"
         "user@host:port/db or iceberg+s3://bucket/prefix?catalog=postgresql://user@host:port/db")


@dataclass(frozen=True)
class Where:
    """Where an index lives, parsed once from its location (docs/iceberg.md, "Where"):

    - ``iceberg:///abs/folder``: catalog in ``folder/catalog.db`` (SQLite), warehouse in
      ``folder/warehouse``, writers and scans of one machine coordinated by ``flock``;
    - ``iceberg:///abs/folder?catalog=postgresql://…``: the same warehouse, the catalog in a
      shared PostgreSQL database (``folder`` on a file system every machine mounts);
    - ``iceberg+s3://bucket/prefix?catalog=postgresql://…``: the warehouse on S3.

    With a shared catalog the catalog's optimistic commit is the only coordination: no
    lock file, no readers' lock (expiry keeps a retention instead)."""

    location: str
    warehouse: str  # file:///abs/folder/warehouse or s3://bucket/prefix
    folder: Path | None  # the local folder of an iceberg:/// location
    catalog_url: str | None  # the shared catalog; None: catalog.db in the folder

    @property
    def shared(self) -> bool:
        """A shared catalog: writers and readers on several machines."""
        return self.catalog_url is not None

    @property
    def lock_folder(self) -> Path | None:
        """The folder of the ``flock`` locks: the local form only."""
        return None if self.shared else self.folder

    @property
    def on_s3(self) -> bool:
        return self.warehouse.startswith("s3://")

    @property
    def catalog_name(self) -> str:
        """The catalog's name in its database: one database can hold the indexes of several
        warehouses, each under its own warehouse URI."""
        return self.warehouse if self.shared else NAMESPACE


def _catalog_url(location: str, value: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not value.startswith(("postgresql://", "postgres://")):
        raise NearDedupError(f"index {location}: the catalog must be a PostgreSQL URL "
                             f"(catalog=postgresql://user@host:port/db)")
    try:
        url = make_url(value.replace("postgres://", "postgresql://", 1))
    except (ArgumentError, ValueError):
        raise NearDedupError(f"index {location}: the catalog URL cannot be read; "
                             f"{USAGE}") from None
    if url.password is not None:
        raise NearDedupError(f"index {location.split('?', 1)[0]}: the catalog URL holds a "
                             f"password; give it through PGPASSWORD or ~/.pgpass, never in "
                             f"the index location")
    if not url.host or not url.database:
        raise NearDedupError(f"index {location}: the catalog URL names no host or database; "
                             f"{USAGE}")
    return value


def where(location: str) -> Where:
    """The parsed location (`Where`); anything else is refused in one line."""
    rest, sep, param = location.partition("?")
    catalog_url = None
    if sep:
        if not param.startswith(CATALOG_PARAM):
            raise NearDedupError(f"index {location}: unknown parameter; {USAGE}")
        catalog_url = _catalog_url(location, param[len(CATALOG_PARAM):])
    if rest.startswith(SCHEME):
        path = rest[len(SCHEME):]
        if not path.startswith("/") or path.startswith("//") or "#" in path:
            raise NearDedupError(f"index {location}: give an absolute local folder as "
                                 f"iceberg:///absolute/folder")
        folder = Path(path)
        out = Where(location, (folder / WAREHOUSE).as_uri(), folder, catalog_url)
    elif rest.startswith(S3_SCHEME):
        bucket_prefix = rest[len(S3_SCHEME):].strip("/")
        if not bucket_prefix or "#" in bucket_prefix or "//" in bucket_prefix:
            raise NearDedupError(f"index {location}: name a bucket (and a prefix); {USAGE}")
        if catalog_url is None:
            raise NearDedupError(f"index {location}: a warehouse on S3 needs a shared "
                                 f"catalog: add ?catalog=postgresql://user@host:port/db")
        out = Where(location, f"s3://{bucket_prefix}", None, catalog_url)
    else:
        raise NearDedupError(f"index {location}: {USAGE}")
    if len(out.catalog_name) > MAX_CATALOG_NAME:
        raise NearDedupError(f"index {location}: the warehouse URI is longer than "
                             f"{MAX_CATALOG_NAME} characters")
    return out


def folder_of(location: str) -> Path:
    """The folder of ``iceberg:///absolute/folder``; anything else is refused."""
    found = where(location)
    if found.folder is None or found.shared:
        raise NearDedupError(f"index {location}: give an absolute local folder as "
                             f"iceberg:///absolute/folder")
    return found.folder


#: Threads of a per-bucket join on S3, where the tasks mostly wait on requests.
S3_IO_THREADS = 8


def io_threads(location: str, local: int) -> int:
    """Threads for reads of many data files: ``local`` for a local warehouse, more on S3."""
    return S3_IO_THREADS if where(location).on_s3 else local


# --------------------------------------------------------------------------- catalog


def sqlalchemy_url(catalog_url: str) -> str:
    """The catalog URL for SQLAlchemy: psycopg 3, a bounded connect, our application name."""
    from sqlalchemy.engine import make_url

    url = make_url(catalog_url.replace("postgres://", "postgresql://", 1))
    query = {"connect_timeout": str(CATALOG_CONNECT_TIMEOUT),
             "application_name": "near-dedup", **dict(url.query)}
    return url.set(drivername="postgresql+psycopg", query=query).render_as_string(
        hide_password=False)


def catalog_label(catalog_url: str) -> str:
    """``postgresql://user@host:port/db`` (no query) for messages."""
    return catalog_url.split("?", 1)[0]


def catalog(place: Path | Where, *, create: bool = False) -> SqlCatalog:
    """pyiceberg's SQL catalog of an index: a SQLite file in the folder, or the shared
    PostgreSQL database (a server that cannot be reached is one line naming it). A reader
    never creates the catalog's tables."""
    if isinstance(place, Path):
        place = Where(f"{SCHEME}{place}", (place / WAREHOUSE).as_uri(), place, None)
    properties = {"warehouse": place.warehouse,
                  "init_catalog_tables": "true" if create else "false"}
    if place.on_s3:
        properties["py-io-impl"] = FILE_IO
    if place.catalog_url is None:
        assert place.folder is not None
        return SqlCatalog(NAMESPACE, uri=f"sqlite:///{place.folder / CATALOG_FILE}",
                          **properties)
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return SqlCatalog(place.catalog_name, uri=sqlalchemy_url(place.catalog_url),
                          **properties)
    except SQLAlchemyError as exc:
        raise catalog_error(place, exc) from None


#: The tables of pyiceberg's SQL catalog: a ``catalog.db`` holding any other, or not these,
#: is another program's file.
CATALOG_TABLES = frozenset({"iceberg_tables", "iceberg_namespace_properties"})


def refuse_foreign_catalog(place: Where) -> None:
    """A ``catalog.db`` that is not pyiceberg's SQL catalog (an empty file, another program's
    SQLite database) is one line, read without writing anything (`connect_reader`)."""
    import sqlite3

    from near_dedup_core.index_store.sqlite.snapshot import connect_reader, is_sqlite_file

    if place.folder is None or place.shared:
        return
    path = place.folder / CATALOG_FILE
    if not path.is_file():
        return
    refuse = (f"index {place.location}: {path} is not an Iceberg catalog ({{}}); not a "
              f"near-dedup index; use a new or empty folder")
    if not is_sqlite_file(path):
        raise NearDedupError(refuse.format("empty" if not path.stat().st_size else "not SQLite"))
    try:
        con = connect_reader(path)
        try:
            names = {n for (n,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise NearDedupError(refuse.format(" ".join(str(exc).split()))) from None
    if not names or names - CATALOG_TABLES or "iceberg_tables" not in names:
        other = sorted(names - CATALOG_TABLES)
        raise NearDedupError(refuse.format(
            f"it holds the tables {', '.join(other[:3])}{', …' if len(other) > 3 else ''}"
            if other else "it holds no catalog tables"))


def open_catalog(place: Where) -> SqlCatalog:
    """A reader's catalog: a local index without ``catalog.db`` is not found, or not an index
    when its folder holds anything else."""
    if not place.shared:
        assert place.folder is not None
        folder = place.folder
        if not (folder / CATALOG_FILE).is_file():
            if folder.exists() and (not folder.is_dir() or any(
                    p.name not in {WRITER_LOCK, READERS_LOCK, WAREHOUSE}
                    for p in folder.iterdir())):
                raise NearDedupError(f"index {place.location}: exists and is not a near-dedup "
                                     f"index (no {CATALOG_FILE})")
            raise NearDedupError(f"index {place.location}: not found; index the inputs first")
        refuse_foreign_catalog(place)
    return catalog(place)


def catalog_error(place: Where, exc: BaseException) -> NearDedupError:
    """One line for a catalog server that cannot be reached or refuses us."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    what = "cannot reach" if isinstance(exc, (OperationalError, InterfaceError)) \
        else "cannot use"
    return NearDedupError(f"index {place.location}: {what} the catalog "
                          f"{catalog_label(place.catalog_url or '')}: "
                          f"{detail[0] if detail else type(exc).__name__}")


def catalog_tables_exist(cat: SqlCatalog) -> bool:
    """Whether the catalog's database holds pyiceberg's catalog tables."""
    from sqlalchemy import inspect

    return bool(inspect(cat.engine).has_table("iceberg_tables"))


def foreign_tables(cat: SqlCatalog) -> list[str]:
    """Tables of the catalog's database that are not pyiceberg's catalog tables."""
    from sqlalchemy import inspect

    names = inspect(cat.engine).get_table_names()
    return sorted(set(names) - {"iceberg_tables", "iceberg_namespace_properties"})


def warehouse_holds_files(place: Where) -> bool:
    """Whether anything is stored under an S3 warehouse (a missing bucket, refused
    credentials or denied access are one line naming the warehouse)."""
    found = s3_location(place.warehouse)
    prefix = place.warehouse[len("s3://"):].split("/", 1)
    location = found.child(prefix[1]) if len(prefix) > 1 and prefix[1] else found
    try:
        return bool(location.exists())
    except NearDedupError as exc:
        raise NearDedupError(f"index {place.location}: {exc}") from None


def remove_warehouse(place: Where) -> None:
    """Remove every object under an S3 warehouse (a first batch that failed on an empty
    prefix)."""
    fs = s3fs_of(place.warehouse)
    root = place.warehouse[len("s3://"):]
    if "/" in root:
        for name in fs.find(root):
            fs.rm_file(name)


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
    return {name: create_table(cat, name) for name in (*DATA_TABLES, COMMITS)}


def create_table(cat: Catalog, name: str) -> Table:
    """One table of the index, with its partitioning and sort order."""
    columns = COMMIT_COLUMNS if name == COMMITS else COLUMNS[name]
    schema = schema_of(columns)
    spec = PartitionSpec()
    order = SortOrder()
    if name == "bands":
        spec = PartitionSpec(PartitionField(source_id=1, field_id=1000,
                                            transform=IdentityTransform(), name="bucket"))
    if name == "content_keys":
        spec = PartitionSpec(
            PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(),
                           name="bits"),
            PartitionField(source_id=2, field_id=1001, transform=IdentityTransform(),
                           name="bucket"))
    if name in SORTED_BY:
        source = [c for c, _ in columns].index(SORTED_BY[name]) + 1
        order = SortOrder(SortField(source_id=source, transform=IdentityTransform()))
    return cat.create_table(f"{NAMESPACE}.{name}", schema=schema, partition_spec=spec,
                            sort_order=order, properties=_properties(name))


def add_missing_tables(cat: Catalog, tables: dict[str, Table]) -> bool:
    """Create the `ADDED_TABLES` an index of an earlier version lacks (a writer, under its
    lock); whether any was."""
    missing = [name for name in ADDED_TABLES if name not in tables]
    for name in missing:
        tables[name] = create_table(cat, name)
    return bool(missing)


def drop_tables(cat: Catalog) -> None:
    """Drop every table (their files stay, as orphans): a first batch killed before its
    commit left tables that no commit published."""
    for name in (*DATA_TABLES, COMMITS):
        try:
            cat.drop_table(f"{NAMESPACE}.{name}")
        except NoSuchTableError:
            pass


def has_tables(cat: SqlCatalog) -> bool:
    """Whether the catalog lists any table of the index (no table metadata is read)."""
    if not catalog_tables_exist(cat):
        return False
    try:
        return bool(cat.list_tables(NAMESPACE))
    except NoSuchNamespaceError:
        return False


def load_tables(cat: SqlCatalog) -> dict[str, Table] | None:
    """Every table of the index, or None when the catalog holds none of them."""
    if not catalog_tables_exist(cat):
        return None
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
    """Rows of ``table`` at ``snapshot`` (an empty table of those columns when None): the
    data files that pyiceberg plans for ``row_filter``, each read by pyarrow with its pages
    checked against their CRC32 (`parquet_file`), in the planned order."""
    schema = table.schema().as_arrow()
    schema = pa.schema([pa.field(c, schema.field(c).type) for c in
                        (schema.names if columns == ("*",) else columns)])
    if snapshot is None:
        return schema.empty_table()
    import pyarrow.parquet as pq
    from pyiceberg.expressions.visitors import bind
    from pyiceberg.io.pyarrow import expression_to_pyarrow

    scan = table.scan(row_filter=row_filter if row_filter is not None else AlwaysTrue(),
                      selected_fields=columns, snapshot_id=snapshot)
    where = None if row_filter is None else expression_to_pyarrow(
        bind(table.schema(), row_filter, case_sensitive=True))
    parts = []
    for task in scan.plan_files():
        source, fs = read_source(task.file.file_path, task.file.file_size_in_bytes)
        part = pq.read_table(source, filesystem=fs, columns=schema.names, filters=where,
                             partitioning=None, page_checksum_verification=True)
        parts.append(part.cast(schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def refuse_foreign(place: Where) -> None:
    """A file, or a folder holding anything but an index, is not an index to append to."""
    folder, location = place.folder, place.location
    if folder is None:
        return
    if folder.exists() and not folder.is_dir():
        raise NearDedupError(f"index {location}: exists and is not a folder")
    if place.shared:
        if folder.is_dir() and any(folder.iterdir()):
            raise NearDedupError(f"index {location}: the folder holds files and the catalog "
                                 f"no index of it; use a new or empty folder")
        return
    if folder.is_dir() and not (folder / CATALOG_FILE).is_file() \
            and {p.name for p in folder.iterdir()} - {WRITER_LOCK}:
        raise NearDedupError(f"index {location}: the folder exists and is not a near-dedup "
                             f"index (no {CATALOG_FILE}); use a new or empty folder")
    refuse_foreign_catalog(place)


@contextmanager
def writer(place: Where) -> Iterator[SqlCatalog]:
    """A writer's catalog (a batch): the local form under the writer's lock, its folder
    removed when a new index fails; with a shared catalog, the server reached, a database
    holding other tables refused, the warehouse checked (a missing bucket, refused
    credentials: one line before anything is written), and what a failed first batch made
    (the tables, the catalog's own tables, the objects under an empty prefix) removed."""
    if not place.shared:
        assert place.folder is not None
        refuse_foreign(place)
        created = not place.folder.exists()
        place.folder.mkdir(parents=True, exist_ok=True)
        try:
            with writer_lock(place.folder, place.location):
                yield catalog(place, create=True)
        except BaseException:
            if created:  # a new index that no batch published: nothing is left behind
                shutil.rmtree(place.folder, ignore_errors=True)
            raise
        return
    cat = catalog(place)
    from sqlalchemy.exc import SQLAlchemyError

    try:
        had_catalog = catalog_tables_exist(cat)
        if not had_catalog and (foreign := foreign_tables(cat)):
            raise NearDedupError(
                f"index {place.location}: the catalog database holds other tables "
                f"({', '.join(foreign[:3])}{', …' if len(foreign) > 3 else ''}) and no "
                f"Iceberg catalog: not a near-dedup index; use a new or empty database")
        had_index = had_catalog and has_tables(cat)
    except SQLAlchemyError as exc:
        raise catalog_error(place, exc) from None
    created = False
    empty_prefix = False
    if not had_index:
        if place.on_s3:
            empty_prefix = not warehouse_holds_files(place)
            if not empty_prefix:
                raise NearDedupError(f"index {place.location}: the warehouse {place.warehouse} "
                                     f"holds files and the catalog no index of it; use a new "
                                     f"or empty prefix")
        else:
            refuse_foreign(place)
            assert place.folder is not None
            created = not place.folder.exists()
    elif place.on_s3:
        warehouse_holds_files(place)  # the bucket is there and the credentials are taken
    try:
        if not had_catalog:
            cat.create_tables()
        yield cat
    except BaseException:
        if not had_index:  # a new index that no batch published: nothing is left behind
            with contextlib.suppress(Exception):
                drop_tables(cat)
                cat.drop_namespace(NAMESPACE)
                if not had_catalog:
                    cat.destroy_tables()
            with contextlib.suppress(Exception):
                if empty_prefix:
                    remove_warehouse(place)
                elif created and place.folder is not None:
                    shutil.rmtree(place.folder, ignore_errors=True)
        raise


def busy_timeout() -> float:
    return float(os.environ.get("NEAR_DEDUP_BUSY_TIMEOUT", 30.0))


@contextmanager
def writer_lock(folder: Path | None, label: str, timeout: float | None = None
                ) -> Iterator[None]:
    """The writer's lock (``folder/writer.lock``, ``flock``): one batch, compaction or expiry
    at a time on this machine; released by the kernel when the process ends, also by a kill.
    None (a shared catalog): no lock, the catalog's optimistic commit decides."""
    if folder is None:
        yield
        return
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
def readers_lock(folder: Path | None, exclusive: bool, label: str) -> Iterator[None]:
    """A scan holds ``folder/readers.lock`` shared for its life; expiry takes it exclusive
    and refuses to run while any scan holds it (the snapshots a scan pinned stay). None (a
    shared catalog): no lock, expiry keeps a retention instead."""
    if folder is None:
        yield
        return
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
