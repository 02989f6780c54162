"""The index's tables (SQLAlchemy 2 Core) and what creates, appends to or checks an index:
`open_writable` and `create_schema`, `BatchTransaction` (one appended batch), `check_index`,
and the PostgreSQL variants of the batch and of the scan's snapshot (`PostgresBatch`,
`PostgresSnapshot`). The tables are described in the package's docstring
(`near_dedup_core.index_store`); a scan's reads of a SQLite index are in
`near_dedup_core.index_store.snapshot`, the texts' codec and the readers that workers open on
their own in `near_dedup_core.index_store.texts`: neither imports SQLAlchemy.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson
import zstandard
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    ForeignKey,
    Index,
    Insert,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    insert,
    select,
)
from sqlalchemy.pool import NullPool

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store import postgres as pg
from near_dedup_core.index_store.snapshot import (
    BAND_TABLES,
    BANDS_MERGED_THROUGH,
    BUSY_TIMEOUT_ENV,
    DEFAULT_BUSY_TIMEOUT,
    FORMAT,
    SCHEMA_VERSION,
    BandHits,
    IndexedPackage,
    IndexSnapshot,
    _read_foreign,
    check_binding,
    check_schema,
    connect_reader,
    database_errors,
)
from near_dedup_core.index_store.texts import (
    CACHE_SIZE,
    SQL_IN,
    KnownTexts,
    TextReader,
    postgres_url,
)

#: Row ids, band keys and counts: 64-bit everywhere (SQLAlchemy's ``Integer`` is 32-bit on
#: PostgreSQL); on SQLite an ``INTEGER PRIMARY KEY`` is the rowid, which is 64-bit already.
INT = BigInteger().with_variant(Integer(), "sqlite")
BYTES = LargeBinary()

metadata = MetaData()

meta = Table("meta", metadata,
             Column("key", String, primary_key=True),
             Column("value", Text, nullable=False))

batches = Table("batches", metadata,
                Column("seq", INT, primary_key=True),
                Column("created_at", String, nullable=False),
                Column("tool_version", String, nullable=False),
                Column("packages", Text, nullable=False))

packages = Table("packages", metadata,
                 Column("id", INT, primary_key=True),
                 Column("package_id", String, nullable=False, unique=True),
                 Column("kind", String, nullable=False),
                 Column("manifest_sha256", String, nullable=False),
                 Column("batch", INT, ForeignKey("batches.seq"), nullable=False),
                 Column("records", INT, nullable=False),
                 Column("manifest", Text, nullable=False))

scopes = Table("scopes", metadata,
               Column("id", INT, primary_key=True),
               Column("scope_key", Text, nullable=False, unique=True),
               Column("label", String, nullable=False))

contents = Table("contents", metadata,
                 Column("id", INT, primary_key=True),
                 Column("content_id", BYTES, nullable=False, unique=True),
                 Column("scope", INT, ForeignKey("scopes.id"), nullable=False),
                 Column("batch", INT, ForeignKey("batches.seq"), nullable=False),
                 Column("norm_chars", INT, nullable=False),
                 Column("shingles", INT),
                 Column("signature", BYTES),
                 Column("text_z", BYTES, nullable=False),
                 Column("dictionary", INT, ForeignKey("dictionaries.id")))

dictionaries = Table("dictionaries", metadata,
                     Column("id", INT, primary_key=True),
                     Column("batch", INT, ForeignKey("batches.seq"), nullable=False),
                     Column("data", BYTES, nullable=False))

bands = Table("bands", metadata,
              Column("key", INT, primary_key=True, autoincrement=False),
              Column("content", INT, ForeignKey("contents.id"), primary_key=True,
                     autoincrement=False),
              sqlite_with_rowid=False)

#: Band rows of the contents after ``meta.bands_merged_through``: the same columns as
#: ``bands``. No foreign key, as for ``bands`` on PostgreSQL: `index check` verifies them.
bands_recent = Table("bands_recent", metadata,
                     Column("key", INT, primary_key=True, autoincrement=False),
                     Column("content", INT, primary_key=True, autoincrement=False),
                     sqlite_with_rowid=False)

#: Each raw compared text indexed, by sha256 within its scope, and its content: a text met
#: again (the seed's cumulative snapshots) gets a source row without being normalized or
#: signed again.
raw_texts = Table("raw_texts", metadata,
                  Column("text_sha256", BYTES, primary_key=True),
                  Column("scope", INT, ForeignKey("scopes.id"), primary_key=True,
                         autoincrement=False),
                  Column("content", INT, ForeignKey("contents.id"), nullable=False),
                  sqlite_with_rowid=False)

sources = Table("sources", metadata,
                Column("id", INT, primary_key=True),
                Column("content", INT, ForeignKey("contents.id"), nullable=False),
                Column("package", INT, ForeignKey("packages.id"), nullable=False),
                Column("sample_id", String, nullable=False),
                Column("split", String, nullable=False),
                Column("file", String, nullable=False),
                Column("line", INT, nullable=False),
                Column("position", INT, nullable=False),
                Column("text_sha256", BYTES, nullable=False),
                Column("domain", String),
                Column("source", Text),
                Index("ix_sources_package", "package", "position"),
                Index("ix_sources_content", "content"))


def insert_sql(table: Table, rows: int = 1, verb: str = "INSERT") -> str:
    """The plain ``INSERT INTO t (cols…) VALUES (?, …)`` for executemany on raw tuples, with
    ``rows`` rows of parameters per statement (``verb``: ``INSERT`` or, for instance,
    ``INSERT OR FAIL``)."""
    cols = ", ".join(c.name for c in table.columns)
    marks = ", ".join("?" for _ in table.columns)
    return f"{verb} INTO {table.name} ({cols}) VALUES " + ", ".join([f"({marks})"] * rows)


def _pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout = 60000")
    cur.execute(f"PRAGMA cache_size = {CACHE_SIZE}")
    cur.close()


def _engine(creator) -> Engine:
    engine = create_engine("sqlite://", creator=creator, poolclass=NullPool)
    event.listen(engine, "connect", _pragmas)
    return engine


def read_meta(conn) -> dict[str, str]:
    return {k: v for k, v in conn.execute(select(meta.c.key, meta.c.value))}


def open_writable(path: Path, *, staged: bool = False) -> Engine:
    """An engine whose transactions are ``BEGIN IMMEDIATE`` (one writer, others wait up to the
    busy timeout) in WAL mode, so readers such as ``scan`` see the last committed batch.

    ``staged``: ``path`` is a new file that no other process opens and that is deleted on any
    failure (the first batch of a new index, renamed into place by `publish_staged`). It is
    written without a journal and without syncs: its pages reach the file once, where a WAL
    would take them twice (appended to the WAL, then copied by the checkpoint at the commit;
    for a first batch of 10^6 records, 2.4 GB each way)."""
    target = str(path)
    engine = _engine(lambda: sqlite3.connect(target, isolation_level=None, check_same_thread=False))

    @event.listens_for(engine, "connect")
    def _wal(dbapi_conn, _record) -> None:
        dbapi_conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # takes effect on a new file only
        dbapi_conn.execute(f"PRAGMA journal_mode = {'OFF' if staged else 'WAL'}")
        dbapi_conn.execute(f"PRAGMA synchronous = {'OFF' if staged else 'NORMAL'}")
        dbapi_conn.execute("PRAGMA cache_size = -262144")  # 256 MiB: unique content ids

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def publish_staged(staged: Path, target: Path) -> None:
    """Make the file written through ``open_writable(staged, staged=True)`` (every connection
    closed) the index at ``target``: switch it to WAL mode (kept in its header), sync it to
    disk, rename it into place and sync the folder, so that the index a reader or a later
    batch finds is whole, in WAL mode, and survives a crash."""
    con = sqlite3.connect(str(staged), isolation_level=None)
    try:
        mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    finally:
        con.close()
    if mode != "wal":
        raise NearDedupError(f"index {target}: could not switch the new index to WAL mode "
                             f"(journal mode {mode})")
    _fsync(staged)
    os.rename(staged, target)
    _fsync(target.parent)


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') writes to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PAGE_SIZE = 16384  # rows of ~2 KB (compressed text + signature) pack with little slack


def binding_rows(config: NearDedupConfig, created_at: str) -> list[dict[str, str]]:
    """The ``meta`` rows that bind a new index to its format, config and algorithm."""
    return [
        {"key": "format", "value": FORMAT},
        {"key": "schema_version", "value": SCHEMA_VERSION},
        {"key": "algorithm_version", "value": ALGORITHM_VERSION},
        {"key": "config_fingerprint", "value": config.fingerprint()},
        {"key": "config", "value": config.canonical_json()},
        {"key": "created_at", "value": created_at},
        {"key": BANDS_MERGED_THROUGH, "value": "0"},
    ]


def create_schema(engine: Engine, config: NearDedupConfig, created_at: str) -> None:
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(meta), binding_rows(config, created_at))


def existing_meta(path: Path) -> dict[str, str] | None:
    """meta of the index at ``path``, None if there is no file; errors for foreign files."""
    if not path.exists():
        return None
    return _read_foreign(path)


@contextmanager
def writer_lock(path: Path, timeout: float | None = None) -> Iterator[None]:
    """Exclusive writer lock on ``<index>.lock``; waits at most ``timeout`` seconds
    (env NEAR_DEDUP_BUSY_TIMEOUT, default 30) and then reports the index as busy.

    The lock file exists only while it is held: the holder removes it before unlocking, and a
    waiter that then gets the lock on the removed file retries on the current one. So a refused
    first batch leaves no file at all beside a new index path."""
    if timeout is None:
        timeout = float(os.environ.get(BUSY_TIMEOUT_ENV, DEFAULT_BUSY_TIMEOUT))
    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise NearDedupError(
                    f"index {path}: busy, another near-dedup index run holds it "
                    f"(waited {timeout:g}s); try again when it has finished") from None
            time.sleep(0.1)
            continue
        if _is_current(fd, lock_path):
            break
        os.close(fd)  # locked a file its previous holder has removed: lock the current one
    try:
        yield
    finally:
        lock_path.unlink(missing_ok=True)  # still locked here, so no one else can own it yet
        os.close(fd)


def _is_current(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


class PostgresSnapshot(IndexSnapshot):
    """The scan's reads on a PostgreSQL index: one ``REPEATABLE READ`` transaction, the shared
    SQL through `postgres.QmarkConnection`, the history lookup by ``COPY`` into
    temporary tables and one join."""

    @classmethod
    def open_url(cls, url: str, config: NearDedupConfig | None = None) -> PostgresSnapshot:
        raw = pg.connect(url, snapshot=True)
        try:
            values = pg.check_tables(url, lambda sql: raw.execute(sql).fetchall())
            if values is None:
                raise NearDedupError(f"index {pg.label(url)}: empty database; index the "
                                     f"inputs first")
            if config is not None:
                check_binding(pg.label(url), values, config)
        except BaseException:
            raw.close()
            raise
        snap = cls(pg.label(url), pg.QmarkConnection(raw),  # type: ignore[arg-type]
                   None if config is None else config.num_perm)
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
        raw = self._con.raw  # type: ignore[attr-defined]
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
                    conns.append(pg.connect_to_snapshot(self.location, snapshot))
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


# --------------------------------------------------------------------------- index check


REQUIRED_META = ("format", "schema_version", "algorithm_version", "config_fingerprint",
                 "config", "created_at", BANDS_MERGED_THROUGH)


class IndexCheck(NamedTuple):
    path: Path | str
    batches: int
    packages: int
    contents: int
    sources: int
    note: str = ""

    def summary(self) -> str:
        return (f"index {self.path}: OK ({self.batches:,} batches, {self.packages:,} packages, "
                f"{self.contents:,} contents, {self.sources:,} sources){self.note}")


#: What ``index check`` on PostgreSQL leaves to the server: its pages and B-trees.
PG_PAGES = "pages and B-trees are the server's to check: run its pg_amcheck"


def check_index(path: Path | str) -> IndexCheck:
    """The index's own invariants, on a SQLite file (after SQLite's ``integrity_check``) or a
    PostgreSQL database; raises NearDedupError naming the first problem. Reads only.

    Invariants: the meta keys are present, name this format, schema and algorithm, and the
    stored config has the stored fingerprint; every band row's content exists and has a
    signature of ``num_perm`` values, and the row is in the band table that
    ``meta.bands_merged_through`` assigns it to; every source's and raw text's content and
    every source's package exist; no content, package or dictionary names a batch that does
    not exist; every text decompresses (with its dictionary) to ``norm_chars`` characters.

    SQLite: one read transaction on a connection that cannot write (:func:`connect_reader`),
    after ``PRAGMA integrity_check``, which reads every page. PostgreSQL: one ``REPEATABLE
    READ, READ ONLY`` transaction, so every invariant is checked on one snapshot while other
    machines append, and the texts are streamed through a server-side cursor. Physical damage
    (pages, B-trees) is the server's to find with its ``pg_amcheck`` (which needs the amcheck
    extension and a privileged role); the check itself needs only ``SELECT``, and a read that
    fails on a damaged page is reported as damage pointing at ``pg_amcheck``."""
    url = postgres_url(path)
    if url is not None:
        return _check_postgres(url)
    path = Path(path)
    if not path.is_file():
        raise NearDedupError(f"index {path}: not found")
    with database_errors(path):
        values = _read_foreign(path)
        config = _check_meta(path, values)
        con = connect_reader(path)
        try:
            con.execute("BEGIN")
            problems = [row[0] for row in con.execute("PRAGMA integrity_check(1)")]
            if problems != ["ok"]:
                first = " ".join(problems[0].split())
                raise NearDedupError(f"index {path}: damaged (SQLite integrity_check: {first}); "
                                     f"restore it from a backup")
            result = _check_invariants(path, con, config, con.execute)
            con.execute("COMMIT")
            return result
        finally:
            con.close()


def _check_postgres(url: str) -> IndexCheck:
    where = pg.label(url)
    raw = pg.connect(url, snapshot=True, read_only=True)
    try:
        values = pg.check_tables(url, lambda sql: raw.execute(sql).fetchall())
        if values is None:
            raise NearDedupError(f"index {where}: empty database; not a near-dedup index")
        config = _check_meta(where, values)
        result = _check_invariants(where, pg.QmarkConnection(raw),  # type: ignore[arg-type]
                                   config, lambda sql: pg.stream(raw, sql))
        return result._replace(note=f"; {PG_PAGES}")
    except pg.driver_errors() as exc:
        detail = pg.damage_detail(exc)
        if detail is not None:
            raise NearDedupError(f"index {where}: damaged ({detail}); {PG_PAGES}, and restore "
                                 f"the database from a backup") from None
        raise pg.connect_error(url, exc) from None
    finally:
        raw.close()


def _check_meta(path: Path | str, values: dict[str, str]) -> NearDedupConfig:
    """The binding rows: present, ours, readable by this tool, the config its fingerprint."""
    if values.get("format") == FORMAT:
        check_schema(path, values.get("schema_version"))
    missing = [k for k in REQUIRED_META if k not in values]
    if missing:
        raise NearDedupError(f"index {path}: meta lacks {', '.join(missing)}; restore it from "
                             f"a backup")
    if values.get("format") != FORMAT:
        raise NearDedupError(f"index {path}: not a near-dedup index")
    if values["schema_version"] != SCHEMA_VERSION or values["algorithm_version"] != ALGORITHM_VERSION:
        raise NearDedupError(f"index {path}: schema {values['schema_version']}, algorithm "
                             f"{values['algorithm_version']}: not readable by this tool "
                             f"(schema {SCHEMA_VERSION}, algorithm {ALGORITHM_VERSION})")
    try:
        config = NearDedupConfig.model_validate_json(values["config"])
    except ValueError:
        raise NearDedupError(f"index {path}: meta config is not a valid near-dedup config; "
                             f"restore it from a backup") from None
    if config.fingerprint() != values["config_fingerprint"]:
        raise NearDedupError(f"index {path}: meta config does not have the stored "
                             f"config_fingerprint; restore it from a backup")
    return config


def _check_invariants(path: Path | str, con: sqlite3.Connection, config: NearDedupConfig,
                      stream: Callable[[str], Iterable[tuple]]) -> IndexCheck:
    """The row invariants, on ``con`` (SQLite, or PostgreSQL through `QmarkConnection`) inside
    the caller's read transaction; ``stream(sql)`` iterates over a large result without
    holding it in memory."""
    def bad(what: str) -> NearDedupError:
        return NearDedupError(f"index {path}: {what}; restore it from a backup")

    max_batch = con.execute("SELECT MAX(seq) FROM batches").fetchone()[0] or 0
    (merged,) = con.execute("SELECT value FROM meta WHERE key = ?",
                            (BANDS_MERGED_THROUGH,)).fetchone()
    if not merged.isdigit():
        raise bad(f"meta {BANDS_MERGED_THROUGH} is not a row id")
    queries = [
        ("a band row names a missing content or one without a signature",
         ("SELECT COUNT(*) FROM (SELECT content FROM bands UNION ALL "
          "SELECT content FROM bands_recent) b LEFT JOIN contents c ON c.id = b.content "
          "WHERE c.id IS NULL OR c.signature IS NULL")),
        (f"a band row is in the wrong table for {BANDS_MERGED_THROUGH} = {merged}",
         (f"SELECT (SELECT COUNT(*) FROM bands WHERE content > {int(merged)}) + "
          f"(SELECT COUNT(*) FROM bands_recent WHERE content <= {int(merged)})")),
        ("a content's signature does not have num_perm values",
         (f"SELECT COUNT(*) FROM contents WHERE signature IS NOT NULL AND "
          f"length(signature) != {2 * config.num_perm}")),
        ("a source names a missing content",
         ("SELECT COUNT(*) FROM sources s LEFT JOIN contents c ON c.id = s.content "
          "WHERE c.id IS NULL")),
        ("a raw text names a missing content",
         ("SELECT COUNT(*) FROM raw_texts r LEFT JOIN contents c ON c.id = r.content "
          "WHERE c.id IS NULL")),
        ("a source names a missing package",
         ("SELECT COUNT(*) FROM sources s LEFT JOIN packages p ON p.id = s.package "
          "WHERE p.id IS NULL")),
        ("a content names a batch after the last one",
         f"SELECT COUNT(*) FROM contents WHERE batch > {max_batch} OR batch < 1"),
        ("a package names a missing batch",
         ("SELECT COUNT(*) FROM packages p LEFT JOIN batches b ON b.seq = p.batch "
          "WHERE b.seq IS NULL")),
        ("a dictionary names a missing batch",
         ("SELECT COUNT(*) FROM dictionaries d LEFT JOIN batches b ON b.seq = d.batch "
          "WHERE b.seq IS NULL")),
        ("a content names a missing dictionary",
         ("SELECT COUNT(*) FROM contents c LEFT JOIN dictionaries d ON d.id = c.dictionary "
          "WHERE c.dictionary IS NOT NULL AND d.id IS NULL")),
    ]
    for what, sql in queries:
        (n,) = con.execute(sql).fetchone()
        if n:
            raise bad(f"{what} ({n:,} rows)")
    reader = TextReader(con)
    for cid, blob, dictionary, chars in stream(
            "SELECT id, text_z, dictionary, norm_chars FROM contents"):
        try:
            text = reader.text(blob, dictionary)
        except (zstandard.ZstdError, UnicodeDecodeError) as exc:
            raise bad(f"the text of content row {cid} does not decompress ({exc})") from None
        if len(text) != chars:
            raise bad(f"the text of content row {cid} has {len(text)} characters, "
                      f"norm_chars says {chars}")
    counts = [con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
              for t in ("packages", "contents", "sources")]
    return IndexCheck(path, max_batch, *counts)


# --------------------------------------------------------------------------- batch writes


class RefTarget(NamedTuple):
    """What a ``ref`` to an indexed sample resolves to."""

    content: int
    text_sha256: bytes
    domain: str | None


#: Band rows per ``INSERT`` statement (1,000 bound parameters): 15.6 M sorted rows went in
#: about 10 % faster than with 50 per statement, and no faster with 1,000
#: (`bench.band_insert`).
BAND_ROWS_PER_INSERT = 500
#: Source rows per ``INSERT`` statement (704 bound parameters; SQLite starts the statement's
#: program once per statement): 10^6 rows of a cumulative snapshot went into its index in
#: 3.2–4.1 s against 4.0–5.1 s one row to a statement, on their own; inside the snapshot's
#: batch, beside the workers, the main process spent 5.3–5.7 s of CPU on them against
#: 6.0–6.2 s.
SOURCE_ROWS_PER_INSERT = 64
#: Band rows per ``executemany`` call (16 statements). The rows reach the driver as Python
#: lists; lists of 8,000 rows stay in the CPU's caches, where 8 M rows per call (64 MB of
#: lists) took about 1.35× as long (`bench.band_insert --call-rows`).
BAND_ROWS_PER_CALL = 8_000
#: ``bands_recent`` is folded into ``bands`` once it holds the band rows of this share of the
#: contents that ``bands`` holds (see `BatchTransaction.write_bands`).
RECENT_SHARE = 1 / 8


class BandWrite(NamedTuple):
    """Where a batch's band rows went: ``table``; ``folded``: rows of earlier batches moved
    from ``bands_recent`` into ``bands`` with them."""

    table: str
    folded: int


class BatchTransaction:
    """The write side of one open batch transaction: every statement ``index`` makes.

    ``BatchTransaction.on(conn)`` gives the one for the connection's backend (SQLite here,
    PostgreSQL in ``PostgresBatch``).

    Rows are plain tuples in the table's column order (``sources``, ``contents``) so that a
    million of them go through ``executemany`` without per-row objects; everything else comes
    back as named records. Nothing is visible to readers until the surrounding transaction
    commits.
    """

    #: How the statements that write many rows begin. With SQLite's default conflict
    #: resolution (ABORT), a failing row undoes the rows that its statement wrote before it,
    #: so inside a transaction SQLite first copies every existing page that such a statement
    #: changes into a statement journal, a temporary file (``/var/tmp/etilqs_…``): 2.2 GB of
    #: page copies for the 10^6 source rows of a cumulative snapshot appended to an index in
    #: WAL mode (`docs/benchmarks.md`, round sixteen). With FAIL, the rows before a failing one
    #: stay, and SQLite keeps no statement journal. A batch never keeps them: any error rolls
    #: the whole transaction back.
    MANY_ROWS = "INSERT OR FAIL"

    @staticmethod
    def on(conn: Connection) -> BatchTransaction:
        return PostgresBatch(conn) if conn.dialect.name == "postgresql" else BatchTransaction(conn)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._sql_sources = insert_sql(sources)
        self._sql_sources_many = insert_sql(sources, SOURCE_ROWS_PER_INSERT, self.MANY_ROWS)
        self._sql_contents = insert_sql(contents)
        self._sql_bands = {t: f"INSERT OR IGNORE INTO {t} (key, content) VALUES (?, ?)"
                           for t in BAND_TABLES}
        self._sql_bands_many = {t: sql.replace("VALUES (?, ?)", "VALUES " + ", ".join(
            ["(?, ?)"] * BAND_ROWS_PER_INSERT)) for t, sql in self._sql_bands.items()}
        self._sql_raw_texts = insert_sql(raw_texts)

    def _insert_id(self, statement: Insert) -> int:
        """Execute a single-row insert and return the new row's integer primary key."""
        key = self.conn.execute(statement).inserted_primary_key
        if key is None:
            raise NearDedupError(f"index: no primary key returned for the new "
                                 f"{statement.table.name} row")
        return key[0]

    # -- the index as a whole
    def meta(self) -> dict[str, str]:
        return read_meta(self.conn)

    def set_kind(self, kind: str) -> None:
        self.conn.execute(insert(meta).values(key="kind", value=kind))

    def indexed_packages(self) -> dict[str, IndexedPackage]:
        p = packages.c
        return {row.package_id: IndexedPackage(*row) for row in self.conn.execute(
            select(p.id, p.package_id, p.kind, p.manifest_sha256, p.batch))}

    def add_batch(self, created_at: str, tool_version: str, package_ids: list[str]) -> int:
        """A new batch row; returns its sequence number (one more than the last)."""
        seq = (self.conn.execute(select(func.max(batches.c.seq))).scalar() or 0) + 1
        self.conn.execute(insert(batches).values(
            seq=seq, created_at=created_at, tool_version=tool_version,
            packages=orjson.dumps(package_ids).decode()))
        return seq

    def add_package(self, package_id: str, kind: str, manifest_sha256: str, batch: int,
                    records: int, manifest_json: str) -> int:
        return self._insert_id(insert(packages).values(
            package_id=package_id, kind=kind, manifest_sha256=manifest_sha256, batch=batch,
            records=records, manifest=manifest_json))

    # -- scopes, contents, sources
    def scope_ids(self) -> dict[str, int]:
        return {k: i for i, k in self.conn.execute(select(scopes.c.id, scopes.c.scope_key))}

    def add_scope(self, scope_key: str, label: str) -> int:
        return self._insert_id(insert(scopes).values(scope_key=scope_key, label=label))

    def max_content_rowid(self) -> int:
        return self.conn.execute(select(func.max(contents.c.id))).scalar() or 0

    def ref_targets(self, package_rowid: int) -> dict[str, RefTarget]:
        """sample_id → what a ref to that sample of an indexed package resolves to."""
        s = sources.c
        rows = self.conn.execute(select(s.sample_id, s.content, s.text_sha256, s.domain)
                                 .where(s.package == package_rowid))
        return {sid: RefTarget(c, sha, dom) for sid, c, sha, dom in rows}

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        """Row ids of the given content ids that the index already holds."""
        found: dict[bytes, int] = {}
        for i in range(0, len(content_ids), SQL_IN):
            part = content_ids[i:i + SQL_IN]
            found.update(self.conn.exec_driver_sql(
                f"SELECT content_id, id FROM contents WHERE content_id IN "
                f"({','.join('?' * len(part))})", tuple(part)).all())
        return found

    def known_raw_texts(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        """`KnownTexts.contents` inside the batch (for workers that cannot read the index)."""
        return KnownTexts(self.conn.connection.dbapi_connection).contents(shas)

    def add_sources(self, rows: list[tuple]) -> None:
        """``sources`` rows: (None, content, package, sample_id, split, file, line, position,
        text_sha256, domain, source JSON), ``SOURCE_ROWS_PER_INSERT`` to a statement (the
        rows get their ids in the same order either way)."""
        per = SOURCE_ROWS_PER_INSERT
        full = len(rows) // per * per
        if full:
            width = per * len(sources.columns)
            flat = list(chain.from_iterable(rows[:full]))
            dbapi = self.conn.connection.dbapi_connection  # the same transaction
            assert dbapi is not None
            dbapi.executemany(self._sql_sources_many,
                              [flat[i:i + width] for i in range(0, len(flat), width)])
        if full < len(rows):
            self.conn.exec_driver_sql(self._sql_sources, rows[full:])

    def add_dictionary(self, batch: int, data: bytes) -> int:
        return self._insert_id(insert(dictionaries).values(batch=batch, data=data))

    def newest_dictionary(self) -> tuple[int, bytes] | None:
        """(id, data) of the text dictionary that earlier batches stored last, if any."""
        row = self.conn.execute(select(dictionaries.c.id, dictionaries.c.data)
                                .order_by(dictionaries.c.id.desc()).limit(1)).first()
        return None if row is None else (row[0], bytes(row[1]))

    def add_contents(self, rows: list[tuple]) -> None:
        """``contents`` rows: (rowid, content_id, scope, batch, norm_chars, shingles,
        signature, text_z, dictionary)."""
        self.conn.exec_driver_sql(self._sql_contents, rows)

    def upgrade_schema(self, values: dict[str, str]) -> None:
        """An index of the `UPGRADABLE_SCHEMA` becomes one of `SCHEMA_VERSION`, inside the
        batch's transaction: an empty ``bands_recent``, every band row in ``bands``."""
        if values["schema_version"] == SCHEMA_VERSION:
            return
        metadata.create_all(self.conn, tables=[bands_recent])
        self.conn.execute(meta.update().where(meta.c.key == "schema_version")
                          .values(value=SCHEMA_VERSION))
        self.conn.execute(insert(meta).values(key=BANDS_MERGED_THROUGH,
                                              value=str(self.max_content_rowid())))

    def write_bands(self, ranges: Iterable[tuple[np.ndarray, np.ndarray]],
                    announce: Callable[[str], None] = lambda _text: None) -> BandWrite:
        """The batch's band rows, after its contents: into ``bands_recent``, or with it
        folded, into ``bands``. ``ranges`` gives them as (keys, content row ids) arrays in
        (key, content) order, one key range after another.

        Band keys are uniform hashes, so a day's rows, sorted, still land on nearly every leaf
        of a band B-tree much larger than they are: at 10^7 contents (1.5·10^8 band rows) a
        day of 5·10^4 contents would rewrite the whole ``bands`` B-tree, gigabytes through the
        journal, whatever its own size. So, with ``M`` contents in ``bands`` (row ids up to
        ``meta.bands_merged_through``) and ``R`` after them (this batch's included), the rows
        go to the small ``bands_recent`` while ``R < RECENT_SHARE · M``; otherwise (and for
        the first batch, ``M = 0``) they go to ``bands``, and the rows of ``bands_recent``
        follow them there. A fold rewrites ``bands`` once per ``RECENT_SHARE · M`` contents
        appended, so the pages a batch writes amortize to a constant multiple of its own rows
        (``1 / RECENT_SHARE``), as in a log-structured merge; every lookup reads both tables,
        the second at most an eighth of the first. ``announce`` hears of a fold before it
        starts (it rewrites ``bands``: about a minute at 10^7 contents)."""
        merged = int(self.conn.execute(select(meta.c.value).where(
            meta.c.key == BANDS_MERGED_THROUGH)).scalar_one())
        newest = self.max_content_rowid()
        table = "bands_recent" if newest - merged < RECENT_SHARE * merged else "bands"
        first = newest + 1  # the batch's first content with band rows
        for keys, content_rowids in ranges:
            self.add_bands(table, keys, content_rowids)
            if len(content_rowids):
                first = min(first, int(content_rowids.min()))
        if table == "bands_recent":
            return BandWrite(table, 0)
        earlier = first - 1 - merged
        if earlier > 0:
            announce(f"folding the band rows of {earlier:,} contents of earlier batches from "
                     f"bands_recent into bands")
        folded = self.fold_recent_bands()
        self.conn.execute(meta.update().where(meta.c.key == BANDS_MERGED_THROUGH)
                          .values(value=str(newest)))
        return BandWrite("bands", folded)

    def fold_recent_bands(self) -> int:
        """Move every row of ``bands_recent`` into ``bands`` (in key order); their count."""
        moved = self.conn.exec_driver_sql(
            f"{self.MANY_ROWS} INTO bands (key, content) "
            "SELECT key, content FROM bands_recent ORDER BY key, content").rowcount
        self.conn.exec_driver_sql("DELETE FROM bands_recent")
        return max(moved, 0)

    def add_bands(self, table: str, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        """Band rows into ``table`` (one of `BAND_TABLES`), given sorted by (key, content) so
        the B-tree fills front to back. ``BAND_ROWS_PER_INSERT`` rows per statement, so that a
        statement's own overhead is paid once for many rows, and ``BAND_ROWS_PER_CALL`` per
        call of the driver."""
        per = BAND_ROWS_PER_INSERT
        full = len(keys) // per * per
        step = max(1, BAND_ROWS_PER_CALL // per) * per
        dbapi = self.conn.connection.dbapi_connection  # the same transaction, rows as lists
        assert dbapi is not None
        for i in range(0, full, step):
            end = min(i + step, full)
            flat = np.empty(2 * (end - i), dtype=np.int64)
            flat[0::2], flat[1::2] = keys[i:end], content_rowids[i:end]
            dbapi.executemany(self._sql_bands_many[table], flat.reshape(-1, 2 * per).tolist())
        if full < len(keys):
            self.conn.exec_driver_sql(self._sql_bands[table], list(zip(
                keys[full:].tolist(), content_rowids[full:].tolist(), strict=True)))

    def add_raw_texts(self, rows: list[tuple[bytes, int, int]]) -> None:
        """``raw_texts`` rows (text_sha256, scope, content), given sorted."""
        self.conn.exec_driver_sql(self._sql_raw_texts, rows)


class PostgresBatch(BatchTransaction):
    """The batch writes on PostgreSQL: bulk rows by ``COPY``, lookups by ``= ANY(array)``."""

    MANY_ROWS = "INSERT"  # PostgreSQL has no ``OR FAIL``: a failing row aborts the transaction

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        return pg.known_contents(self.conn, content_ids)

    def add_sources(self, rows: list[tuple]) -> None:
        pg.copy_rows(self.conn, "sources", _SOURCE_COLUMNS[1:], (r[1:] for r in rows))

    def add_contents(self, rows: list[tuple]) -> None:
        pg.copy_rows(self.conn, "contents", _CONTENT_COLUMNS, rows)

    def add_bands(self, table: str, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        assert table in BAND_TABLES
        pg.copy_bands(self.conn, table, keys, content_rowids)

    def known_raw_texts(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        return KnownTexts(pg.QmarkConnection(pg.raw(self.conn))).contents(shas)

    def add_raw_texts(self, rows: list[tuple[bytes, int, int]]) -> None:
        pg.copy_rows(self.conn, "raw_texts", ("text_sha256", "scope", "content"), rows)


_SOURCE_COLUMNS = tuple(c.name for c in sources.columns)
_CONTENT_COLUMNS = tuple(c.name for c in contents.columns)
