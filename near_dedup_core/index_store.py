"""The persistent near-dedup index: SQLAlchemy 2 Core tables over one dedicated SQLite file.

Tables
- ``meta``: format marker, schema version, algorithm version, config fingerprint and config,
  the kind of package the index holds (bound by its first batch).
- ``batches``: one row per appended batch; ``seq`` orders first ingest.
- ``packages``: every indexed package with its manifest sha256 (packages are immutable).
- ``scopes``: isolation scopes by canonical key.
- ``contents``: one row per distinct content_id: the batch that first indexed it, the
  normalized length, the hashed-shingle-set size, the MinHash signature and the zstd-compressed
  normalized text (from which scan recomputes the exact shingle set against history, without
  the original packages). Texts under ``min_chars`` carry no signature: they match exactly only.
- ``dictionaries``: zstd dictionaries trained on a batch's new texts (a fresh one every 100,000
  new contents, following the batch as it drifts): templated text repeats across documents,
  and on 20,000 real documents a dictionary cut the compressed texts by about a third.
- ``bands``: (LSH band key, content) pairs, the primary key doubling as the lookup index.
- ``sources``: one row per indexed sample: package, sample id, split, file, line, position,
  text_sha256, domain and the original ``source`` object.

First-ingest order of a content is (contents.batch, contents.content_id).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
import orjson
import zstandard
from sqlalchemy.pool import NullPool
from sqlalchemy import (BigInteger, Column, Connection, Engine, ForeignKey, Index, Integer,
                        LargeBinary, MetaData, String, Table, Text, create_engine, event, func,
                        insert, select)

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core import index_postgres as pg
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError

FORMAT = "near-dedup-index"
SCHEMA_VERSION = "1"
BUSY_TIMEOUT_ENV = "NEAR_DEDUP_BUSY_TIMEOUT"
DEFAULT_BUSY_TIMEOUT = 30.0

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


ZSTD_LEVEL = 3
DICT_MIN_SAMPLES = 128
DICT_MIN_BYTES = 100 * 1024
DICT_MAX_BYTES = 112_640


def train_text_dictionary(texts: list[str]) -> bytes | None:
    """A zstd dictionary trained on normalized texts, or None when they are too few to help."""
    samples = [t.encode() for t in texts]
    total = sum(len(x) for x in samples)
    if len(samples) < DICT_MIN_SAMPLES or total < DICT_MIN_BYTES:
        return None
    try:
        return zstandard.train_dictionary(min(DICT_MAX_BYTES, total // 10), samples).as_bytes()
    except zstandard.ZstdError:
        return None


@lru_cache(maxsize=4)
def _compressor(dictionary: bytes | None) -> zstandard.ZstdCompressor:
    if dictionary is None:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL,
                                    dict_data=zstandard.ZstdCompressionDict(dictionary))


def compress_texts(texts: list[str], dictionary: bytes | None) -> list[bytes]:
    cctx = _compressor(dictionary)
    return [cctx.compress(t.encode()) for t in texts]


class TextReader:
    """Decompresses stored texts, loading each batch dictionary once."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con
        self._plain = zstandard.ZstdDecompressor()
        self._by_dict: dict[int, zstandard.ZstdDecompressor] = {}

    def text(self, blob: bytes, dictionary: int | None) -> str:
        if dictionary is None:
            return self._plain.decompress(blob).decode()
        dctx = self._by_dict.get(dictionary)
        if dctx is None:
            mark = "%s" if type(self._con).__module__.startswith("psycopg") else "?"
            (data,) = self._con.execute(f"SELECT data FROM dictionaries WHERE id = {mark}",
                                        (dictionary,)).fetchone()
            dctx = self._by_dict[dictionary] = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(data))
        return dctx.decompress(blob).decode()


SQL_IN = 900  # ids per ``IN (…)`` list, under SQLite's bound-parameter limit


def rows_in(con: sqlite3.Connection, sql: str, ids: list[int]) -> Iterator[tuple]:
    """Rows of ``sql`` (one ``{}`` standing for the id list) over ``ids``, in slices."""
    for i in range(0, len(ids), SQL_IN):
        part = ids[i:i + SQL_IN]
        yield from con.execute(sql.format(",".join("?" * len(part))), part)


def insert_sql(table: Table) -> str:
    """The plain ``INSERT INTO t (cols…) VALUES (?, …)`` for executemany on raw tuples."""
    cols = ", ".join(c.name for c in table.columns)
    marks = ", ".join("?" for _ in table.columns)
    return f"INSERT INTO {table.name} ({cols}) VALUES ({marks})"


def _pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout = 60000")
    cur.execute("PRAGMA cache_size = -262144")  # 256 MiB page cache
    cur.close()


def _engine(creator) -> Engine:
    engine = create_engine("sqlite://", creator=creator, poolclass=NullPool)
    event.listen(engine, "connect", _pragmas)
    return engine


def postgres_url(index: str | Path) -> str | None:
    """The URL when ``index`` names a PostgreSQL database, None for a SQLite path; any other
    URL scheme is refused."""
    value = str(index)
    if pg.is_url(value):
        return value
    scheme, sep, _rest = value.partition("://")
    if sep and scheme.replace("+", "").isalnum():
        raise NearDedupError(f"index {value.split('@')[-1]}: unknown scheme {scheme}://; give a "
                             f"SQLite file path or postgresql://user@host:port/dbname")
    return None


def is_sqlite_file(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(16) == b"SQLite format 3\x00"


def check_index_path(path: Path, input_dirs: list[Path]) -> None:
    """Refuse paths that are not a dedicated index file (SPEC §4 index)."""
    if path.name == "pipeline.db":
        raise NearDedupError(f"index {path}: refusing pipeline.db; the index must be a dedicated file")
    resolved = path.resolve()
    for d in input_dirs:
        try:
            resolved.relative_to(d.resolve())
        except ValueError:
            continue
        raise NearDedupError(f"index {path}: inside input package {d}; packages are immutable")
    for parent in resolved.parents:
        kind = _tool_folder_kind(parent)
        if kind:
            raise NearDedupError(f"index {path}: inside {kind} {parent}; the index must live "
                                 f"outside packages, reports and mixtures")
    if path.exists() and not path.is_file():
        raise NearDedupError(f"index {path}: not a regular file")


_FOLDER_KINDS = {"training-snapshot": "snapshot package", "near-dedup-report": "near-dedup report",
                 "mixture-package": "mixture package"}


def _tool_folder_kind(folder: Path) -> str | None:
    """What ``folder`` is when its manifest.json marks a package, report or mixture."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        fmt = json.loads(manifest.read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        return None
    return _FOLDER_KINDS.get(fmt)


def read_meta(conn) -> dict[str, str]:
    return {k: v for k, v in conn.execute(select(meta.c.key, meta.c.value))}


def check_binding(path: Path, values: dict[str, str], config: NearDedupConfig) -> None:
    """The index must be ours, of our schema, and bound to this config and algorithm."""
    if values.get("format") != FORMAT:
        raise NearDedupError(f"index {path}: not a near-dedup index")
    if values.get("schema_version") != SCHEMA_VERSION:
        raise NearDedupError(f"index {path}: schema version {values.get('schema_version')} "
                             f"is not {SCHEMA_VERSION}; use a new index path")
    if values.get("algorithm_version") != ALGORITHM_VERSION:
        raise NearDedupError(f"index {path}: built with algorithm {values.get('algorithm_version')}, "
                             f"this tool runs {ALGORITHM_VERSION}; use a new index path")
    if values.get("config_fingerprint") != config.fingerprint():
        raise NearDedupError(f"index {path}: bound to a different config (fingerprint "
                             f"{values.get('config_fingerprint', '?')[:12]}…, this config "
                             f"{config.fingerprint()[:12]}…); use a new index path for a new "
                             f"threshold, shingling, limits or rules")


def _read_foreign(path: Path) -> dict[str, str]:
    """meta of an existing file, or an error that it is not a near-dedup index."""
    if not is_sqlite_file(path):
        raise NearDedupError(f"index {path}: exists and is not a near-dedup index (not SQLite)")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT key, value FROM meta").fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError:
        raise NearDedupError(f"index {path}: exists and is not a near-dedup index") from None
    return dict(rows)


def open_readonly(path: Path, config: NearDedupConfig) -> Engine:
    """An engine on an existing index opened with SQLite's read-only URI (never writes)."""
    if not path.is_file():
        raise NearDedupError(f"index {path}: not found; index the inputs first")
    values = _read_foreign(path)
    check_binding(path, values, config)
    uri = f"file:{path.resolve()}?mode=ro"
    return _engine(lambda: sqlite3.connect(uri, uri=True, check_same_thread=False))


def open_writable(path: Path) -> Engine:
    """An engine whose transactions are ``BEGIN IMMEDIATE`` (one writer, others wait up to the
    busy timeout) in WAL mode, so readers such as ``scan`` see the last committed batch."""
    target = str(path)
    engine = _engine(lambda: sqlite3.connect(target, isolation_level=None, check_same_thread=False))

    @event.listens_for(engine, "connect")
    def _wal(dbapi_conn, _record) -> None:
        dbapi_conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # takes effect on a new file only
        dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute("PRAGMA synchronous = NORMAL")

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


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


# --------------------------------------------------------------------------- batch writes


class IndexedPackage(NamedTuple):
    """A package row of the index."""

    rowid: int
    package_id: str
    manifest_sha256: str


class RefTarget(NamedTuple):
    """What a ``ref`` to an indexed sample resolves to."""

    content: int
    text_sha256: bytes
    domain: str | None


class BatchTransaction:
    """The write side of one open batch transaction: every statement ``index`` makes.

    ``BatchTransaction.on(conn)`` gives the one for the connection's backend (SQLite here,
    PostgreSQL in ``PostgresBatch``).

    Rows are plain tuples in the table's column order (``sources``, ``contents``) so that a
    million of them go through ``executemany`` without per-row objects; everything else comes
    back as named records. Nothing is visible to readers until the surrounding transaction
    commits.
    """

    @staticmethod
    def on(conn: Connection) -> BatchTransaction:
        return PostgresBatch(conn) if conn.dialect.name == "postgresql" else BatchTransaction(conn)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._sql_sources = insert_sql(sources)
        self._sql_contents = insert_sql(contents)
        self._sql_bands = insert_sql(bands).replace("INSERT", "INSERT OR IGNORE", 1)

    # -- the index as a whole
    def meta(self) -> dict[str, str]:
        return read_meta(self.conn)

    def set_kind(self, kind: str) -> None:
        self.conn.execute(insert(meta).values(key="kind", value=kind))

    def indexed_packages(self) -> dict[str, IndexedPackage]:
        p = packages.c
        return {pid: IndexedPackage(rowid, pid, sha) for rowid, pid, sha in
                self.conn.execute(select(p.id, p.package_id, p.manifest_sha256))}

    def add_batch(self, created_at: str, tool_version: str, package_ids: list[str]) -> int:
        """A new batch row; returns its sequence number (one more than the last)."""
        seq = (self.conn.execute(select(func.max(batches.c.seq))).scalar() or 0) + 1
        self.conn.execute(insert(batches).values(
            seq=seq, created_at=created_at, tool_version=tool_version,
            packages=orjson.dumps(package_ids).decode()))
        return seq

    def add_package(self, package_id: str, kind: str, manifest_sha256: str, batch: int,
                    records: int, manifest_json: str) -> int:
        return self.conn.execute(insert(packages).values(
            package_id=package_id, kind=kind, manifest_sha256=manifest_sha256, batch=batch,
            records=records, manifest=manifest_json)).inserted_primary_key[0]

    # -- scopes, contents, sources
    def scope_ids(self) -> dict[str, int]:
        return {k: i for i, k in self.conn.execute(select(scopes.c.id, scopes.c.scope_key))}

    def add_scope(self, scope_key: str, label: str) -> int:
        return self.conn.execute(insert(scopes).values(scope_key=scope_key, label=label)
                                 ).inserted_primary_key[0]

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

    def add_sources(self, rows: list[tuple]) -> None:
        """``sources`` rows: (None, content, package, sample_id, split, file, line, position,
        text_sha256, domain, source JSON)."""
        self.conn.exec_driver_sql(self._sql_sources, rows)

    def add_dictionary(self, batch: int, data: bytes) -> int:
        return self.conn.execute(insert(dictionaries).values(batch=batch, data=data)
                                 ).inserted_primary_key[0]

    def add_contents(self, rows: list[tuple]) -> None:
        """``contents`` rows: (rowid, content_id, scope, batch, norm_chars, shingles,
        signature, text_z, dictionary)."""
        self.conn.exec_driver_sql(self._sql_contents, rows)

    def add_bands(self, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        """Band rows, given sorted by (key, content) so the B-tree fills front to back."""
        step = 1 << 20
        for i in range(0, len(keys), step):
            self.conn.exec_driver_sql(self._sql_bands, list(zip(
                keys[i:i + step].tolist(), content_rowids[i:i + step].tolist())))


class PostgresBatch(BatchTransaction):
    """The batch writes on PostgreSQL: bulk rows by ``COPY``, lookups by ``= ANY(array)``."""

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        return pg.known_contents(self.conn, content_ids)

    def add_sources(self, rows: list[tuple]) -> None:
        pg.copy_rows(self.conn, "sources", _SOURCE_COLUMNS[1:], (r[1:] for r in rows))

    def add_contents(self, rows: list[tuple]) -> None:
        pg.copy_rows(self.conn, "contents", _CONTENT_COLUMNS, rows)

    def add_bands(self, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        pg.copy_bands(self.conn, keys, content_rowids)


_SOURCE_COLUMNS = tuple(c.name for c in sources.columns)
_CONTENT_COLUMNS = tuple(c.name for c in contents.columns)
