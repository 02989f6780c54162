"""The PostgreSQL backend of the index: one database is one index, shared by every machine
that reaches the server.

The tables are the SQLite index's (``index_store.metadata``, 64-bit ids and band keys); what
differs per backend lives here:

- **Location**: ``postgresql://[user[:password]@]host[:port]/dbname`` (psycopg 3, the
  ``near-dedup[postgres]`` extra). Messages name the server and database, never the password.
- **Initialisation**: ``index`` on an empty database creates the tables and the binding rows in
  the same transaction as the first batch (PostgreSQL's DDL is transactional), so a failed or
  killed first batch leaves the database empty. A database holding any other table is refused:
  it is not a near-dedup index.
- **One writer at a time**: a transaction-level advisory lock, taken with
  ``pg_try_advisory_xact_lock`` until the busy timeout (``NEAR_DEDUP_BUSY_TIMEOUT``, as for
  SQLite's lock file) and released by the server when the transaction ends — also when the
  client is killed.
- **Bulk rows**: ``sources``, ``contents`` and ``bands`` go in with ``COPY … FROM STDIN``
  (binary), known contents are looked up with ``= ANY(array)``.
- **Scans** read in one ``REPEATABLE READ`` transaction: one snapshot from the first
  statement to the last, whatever another machine appends meanwhile. (Not ``READ ONLY``: the
  history lookup joins against temporary tables of probe keys, filled by ``COPY``; the scan
  writes nothing else.) A large history lookup is split over a second connection that
  imports the scan's snapshot (``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``), so
  both read the same state. Verify workers read texts on their own connections: content
  rows are insert-only, so any later state holds the same text for every id the scan knows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from sqlalchemy import Connection, Engine, create_engine, insert, text
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError

INSTALL_HINT = "install it with: pip install 'near-dedup[postgres]'"
#: Advisory lock key of the index writer: the first 8 bytes of sha256("near-dedup-index").
WRITER_LOCK_KEY = 0x5F1C0B3E2D4A6978


def label(url: str) -> str:
    """``postgresql://user@host:port/db`` without the password, for messages."""
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0] + "@" if at else ""
    return f"{scheme}://{user}{host}{slash}{path.split('?', 1)[0]}"


def engine(url: str) -> Engine:
    """An engine on the database of ``url``; refuses a URL without a database name."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise NearDedupError(f"index {label(url)}: the PostgreSQL driver psycopg is not "
                             f"installed; {INSTALL_HINT}") from None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise NearDedupError(f"index {label(url)}: not a valid URL ({exc})") from None
    if not parts.path.strip("/"):
        raise NearDedupError(f"index {label(url)}: the URL names no database "
                             f"(postgresql://user@host:port/dbname)")
    driver_url = "postgresql+psycopg://" + url.split("://", 1)[1]
    try:
        return create_engine(driver_url, poolclass=NullPool, connect_args={
            "application_name": "near-dedup", "connect_timeout": 10})
    except ArgumentError as exc:
        raise NearDedupError(f"index {label(url)}: not a valid URL ({exc})") from None


def driver_errors() -> tuple[type[BaseException], ...]:
    """Errors of the server or the driver, also those raised outside SQLAlchemy (COPY)."""
    try:
        import psycopg
    except ImportError:
        return (DBAPIError,)
    return (DBAPIError, psycopg.Error)


def connect_error(url: str, exc: BaseException) -> NearDedupError:
    """One line for a server that cannot be reached, refuses us or fails a statement."""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return NearDedupError(f"index {label(url)}: cannot use the database: "
                          f"{detail[0] if detail else type(exc).__name__}")


def lock_writer(conn: Connection, url: str, timeout: float | None = None) -> None:
    """Take the writer's advisory lock for this transaction, waiting at most ``timeout``."""
    if timeout is None:
        timeout = float(os.environ.get("NEAR_DEDUP_BUSY_TIMEOUT", 30.0))
    deadline = time.monotonic() + timeout
    while not conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"),
                           {"k": WRITER_LOCK_KEY}).scalar():
        if time.monotonic() >= deadline:
            raise NearDedupError(f"index {label(url)}: busy, another near-dedup index run "
                                 f"holds it (waited {timeout:g}s); try again when it has finished")
        time.sleep(0.1)


_TABLES_SQL = ("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
               "ORDER BY tablename")


def read_meta_or_none(conn: Connection, url: str) -> dict[str, str] | None:
    """The binding rows of the index, None for an empty database; refuses foreign tables."""
    return check_tables(url, lambda sql: conn.execute(text(sql)).all())


def check_tables(url: str, query: Callable[[str], Any]) -> dict[str, str] | None:
    """``meta`` of the database that ``query(sql) -> rows`` reads; None when it holds no
    table; a database with any table that is not ours is refused."""
    from near_dedup_core import index_store as db

    tables = {row[0] for row in query(_TABLES_SQL)}
    if not tables:
        return None
    ours = {t.name for t in db.metadata.sorted_tables}
    if "meta" not in tables or not tables <= ours:
        foreign = sorted(tables - ours) or ["meta missing"]
        raise NearDedupError(f"index {label(url)}: the database holds tables that are not a "
                             f"near-dedup index ({', '.join(foreign[:3])}); use a dedicated "
                             f"database")
    values = {k: v for k, v in query("SELECT key, value FROM meta")}
    if values.get("format") != db.FORMAT:
        raise NearDedupError(f"index {label(url)}: the database is not a near-dedup index")
    return values


def connect(url: str, *, snapshot: bool, read_only: bool = False) -> Any:
    """A psycopg connection; ``snapshot``: every statement until ``close`` reads one
    REPEATABLE READ snapshot, taken by the first statement; ``read_only``: and that
    transaction is ``READ ONLY`` (the server refuses any write in it)."""
    try:
        import psycopg
    except ImportError:
        raise NearDedupError(f"index {label(url)}: the PostgreSQL driver psycopg is not "
                             f"installed; {INSTALL_HINT}") from None
    try:
        raw = psycopg.connect(url.replace("postgres://", "postgresql://", 1),
                              autocommit=not snapshot, application_name="near-dedup",
                              connect_timeout=10)
    except psycopg.Error as exc:
        raise connect_error(url, exc) from None
    if snapshot:
        raw.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        raw.read_only = read_only
    return raw


def connect_to_snapshot(url: str, snapshot: str) -> Any:
    """A `connect` (``snapshot=True``) whose transaction reads the snapshot that another
    transaction exported with ``pg_export_snapshot()`` (and keeps open meanwhile)."""
    from psycopg import sql

    raw = connect(url, snapshot=True)
    try:
        raw.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
    except BaseException:
        raw.close()
        raise
    return raw


def stream(raw: Any, sql: str, rows: int = 5000) -> Iterator[tuple]:
    """The rows of ``sql`` through a server-side cursor, ``rows`` at a time: a result of
    millions of rows never sits in the client's memory at once. Inside the connection's open
    transaction (a named cursor lives as long as its transaction)."""
    with raw.cursor(name="near_dedup_stream") as cur:
        cur.itersize = rows
        cur.execute(sql)
        yield from cur


#: SQLSTATE class XX: the server found a page or an index it cannot read as written.
_DAMAGE_CLASS = "XX"


def damage_detail(exc: BaseException) -> str | None:
    """The server's one-line message when ``exc`` reports damaged data (``data_corrupted``,
    ``index_corrupted``, any internal error of class XX), else None."""
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None)
    if not state or not state.startswith(_DAMAGE_CLASS):
        return None
    lines = str(orig).strip().splitlines()
    return lines[0] if lines else state


class QmarkConnection:
    """A psycopg connection spoken to in SQLite's ``?`` parameter style, so that the reads
    both backends share are written once (their SQL holds no other ``?`` or ``%``)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.raw.execute(sql.replace("?", "%s"), tuple(params) or None)

    def close(self) -> None:
        self.raw.close()


def create_schema(conn: Connection, config: NearDedupConfig, created_at: str) -> None:
    """Tables and binding rows inside the open transaction."""
    from near_dedup_core import index_store as db

    db.metadata.create_all(conn)
    # As on SQLite (which enforces no foreign keys unless asked), references are not checked
    # per row: sources are written before their new contents, and 16 band rows per content
    # would each pay a lookup. `index check` verifies them.
    for table, name in conn.execute(text(
            "SELECT table_name, constraint_name FROM information_schema.table_constraints "
            "WHERE constraint_type = 'FOREIGN KEY' AND table_schema = current_schema() "
            "ORDER BY table_name, constraint_name")).all():
        conn.exec_driver_sql(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
    conn.execute(insert(db.meta), db.binding_rows(config, created_at))


def raw(conn: Connection) -> Any:
    """The psycopg connection under ``conn`` (for COPY)."""
    return conn.connection.dbapi_connection


def copy_rows(conn: Connection, table: str, columns: tuple[str, ...], rows: Any) -> None:
    """``COPY table (columns) FROM STDIN`` of ``rows`` (tuples in column order)."""
    with raw(conn).cursor() as cur:
        with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def copy_bands(conn: Connection, table: str, keys: np.ndarray, contents: np.ndarray) -> None:
    copy_rows(conn, table, ("key", "content"), zip(keys.tolist(), contents.tolist(), strict=True))


def known_contents(conn: Connection, content_ids: list[bytes]) -> dict[bytes, int]:
    if not content_ids:
        return {}
    rows = conn.exec_driver_sql("SELECT content_id, id FROM contents WHERE content_id = ANY(%s)",
                                (content_ids,)).all()
    return {bytes(cid): rowid for cid, rowid in rows}

