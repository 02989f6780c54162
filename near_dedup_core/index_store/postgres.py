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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from sqlalchemy import Connection, Engine, create_engine, insert, text
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.batch import BatchTransaction
from near_dedup_core.index_store.check import check_invariants, check_meta
from near_dedup_core.index_store.common import BAND_TABLES, FORMAT, check_binding
from near_dedup_core.index_store.invariants import (
    BackgroundCheck,
    check_content_rows,
    quick_check,
)
from near_dedup_core.index_store.postgres_url import label
from near_dedup_core.index_store.records import BandHits, IndexCheck
from near_dedup_core.index_store.schema import binding_rows, contents, meta, metadata, sources
from near_dedup_core.index_store.sqlite.snapshot import IndexSnapshot
from near_dedup_core.index_store.texts import KnownTexts

INSTALL_HINT = "install it with: pip install 'near-dedup[postgres]'"
#: Advisory lock key of the index writer: the first 8 bytes of sha256("near-dedup-index").
WRITER_LOCK_KEY = 0x5F1C0B3E2D4A6978


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
    tables = {row[0] for row in query(_TABLES_SQL)}
    if not tables:
        return None
    ours = {t.name for t in metadata.sorted_tables}
    if "meta" not in tables or not tables <= ours:
        foreign = sorted(tables - ours) or ["meta missing"]
        raise NearDedupError(f"index {label(url)}: the database holds tables that are not a "
                             f"near-dedup index ({', '.join(foreign[:3])}); use a dedicated "
                             f"database")
    values = {k: v for k, v in query("SELECT key, value FROM meta")}
    if values.get("format") != FORMAT:
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
    metadata.create_all(conn)
    # As on SQLite (which enforces no foreign keys unless asked), references are not checked
    # per row: sources are written before their new contents, and 16 band rows per content
    # would each pay a lookup. `index check` verifies them.
    for table, name in conn.execute(text(
            "SELECT table_name, constraint_name FROM information_schema.table_constraints "
            "WHERE constraint_type = 'FOREIGN KEY' AND table_schema = current_schema() "
            "ORDER BY table_name, constraint_name")).all():
        conn.exec_driver_sql(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
    conn.execute(insert(meta), binding_rows(config, created_at))


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


# --------------------------------------------------------------------------- the scan's snapshot


class PostgresSnapshot(IndexSnapshot):
    """The scan's reads on a PostgreSQL index: one ``REPEATABLE READ`` transaction, the shared
    SQL through `postgres.QmarkConnection`, the history lookup by ``COPY`` into
    temporary tables and one join."""

    def __init__(self, path: str, con: QmarkConnection,
                 config: NearDedupConfig | None = None) -> None:
        super().__init__(path, con, config)
        self._qmark = con

    @classmethod
    def open_url(cls, url: str, config: NearDedupConfig | None = None) -> PostgresSnapshot:
        raw = connect(url, snapshot=True)
        try:
            values = check_tables(url, lambda sql: raw.execute(sql).fetchall())
            if values is None:
                raise NearDedupError(f"index {label(url)}: empty database; index the "
                                     f"inputs first")
            if config is not None:
                check_binding(label(url), values, config)
            quick_check(label(url), QmarkConnection(raw).execute)
        except BaseException:
            raw.close()
            raise
        snap = cls(label(url), QmarkConnection(raw), config)
        snap.location = url
        return snap

    def history_band_hits(self, keys: np.ndarray, pool_contents: list[int],
                          pool_nodes: set[tuple[int, str]]) -> BandHits:
        """As on SQLite, with the probes split into `HISTORY_PROBE_CONNECTIONS` contiguous
        key ranges, each probed by its own server process: the extra connections read the
        scan's snapshot (``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``), so the rows
        are those of one state of the index, and the probes, CPU or random reads on the
        server, run side by side (1.2·10^6 keys against 1.5·10^8 band rows: 3.7 s instead of
        6.1 s on two cores). ``bands_recent`` is left out on the same condition as on SQLite
        (`_band_tables_to_probe`)."""
        raw = self._qmark.raw
        raw.execute("CREATE TEMP TABLE scan_contents (id BIGINT PRIMARY KEY)")
        try:
            _copy_ids(raw, "scan_contents", pool_contents)
            mixed = {c for c, split in raw.execute(POOL_SPLITS_SQL)
                     if (c, split) not in pool_nodes}
        finally:
            raw.execute("DROP TABLE scan_contents")
        outside_pool = [c for c in pool_contents if c not in mixed]
        sql = history_join_sql(self._band_tables_to_probe(pool_contents, mixed)[0])
        parts = HISTORY_PROBE_CONNECTIONS if len(keys) >= HISTORY_PROBE_MIN_KEYS else 1
        bounds = np.linspace(0, len(keys), parts + 1).astype(int)
        slices = [keys[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        conns = [raw]
        try:
            if parts > 1:
                (snapshot,) = raw.execute("SELECT pg_export_snapshot()").fetchone()
                for _ in range(parts - 1):
                    conns.append(connect_to_snapshot(self.location, snapshot))
            with ThreadPoolExecutor(parts) as threads:
                found = list(threads.map(_probe_band_tables, conns, slices,
                                         [outside_pool] * parts, [sql] * parts))
        finally:
            for extra in conns[1:]:
                extra.close()
        rows = np.asarray([r for part in found for r in part], dtype=np.int64).reshape(-1, 2)
        return BandHits(rows[:, 0], rows[:, 1])


#: The splits the index holds sources of the pool's contents in: one probe of
#: ``ix_sources_content`` per content, kept apart by ``OFFSET 0`` (as a plain join the planner
#: hashes all of ``sources``: 3.1 s against 0.3 s for 97,786 contents among 1.2·10^7
#: sources).
POOL_SPLITS_SQL = ("SELECT DISTINCT t.id, s.split FROM scan_contents t CROSS JOIN LATERAL "
                   "(SELECT split FROM sources WHERE sources.content = t.id OFFSET 0) s")

#: Server connections that share the history lookup of a PostgreSQL scan, and the number of
#: probe keys from which a second one pays for its connection and temporary tables.
HISTORY_PROBE_CONNECTIONS = 2
HISTORY_PROBE_MIN_KEYS = 100_000


def _probe_band_tables(raw: Any, keys: list[int], pool_contents: list[int],
                       sql: str) -> list[tuple]:
    """The history join ``sql`` (`history_join_sql`) on the connection ``raw`` for ``keys``
    (sorted), less the band rows of ``pool_contents``; the temporary tables are dropped
    again."""
    raw.execute("CREATE TEMP TABLE scan_keys (key BIGINT PRIMARY KEY)")
    raw.execute("CREATE TEMP TABLE scan_contents (id BIGINT PRIMARY KEY)")
    try:
        _copy_ids(raw, "scan_keys", keys)
        _copy_ids(raw, "scan_contents", pool_contents)
        raw.execute("ANALYZE scan_keys")
        # the probes of an empty or just folded bands_recent stay index probes too
        raw.execute("SET LOCAL enable_seqscan = off")
        rows = raw.execute(sql).fetchall()
        raw.execute("SET LOCAL enable_seqscan = on")
        return rows
    finally:
        raw.execute("DROP TABLE scan_keys, scan_contents")


def _copy_ids(raw: Any, table: str, values: list[int]) -> None:
    """``COPY`` of ``values`` into the one-column temporary ``table``."""
    with raw.cursor() as cur:
        with cur.copy(f"COPY {table} FROM STDIN") as copy:
            for v in values:
                copy.write_row((v,))


def history_join_sql(tables: Sequence[str] = BAND_TABLES) -> str:
    """The scan's history lookup on PostgreSQL (`PostgresSnapshot.history_band_hits`): the
    band rows of the probe keys in ``tables`` (both band tables, or ``bands`` alone), less
    those of the pool's own contents, as one B-tree probe of each table per key. ``OFFSET 0``
    keeps the per-key subquery from being flattened into a plain join, for which the
    planner, putting ~50 rows behind a band key from its sample, reads the whole band table
    instead (a hash join at 1.2·10^8 band rows: 80 s against 15 s for the probes,
    docs/postgres.md)."""
    probes = " UNION ALL ".join(f"SELECT content FROM {t} WHERE {t}.key = q.key"
                                for t in tables)
    return (f"SELECT q.key, b.content FROM scan_keys q CROSS JOIN LATERAL ({probes} OFFSET 0) b "
            f"WHERE NOT EXISTS (SELECT 1 FROM scan_contents c WHERE c.id = b.content)")


#: The history join over both band tables.
HISTORY_JOIN_SQL = history_join_sql()



# --------------------------------------------------------------------------- a batch


class PostgresBatch(BatchTransaction):
    """The batch writes on PostgreSQL: bulk rows by ``COPY``, lookups by ``= ANY(array)``."""

    MANY_ROWS = "INSERT"  # PostgreSQL has no ``OR FAIL``: a failing row aborts the transaction
    served = True

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        return known_contents(self.conn, content_ids)

    def add_sources(self, rows: list[tuple]) -> None:
        copy_rows(self.conn, "sources", _SOURCE_COLUMNS[1:], (r[1:] for r in rows))

    def add_contents(self, rows: list[tuple]) -> None:
        copy_rows(self.conn, "contents", _CONTENT_COLUMNS, rows)

    def add_bands(self, table: str, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        assert table in BAND_TABLES
        copy_bands(self.conn, table, keys, content_rowids)

    def known_raw_texts(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        return KnownTexts(QmarkConnection(raw(self.conn))).contents(shas)

    def add_raw_texts(self, rows: list[tuple[bytes, int, int]]) -> None:
        copy_rows(self.conn, "raw_texts", ("text_sha256", "scope", "content"), rows)


_SOURCE_COLUMNS = tuple(c.name for c in sources.columns)
_CONTENT_COLUMNS = tuple(c.name for c in contents.columns)


@contextmanager
def postgres_batch(url: str, config: NearDedupConfig, created_at: str) -> Iterator[PostgresBatch]:
    """One batch on a PostgreSQL index: lock, initialise an empty database and append, all in
    one transaction, so a failure or a killed client leaves the database as it was."""
    engine_ = engine(url)
    rows = None
    try:
        with engine_.begin() as conn:
            lock_writer(conn, url)
            values = read_meta_or_none(conn, url)
            if values is None:
                create_schema(conn, config, created_at)
            else:
                check_binding(label(url), values, config, writing=True)
                quick_check(label(url), QmarkConnection(raw(conn)).execute)
                rows = _content_rows_check(url, config.min_chars)  # beside the batch
            if rows is None:
                yield PostgresBatch(conn, url)
            else:
                with rows.explains_failures():
                    yield PostgresBatch(conn, url)
                rows.result()
    except driver_errors() as exc:
        raise connect_error(url, exc) from None
    finally:
        if rows is not None:
            rows.close()
        engine_.dispose()


def _content_rows_check(url: str, min_chars: int) -> BackgroundCheck:
    """`invariants.check_content_rows` of the committed index on a connection of its own."""
    checker = connect(url, snapshot=False)
    return BackgroundCheck(
        checker, [lambda c: check_content_rows(label(url), QmarkConnection(c).execute,
                                               min_chars)], checker.cancel)


# --------------------------------------------------------------------------- index check


#: What ``index check`` on PostgreSQL leaves to the server: its pages and B-trees.
PG_PAGES = "pages and B-trees are the server's to check: run its pg_amcheck"


def check_postgres(url: str) -> IndexCheck:
    """`index check` of a PostgreSQL index: the invariants of `check.check_sqlite` in one
    ``REPEATABLE READ, READ ONLY`` transaction, so every invariant is checked on one snapshot
    while other machines append, the texts streamed through a server-side cursor. Physical
    damage (pages, B-trees) is the server's to find with its ``pg_amcheck`` (which needs the
    amcheck extension and a privileged role); the check itself needs only ``SELECT``, and a
    read that fails on a damaged page is reported as damage pointing at ``pg_amcheck``."""
    where = label(url)
    raw = connect(url, snapshot=True, read_only=True)
    try:
        values = check_tables(url, lambda sql: raw.execute(sql).fetchall())
        if values is None:
            raise NearDedupError(f"index {where}: empty database; not a near-dedup index")
        config = check_meta(where, values)
        result = check_invariants(where, QmarkConnection(raw),
                                   config, lambda sql: stream(raw, sql))
        return result._replace(note=f"; {PG_PAGES}")
    except driver_errors() as exc:
        detail = damage_detail(exc)
        if detail is not None:
            raise NearDedupError(f"index {where}: damaged ({detail}); {PG_PAGES}, and restore "
                                 f"the database from a backup") from None
        raise connect_error(url, exc) from None
    finally:
        raw.close()
