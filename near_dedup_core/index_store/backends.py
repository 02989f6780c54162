"""The index a command names with ``--index``, parsed once (`open_index`) into the backend that
holds it: a SQLite file (`SqliteIndex`), a PostgreSQL database (`PostgresIndex`) or Iceberg
tables in a folder (`IcebergIndex`), each a `protocols.IndexBackend` (mypy checks that at the
end of this module). Callers ask the backend for what they need — its `label` for messages,
a scan's `snapshot`, a `batch` to append in, the readers a worker opens (`texts`,
`known_texts`, from the picklable `location`) and the modules its workers preload
(`worker_modules`), `check`, `maintain` — and never which backend it is.

This module imports neither SQLAlchemy nor the config's pydantic models: a worker process
(and a scan of a SQLite index) never loads them. Each method imports the modules its backend
needs when it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.common import check_index_path
from near_dedup_core.index_store.postgres_url import is_postgres_url, label
from near_dedup_core.index_store.protocols import (
    Batch,
    IndexBackend,
    RawTextLookup,
    Snapshot,
    TextReader,
)
from near_dedup_core.index_store.records import IndexCheck
from near_dedup_core.index_store.sqlite import snapshot as sq
from near_dedup_core.index_store.texts import IndexTexts, KnownTexts, connect_read_only

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig


def _iceberg_only(index: IndexBackend, action: str) -> NearDedupError:
    """The refusal of `index compact` or `index expire` on a backend that needs neither."""
    return NearDedupError(f"index {index.label}: index {action} is for an index kept as "
                          f"Iceberg tables (iceberg:///folder)")


@dataclass(frozen=True)
class SqliteIndex:
    """An index in one dedicated SQLite file (WAL mode); ``path`` as the user gave it."""

    path: Path

    #: The backend's name, as the release's UI badges it.
    kind: ClassVar[str] = "sqlite"
    #: A reader in the writer's own process closes after each use: SQLite removes the
    #: index's -wal and -shm files when the last connection closes, which must be the
    #: writer's.
    inline_readers_close = True
    #: A worker reads the file with ``sqlite3``, which the workers' modules import anyway.
    worker_modules: ClassVar[tuple[str, ...]] = ()

    @property
    def label(self) -> str:
        """The index in messages: the path as given."""
        return str(self.path)

    @property
    def file(self) -> Path | None:
        """The file that holds the index."""
        return self.path

    @property
    def location(self) -> str:
        """What a worker process opens its own readers on (`open_texts`): the absolute path."""
        return str(self.path.resolve())

    def check_target(self, inputs: list[Path]) -> None:
        """Refuse a path that cannot be a dedicated index file (`snapshot.check_index_path`)."""
        check_index_path(self.path, inputs)

    def errors(self) -> AbstractContextManager[None]:
        """SQLite's errors inside the block as one line naming the index."""
        return sq.sqlite_errors(self.path)

    def snapshot(self, config: NearDedupConfig | None = None) -> Snapshot:
        """A scan's one snapshot of the index (checked to be bound to ``config`` if given)."""
        return sq.IndexSnapshot.open(self.path, config)

    def batch(self, config: NearDedupConfig, created_at: str
              ) -> AbstractContextManager[Batch]:
        """The open transaction of one appended batch (`sqlite.write.sqlite_batch`: writer's
        lock, staged first batch, published on success, nothing changed on failure)."""
        from near_dedup_core.index_store.sqlite.write import sqlite_batch

        return sqlite_batch(self.path, config, created_at)

    def texts(self) -> TextReader:
        return IndexTexts.open(self.path)

    def known_texts(self, cached: bool = False) -> RawTextLookup:
        """Raw-text lookups on a read-only connection; ``cached``: one kept for many lookups,
        with the writer's page cache size."""
        return KnownTexts(connect_read_only(self.path, cached))

    def check(self) -> IndexCheck:
        from near_dedup_core.index_store.check import check_sqlite

        return check_sqlite(self.path)

    def maintain(self, action: str, older_than: float | None = None, *,
                 full: bool = False, progress: bool = False) -> str:
        """SQLite keeps no snapshots or data files to compact or expire."""
        raise _iceberg_only(self, action)

    def read_ahead(self) -> bool:
        """Ask the kernel to read the file into its page cache (`snapshot.read_ahead`)."""
        return sq.read_ahead(self.path)

    def raise_if_damaged(self, exc: BaseException) -> None:
        """After an unexpected value read from the index: the damage line if SQLite's
        ``quick_check`` finds the file damaged (`snapshot.raise_if_damaged`)."""
        if self.path.is_file():
            sq.raise_if_damaged(self.path, exc)


@dataclass(frozen=True)
class PostgresIndex:
    """An index in one PostgreSQL database (`postgres`); ``url`` with its credentials."""

    url: str

    #: The backend's name, as the release's UI badges it.
    kind: ClassVar[str] = "postgres"
    #: A reader's server connection is kept for the process's life.
    inline_readers_close = False
    #: A worker opens its own server connections (psycopg, through this module).
    worker_modules: ClassVar[tuple[str, ...]] = ("near_dedup_core.index_store.postgres",)

    @property
    def label(self) -> str:
        """The index in messages: the URL without its password."""
        return label(self.url)

    @property
    def file(self) -> Path | None:
        """None: a server holds the index."""
        return None

    @property
    def location(self) -> str:
        return self.url

    def check_target(self, inputs: list[Path]) -> None:
        """A database is never inside a package."""

    @contextmanager
    def errors(self) -> Iterator[None]:
        """The server's and the driver's errors inside the block as one line."""
        from near_dedup_core.index_store import postgres as pg

        try:
            yield
        except pg.driver_errors() as exc:
            raise pg.connect_error(self.url, exc) from None

    def snapshot(self, config: NearDedupConfig | None = None) -> Snapshot:
        from near_dedup_core.index_store.postgres import PostgresSnapshot

        return PostgresSnapshot.open_url(self.url, config)

    def batch(self, config: NearDedupConfig, created_at: str
              ) -> AbstractContextManager[Batch]:
        from near_dedup_core.index_store.postgres import postgres_batch

        return postgres_batch(self.url, config, created_at)

    def texts(self) -> TextReader:
        from near_dedup_core.index_store import postgres as pg

        return IndexTexts(self.label, pg.QmarkConnection(pg.connect(self.url, snapshot=False)))

    def known_texts(self, cached: bool = False) -> RawTextLookup:
        from near_dedup_core.index_store import postgres as pg

        return KnownTexts(pg.QmarkConnection(pg.connect(self.url, snapshot=False)))

    def check(self) -> IndexCheck:
        from near_dedup_core.index_store.postgres import check_postgres

        return check_postgres(self.url)

    def maintain(self, action: str, older_than: float | None = None, *,
                 full: bool = False, progress: bool = False) -> str:
        """PostgreSQL vacuums its own tables."""
        raise _iceberg_only(self, action)

    def read_ahead(self) -> bool:
        """The server's pages are its own to cache."""
        return False

    def raise_if_damaged(self, exc: BaseException) -> None:
        """The server reports its damaged pages itself (`postgres.damage_detail`)."""


ICEBERG_SCHEME = "iceberg://"
ICEBERG_SCHEMES = (ICEBERG_SCHEME, "iceberg+s3://")
ICEBERG_HINT = "install it with: pip install 'near-dedup[iceberg]'"


def _iceberg() -> None:
    """Refuse an Iceberg index in one line when pyiceberg (the ``[iceberg]`` extra) is
    missing."""
    try:
        import pyarrow  # noqa: F401
        import pyiceberg  # noqa: F401
    except ImportError:
        raise NearDedupError(f"index {ICEBERG_SCHEME}…: pyiceberg is not installed; "
                             f"{ICEBERG_HINT}") from None


@dataclass(frozen=True)
class IcebergIndex:
    """An index kept as Apache Iceberg tables (`index_store.iceberg`):
    ``iceberg:///absolute/folder`` (pyiceberg's SQL catalog in a SQLite file inside it),
    ``iceberg:///absolute/folder?catalog=postgresql://…`` (a shared PostgreSQL catalog) or
    ``iceberg+s3://bucket/prefix?catalog=postgresql://…`` (the warehouse on S3). The
    location holds no password (the catalog's comes from PGPASSWORD or ~/.pgpass)."""

    url: str

    #: The backend's name, as the release's UI badges it.
    kind: ClassVar[str] = "iceberg"
    #: A reader opens nothing that stays open.
    inline_readers_close = False
    #: A worker reads the tables with pyiceberg and pyarrow, which it imports when it first
    #: reads (an `index` worker's raw-text lookups, a scan's per-bucket join).
    worker_modules: ClassVar[tuple[str, ...]] = ()

    @property
    def label(self) -> str:
        return self.url

    @property
    def file(self) -> Path | None:
        """None: a folder of tables holds the index."""
        return None

    @property
    def location(self) -> str:
        return self.url

    @property
    def folder(self) -> Path | None:
        """The local folder of an ``iceberg:///`` index (None: a warehouse on S3)."""
        from near_dedup_core.index_store.iceberg.tables import where

        return where(self.url).folder

    def check_target(self, inputs: list[Path]) -> None:
        """A local folder must not be inside an input package, a report or a mixture."""
        _iceberg()
        if self.folder is not None:
            check_index_path(self.folder / "catalog.db", inputs)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """pyiceberg's and the file system's errors inside the block as one line."""
        _iceberg()
        from near_dedup_core.index_store.iceberg import errors

        with errors(self.url):
            yield

    def snapshot(self, config: NearDedupConfig | None = None) -> Snapshot:
        _iceberg()
        from near_dedup_core.index_store.iceberg.snapshot import IcebergSnapshot

        return IcebergSnapshot.open_location(self.url, config)

    def batch(self, config: NearDedupConfig, created_at: str
              ) -> AbstractContextManager[Batch]:
        _iceberg()
        from near_dedup_core.index_store.iceberg.batch import iceberg_batch

        return iceberg_batch(self.url, config, created_at)

    def texts(self) -> TextReader:
        _iceberg()
        from near_dedup_core.index_store.iceberg.snapshot import IcebergTexts

        return IcebergTexts.open(self.url)

    def known_texts(self, cached: bool = False) -> RawTextLookup:
        _iceberg()
        from near_dedup_core.index_store.iceberg.snapshot import IcebergKnownTexts

        return IcebergKnownTexts(self.url)

    def check(self) -> IndexCheck:
        _iceberg()
        from near_dedup_core.index_store.iceberg.maintain import check_iceberg

        return check_iceberg(self.url)

    def maintain(self, action: str, older_than: float | None = None, *,
                 full: bool = False, progress: bool = False) -> str:
        """`index compact` (`iceberg.compact.compact`; ``full``: every bucket into one file)
        or `index expire` (`iceberg.maintain.expire`, snapshots older than ``older_than``
        seconds)."""
        if action not in ("compact", "expire"):
            raise ValueError(f"not a maintenance action: {action}")
        with self.errors():
            from near_dedup_core.index_store.iceberg import compact, maintain

            if action == "compact":
                return compact.compact(self.url, progress=progress, full=full)
            return maintain.expire(self.url, older_than)

    def read_ahead(self) -> bool:
        return False

    def raise_if_damaged(self, exc: BaseException) -> None:
        """`index check` verifies the data files."""


#: The index behind ``--index``, as callers know it: the contract, not which backend.
Index = IndexBackend


def open_index(location: str | Path | Index) -> Index:
    """The backend of ``location``: a ``postgresql://`` (or ``postgres://``) URL, an
    ``iceberg://`` or ``iceberg+s3://`` location, or a SQLite file path; any other URL scheme
    is refused. A backend given is returned as it is. Opens nothing yet."""
    if not isinstance(location, (str, Path)):
        return location
    value = str(location)
    if is_postgres_url(value):
        return PostgresIndex(value)
    if value.startswith(ICEBERG_SCHEMES):
        return IcebergIndex(value)
    scheme, sep, _rest = value.partition("://")
    if sep and scheme.replace("+", "").isalnum():
        raise NearDedupError(f"index {label(value)}: the scheme {scheme}:// is not supported; "
                             f"an index is a SQLite file path, postgresql://user@host:port/"
                             f"dbname, iceberg:///absolute/folder or "
                             f"iceberg+s3://bucket/prefix?catalog=postgresql://…")
    return SqliteIndex(Path(location))


def open_snapshot(location: str | Path | Index,
                  config: NearDedupConfig | None = None) -> Snapshot:
    """The scan's one snapshot of the index at ``location`` (`open_index`)."""
    return open_index(location).snapshot(config)


def database_errors(location: str | Path | Index) -> AbstractContextManager[None]:
    """The index's database errors inside the block as one line naming it."""
    return open_index(location).errors()


def open_texts(location: str | Index) -> TextReader:
    """A worker's own reader of content texts (see `IndexTexts`), from a backend's
    `location`."""
    return open_index(location).texts()


def open_known_texts(location: str | Index, cached: bool = False) -> RawTextLookup:
    """A worker's own raw-text lookups (see `KnownTexts`), from a backend's `location`."""
    return open_index(location).known_texts(cached)


# mypy checks here that each backend implements the contract (`protocols`)
_SQLITE: type[IndexBackend] = SqliteIndex
_POSTGRES: type[IndexBackend] = PostgresIndex
_ICEBERG: type[IndexBackend] = IcebergIndex
