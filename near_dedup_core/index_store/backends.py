"""The index a command names with ``--index``, parsed once (`open_index`) into the backend that
holds it: a SQLite file (`SqliteIndex`), a PostgreSQL database (`PostgresIndex`) or Iceberg
tables in a folder (`IcebergIndex`). Callers
ask the backend for what they need — its `label` for messages, a scan's `snapshot`, a
`batch` to append in, the readers a worker opens (`texts`, `known_texts`, from the
picklable `location`), `check` — and never which backend it is.

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
from near_dedup_core.index_store import snapshot as sq
from near_dedup_core.index_store.snapshot import IndexSnapshot
from near_dedup_core.index_store.texts import IndexTexts, KnownTexts, connect_read_only, is_url

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig
    from near_dedup_core.index_store.batch import BatchTransaction
    from near_dedup_core.index_store.check import IndexCheck


def label(url: str) -> str:
    """``postgresql://user@host:port/db`` without the password, for messages."""
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0] + "@" if at else ""
    return f"{scheme}://{user}{host}{slash}{path.split('?', 1)[0]}"


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
        sq.check_index_path(self.path, inputs)

    def errors(self) -> AbstractContextManager[None]:
        """SQLite's errors inside the block as one line naming the index."""
        return sq.sqlite_errors(self.path)

    def snapshot(self, config: NearDedupConfig | None = None) -> IndexSnapshot:
        """A scan's one snapshot of the index (checked to be bound to ``config`` if given)."""
        return IndexSnapshot.open(self.path, config)

    def batch(self, config: NearDedupConfig, created_at: str
              ) -> AbstractContextManager[BatchTransaction]:
        """The open transaction of one appended batch (`sqlite_write.sqlite_batch`: writer's
        lock, staged first batch, published on success, nothing changed on failure)."""
        from near_dedup_core.index_store.sqlite_write import sqlite_batch

        return sqlite_batch(self.path, config, created_at)

    def texts(self) -> IndexTexts:
        return IndexTexts.open(self.path)

    def known_texts(self, cached: bool = False) -> KnownTexts:
        """Raw-text lookups on a read-only connection; ``cached``: one kept for many lookups,
        with the writer's page cache size."""
        return KnownTexts(connect_read_only(self.path, cached))

    def check(self) -> IndexCheck:
        from near_dedup_core.index_store.check import check_sqlite

        return check_sqlite(self.path)

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

    def snapshot(self, config: NearDedupConfig | None = None) -> IndexSnapshot:
        from near_dedup_core.index_store.postgres import PostgresSnapshot

        return PostgresSnapshot.open_url(self.url, config)

    def batch(self, config: NearDedupConfig, created_at: str
              ) -> AbstractContextManager[BatchTransaction]:
        from near_dedup_core.index_store.postgres import postgres_batch

        return postgres_batch(self.url, config, created_at)

    def texts(self) -> IndexTexts:
        from near_dedup_core.index_store import postgres as pg

        return IndexTexts(self.label, pg.QmarkConnection(  # type: ignore[arg-type]
            pg.connect(self.url, snapshot=False)))

    def known_texts(self, cached: bool = False) -> KnownTexts:
        from near_dedup_core.index_store import postgres as pg

        return KnownTexts(pg.QmarkConnection(pg.connect(self.url, snapshot=False)))

    def check(self) -> IndexCheck:
        from near_dedup_core.index_store.postgres import check_postgres

        return check_postgres(self.url)

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
            sq.check_index_path(self.folder / "catalog.db", inputs)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """pyiceberg's and the file system's errors inside the block as one line."""
        _iceberg()
        from near_dedup_core.index_store.iceberg import errors

        with errors(self.url):
            yield

    def snapshot(self, config: NearDedupConfig | None = None) -> IndexSnapshot:
        _iceberg()
        from near_dedup_core.index_store.iceberg.snapshot import IcebergSnapshot

        return IcebergSnapshot.open_location(self.url, config)

    def batch(self, config: NearDedupConfig, created_at: str
              ) -> AbstractContextManager[BatchTransaction]:
        _iceberg()
        from near_dedup_core.index_store.iceberg.batch import iceberg_batch

        return iceberg_batch(self.url, config, created_at)

    def texts(self) -> IndexTexts:
        _iceberg()
        from near_dedup_core.index_store.iceberg.snapshot import IcebergTexts

        return IcebergTexts.open(self.url)  # type: ignore[return-value]

    def known_texts(self, cached: bool = False) -> KnownTexts:
        _iceberg()
        from near_dedup_core.index_store.iceberg.snapshot import IcebergKnownTexts

        return IcebergKnownTexts(self.url)  # type: ignore[return-value]

    def check(self) -> IndexCheck:
        _iceberg()
        from near_dedup_core.index_store.iceberg.maintain import check_iceberg

        return check_iceberg(self.url)

    def read_ahead(self) -> bool:
        return False

    def raise_if_damaged(self, exc: BaseException) -> None:
        """`index check` verifies the data files."""


#: The index behind ``--index``: one of the three backends.
Index = SqliteIndex | PostgresIndex | IcebergIndex


def open_index(location: str | Path | Index) -> Index:
    """The backend of ``location``: a ``postgresql://`` (or ``postgres://``) URL, or a SQLite
    file path; any other URL scheme is refused. Opens nothing yet."""
    if isinstance(location, (SqliteIndex, PostgresIndex, IcebergIndex)):
        return location
    value = str(location)
    if is_url(value):
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
                  config: NearDedupConfig | None = None) -> IndexSnapshot:
    """The scan's one snapshot of the index at ``location`` (`open_index`)."""
    return open_index(location).snapshot(config)


def database_errors(location: str | Path | Index) -> AbstractContextManager[None]:
    """The index's database errors inside the block as one line naming it."""
    return open_index(location).errors()


def open_texts(location: str | Index) -> IndexTexts:
    """A worker's own reader of content texts (see `IndexTexts`), from a backend's
    `location`."""
    return open_index(location).texts()


def open_known_texts(location: str | Index, cached: bool = False) -> KnownTexts:
    """A worker's own raw-text lookups (see `KnownTexts`), from a backend's `location`."""
    return open_index(location).known_texts(cached)
