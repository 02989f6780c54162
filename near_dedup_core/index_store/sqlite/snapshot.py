"""Every read of a scan, from one state of the index (`IndexSnapshot`), on a plain
``sqlite3`` connection: what `scan` needs of the index, without SQLAlchemy.

Also here, because a scan and a batch both use them: the connection that reads and writes
nothing (`connect_reader`) and the one-line errors of SQLite (`sqlite_errors`). The
snapshot implements `protocols.Snapshot`; the PostgreSQL snapshot
(`postgres.PostgresSnapshot`) subclasses it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Self

import numpy as np
import orjson

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.common import (
    BAND_TABLES,
    check_binding,
    longest_run,
    package_sources_error,
)
from near_dedup_core.index_store.invariants import (
    BANDS_MERGED_THROUGH,
    MISSING_SCOPE,
    SIGNATURE_MISMATCH,
    BackgroundCheck,
    quick_check,
    sqlite_background_check,
)
from near_dedup_core.index_store.records import (
    BandHits,
    ContentColumns,
    ContentSource,
    ContentSplit,
    IndexCounts,
    IndexedPackage,
    OutsideSource,
)
from near_dedup_core.index_store.texts import (
    SQL_IN,
    IndexTexts,
    ReadConnection,
    damaged,
    rows_in,
    uri_path,
)

if TYPE_CHECKING:  # a scan's reads need only the config's values
    from concurrent.futures import Executor

    from near_dedup_core.config import NearDedupConfig

BUSY_TIMEOUT_ENV = "NEAR_DEDUP_BUSY_TIMEOUT"
DEFAULT_BUSY_TIMEOUT = 30.0


def is_sqlite_file(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(16) == b"SQLite format 3\x00"



def _is_wal(path: Path) -> bool:
    """Whether the SQLite file at ``path`` is in WAL mode (header bytes 18-19 are 2)."""
    with open(path, "rb") as fh:
        header = fh.read(20)
    return len(header) == 20 and header[18] == 2 and header[19] == 2


_WRITES = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE,
           sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_DROP_TABLE,
           sqlite3.SQLITE_DROP_INDEX, sqlite3.SQLITE_ALTER_TABLE, sqlite3.SQLITE_CREATE_VIEW,
           sqlite3.SQLITE_CREATE_TRIGGER}


def _no_writes_to_main(action: int, _arg1, _arg2, dbname, _trigger) -> int:
    if action in _WRITES and dbname == "main":
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def connect_reader(path: Path) -> sqlite3.Connection:
    """A connection that reads the index at ``path`` and leaves its directory as it was.

    SQLite readers of a WAL-mode file need its ``-wal``/``-shm`` side files; a connection opened
    with ``mode=ro`` creates them but may not remove them, so every read would leave two files
    behind. Instead a WAL-mode index is opened ``mode=rw`` (never created) with an authorizer
    that denies any write to it: when the last connection closes, SQLite checkpoints (nothing
    to copy when no writer is active) and removes the side files, as a writer does. If the
    directory cannot be written, no writer can be active either (it could not create the
    ``-shm`` file), and the file is opened ``immutable=1``: read without locks or side files.
    Files not in WAL mode (foreign SQLite files) are opened ``mode=ro``, which creates nothing.
    SQLite's ``json_each`` table (`IndexSnapshot.history_band_hits`) is usable on it.
    """
    if not _is_wal(path):
        uri = f"file:{uri_path(path)}?mode=ro"
    elif not _dir_writable(path.parent) and not path.with_name(path.name + "-shm").exists():
        uri = f"file:{uri_path(path)}?immutable=1"
    else:
        uri = f"file:{uri_path(path)}?mode=rw"
    con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        # the first use of SQLite's `json_each` on a connection declares its columns, which
        # SQLite authorizes as writes to `sqlite_master`: done before the authorizer, it stays
        # connected
        con.execute("SELECT 1 FROM json_each('[]')").fetchall()
        con.set_authorizer(_no_writes_to_main)
        con.execute("PRAGMA busy_timeout = 60000")
    except BaseException:  # a damaged file: only a closed connection removes its side files
        con.close()
        raise
    return con


def _dir_writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def read_foreign(path: Path) -> dict[str, str]:
    """meta of an existing file, or an error that it is not a near-dedup index."""
    if not is_sqlite_file(path):
        raise NearDedupError(f"index {path}: exists and is not a near-dedup index (not SQLite)")
    try:
        con = connect_reader(path)
        try:
            tables = {name for (name,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "meta" not in tables:
                raise NearDedupError(f"index {path}: exists and is not a near-dedup index")
            rows = con.execute("SELECT key, value FROM meta").fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise database_error(path, exc) from None
    return dict(rows)


# --------------------------------------------------------------------------- errors


def database_error(path: Path, exc: BaseException) -> NearDedupError:
    """The one-line error for a SQLite failure on the index at ``path``.

    Damage (``database disk image is malformed``, ``file is not a database``) points at a
    backup and at ``index check``; a full disk or file-size limit says that nothing changed
    (a batch is one transaction, rolled back; a first batch's temporary file is removed)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT_") \
            or "malformed" in msg or "not a database" in msg:
        return damaged(path, msg)
    if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk is full" in msg \
            or "disk I/O error" in msg:
        return NearDedupError(f"index {path}: cannot write ({msg}: out of disk space or over "
                              f"the file-size limit); nothing was changed")
    if name.startswith("SQLITE_BUSY") or "database is locked" in msg:
        return NearDedupError(f"index {path}: busy ({msg}); try again when the other "
                              f"near-dedup run has finished")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM")) \
            or "unable to open" in msg or "readonly" in msg:
        return NearDedupError(f"index {path}: cannot be opened or written ({msg}); SQLite needs "
                              f"to read the file and to create its -wal/-shm files in "
                              f"{path.parent}")
    return NearDedupError(f"index {path}: SQLite error ({msg})")


def raise_if_damaged(path: Path, exc: BaseException) -> None:
    """After ``exc`` (an unexpected value while reading the index): if SQLite's
    ``quick_check`` finds the index damaged, raise the one-line damage error instead (pages
    whose garbage SQLite reads without noticing give such values); otherwise return, and the
    caller re-raises ``exc``."""
    try:
        con = connect_reader(path)
        try:
            problems = [row[0] for row in con.execute("PRAGMA quick_check(1)")]
        finally:
            con.close()
    except sqlite3.Error as err:
        raise damaged(path, " ".join(str(err).split())) from None
    if problems != ["ok"]:
        raise damaged(path, f"{type(exc).__name__} while reading it; SQLite quick_check: "
                            f"{' '.join(problems[0].split())}") from None


@contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """Turn SQLite errors (raw, or wrapped by SQLAlchemy) inside the block into one line
    naming the index ``path``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise database_error(path, exc) from None
    except Exception as exc:
        wrapped = _sqlalchemy_dbapi_error()
        if wrapped is None or not isinstance(exc, wrapped):
            raise
        orig = getattr(exc, "orig", None)
        raise database_error(path, orig if isinstance(orig, sqlite3.Error) else exc) from None


def _sqlalchemy_dbapi_error() -> type[Exception] | None:
    """SQLAlchemy's wrapper of driver errors, if this process has loaded SQLAlchemy (a scan
    does not: nothing can then raise it)."""
    exc = sys.modules.get("sqlalchemy.exc")
    return None if exc is None else exc.DBAPIError


# --------------------------------------------------------------------------- reading



class IndexSnapshot(IndexTexts):
    """Every read of a scan, from ONE state of the index.

    One connection holds one read transaction from :meth:`open` to :meth:`close`: in WAL mode
    ``BEGIN`` plus a first read pins the snapshot, and batches committed meanwhile by ``index``
    stay invisible to it (they are appended to the WAL; SQLite does not checkpoint past a
    reader's snapshot). So the pool, the history candidates and the report's ``match_sources``
    all describe the same index. The connection never writes the index (see
    :func:`connect_reader`); lookups over many ids use temporary tables, which live in the
    connection's own temp database.

    The methods take and return plain values and named records, not SQL or connections, so
    another backend can implement the same reads."""

    #: `protocols.Snapshot.join_executor`: SQLite and PostgreSQL join in their database and
    #: ignore it.
    join_executor: Executor | None = None

    def __init__(self, path: Path | str, con: ReadConnection,
                 config: NearDedupConfig | None = None) -> None:
        super().__init__(path, con)
        self._signature_bytes = None if config is None else 2 * config.num_perm
        self._min_chars = None if config is None else config.min_chars
        self._scope_ids: np.ndarray | None = None
        #: SQLite's page check, beside the scan (`verify_pages`)
        self._pages: BackgroundCheck | None = None

    @classmethod
    def open(cls, path: Path, config: NearDedupConfig | None = None) -> IndexSnapshot:
        """Open the index at ``path`` (checked to be ours and bound to ``config`` when given)
        and pin its current state."""
        if not path.is_file():
            raise NearDedupError(f"index {path}: not found; index the inputs first")
        with sqlite_errors(path):
            values = read_foreign(path)
            if config is not None:
                check_binding(path, values, config)
            con = connect_reader(path)
            try:
                con.execute("PRAGMA temp_store = MEMORY")
                con.execute("PRAGMA cache_size = -262144")  # 256 MiB page cache
                con.execute("BEGIN")
                con.execute("SELECT COUNT(*) FROM meta").fetchone()  # pins the snapshot
                quick_check(path, con.execute)
            except BaseException:
                con.close()
                raise
        snap = cls(path, con, config)
        snap._pages = sqlite_background_check(path, connect_reader)
        return snap

    def verify_pages(self) -> None:
        """Wait for the check of the index's pages that runs beside the scan
        (`invariants.BackgroundCheck`): the damage line if one is damaged. Called before anything
        read from the snapshot is published."""
        if self._pages is not None:
            pages, self._pages = self._pages, None
            pages.result()

    def close(self) -> None:
        if self._pages is not None:
            self._pages.close()
        self._con.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what the index holds
    def meta(self) -> dict[str, str]:
        return dict(self._con.execute("SELECT key, value FROM meta"))

    def indexed_packages(self) -> list[IndexedPackage]:
        """Every indexed package in (batch, package_id) order."""
        return [IndexedPackage(*row) for row in self._con.execute(
            "SELECT id, package_id, kind, manifest_sha256, batch, records FROM packages "
            "ORDER BY batch, package_id")]

    def counts(self) -> IndexCounts:
        batches = self._con.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
        contents_ = self._con.execute("SELECT MAX(id) FROM contents").fetchone()[0] or 0
        return IndexCounts(batches, contents_)

    def scope_labels(self) -> dict[int, str]:
        return dict(self._con.execute("SELECT id, label FROM scopes"))

    # -- the pool
    def pool_samples(self, package: IndexedPackage, batch: int = 1 << 16
                     ) -> Iterator[list[tuple]]:
        """(sample_id, split, content) of one package's samples in package order, as plain
        tuples in lists of up to ``batch``: the least a scan needs before it can compare, so
        that a million samples load without a million records (`package_column` reads any
        other column in the same order). Fewer or more rows than the package's records: the
        index is damaged."""
        cur = self._con.execute(
            "SELECT sample_id, split, content FROM sources WHERE package = ? ORDER BY position",
            (package.rowid,))
        count = 0
        while rows := cur.fetchmany(batch):
            count += len(rows)
            yield rows
        if count != package.records:
            raise package_sources_error(self.path, package.package_id, count, package.records)

    def sample_rows(self, package: IndexedPackage, batch: int = 1 << 16
                    ) -> Iterator[list[tuple]]:
        """(position, sample_id, split, file, line, domain, content) of one package's samples
        in package order, in lists of up to ``batch``: where each sample is and what it
        holds (`contamination` over an indexed pool)."""
        cur = self._con.execute(
            "SELECT position, sample_id, split, file, line, domain, content FROM sources "
            "WHERE package = ? ORDER BY position", (package.rowid,))
        while rows := cur.fetchmany(batch):
            yield rows

    def sample_location(self, package: IndexedPackage, nth: int) -> tuple[str, int]:
        """(file, line) of the ``nth`` sample (0-based, package order) of one package."""
        return self._con.execute(
            "SELECT file, line FROM sources WHERE package = ? ORDER BY position LIMIT 1 "
            "OFFSET ?", (package.rowid, nth)).fetchone()

    def content_columns(self, ids: np.ndarray) -> ContentColumns:
        """Content rows of these ids as columns, by ascending row id. The ids come from
        sources or bands, so every one exists and every signature has ``num_perm`` values;
        otherwise the index is damaged (pages that SQLite reads without noticing the damage).
        So it is when a content names a scope that does not exist, or has a signature when
        its text is under ``min_chars`` or none when it is not. A slice of consecutive ids (the contents a batch added, as most of a pool's are) is read as one range, the
        others by their id lists (1.1–1.8 s against 1.4–2.9 s for 976,001 ids)."""
        ids = np.sort(np.asarray(ids, dtype=np.int64))
        ids = ids[np.concatenate(([True], ids[1:] != ids[:-1]))] if len(ids) else ids
        n = len(ids)
        width = self._signature_bytes
        content_id: list[bytes] = []
        scope = np.zeros(n, dtype=np.int64)
        batch = np.zeros(n, dtype=np.int64)
        shingles = np.full(n, -1, dtype=np.int64)
        has_signature = np.zeros(n, dtype=bool)
        signatures: np.ndarray | None = None
        norm_chars = np.zeros(n, dtype=np.int64)
        columns = ("SELECT content_id, scope, batch, shingles, signature, norm_chars "
                   "FROM contents WHERE")
        for i in range(0, n, SQL_IN):
            part = ids[i:i + SQL_IN].tolist()
            if part[-1] - part[0] + 1 == len(part):  # consecutive row ids: one range read
                rows = self._con.execute(f"{columns} id BETWEEN ? AND ? ORDER BY id",
                                         (part[0], part[-1])).fetchall()
            else:
                rows = self._con.execute(f"{columns} id IN ({','.join('?' * len(part))}) "
                                         f"ORDER BY id", part).fetchall()
            if len(rows) != len(part):
                raise damaged(self.path, f"{len(part) - len(rows):,} content rows are missing")
            cid, sc, bt, sh, sig, chars = zip(*rows, strict=True)
            content_id.extend(cid)
            end = i + len(part)
            norm_chars[i:end] = chars
            scope[i:end] = sc
            batch[i:end] = bt
            shingles[i:end] = [-1 if x is None else x for x in sh]
            present = [x is not None for x in sig]
            has_signature[i:end] = present
            found = [x for x in sig if x is not None]
            if not found:
                continue
            if width is None:
                width = len(found[0])
            if any(len(x) != width for x in found):
                raise damaged(self.path, "a content signature has the wrong length")
            if signatures is None:
                signatures = np.zeros((n, width // 2), dtype=np.uint16)
            signatures[i:end][np.asarray(present)] = np.frombuffer(
                b"".join(found), dtype=np.uint16).reshape(len(found), width // 2)
        if signatures is None:
            signatures = np.zeros((n, (width or 2) // 2), dtype=np.uint16)
        long = norm_chars >= self._min_chars if self._min_chars is not None else \
            np.zeros(n, dtype=bool)
        self._check_columns(scope, has_signature, long)
        return ContentColumns(ids, [bytes(c) for c in content_id], scope, batch, shingles,
                              signatures, has_signature, norm_chars)

    def _check_columns(self, scope: np.ndarray, has_signature: np.ndarray,
                       long: np.ndarray) -> None:
        """`content_columns`' checks of what its rows name and hold (see `index check`)."""
        if self._scope_ids is None:
            self._scope_ids = np.fromiter((i for (i,) in self._con.execute(
                "SELECT id FROM scopes")), dtype=np.int64)
        if not np.isin(scope, self._scope_ids).all():
            raise damaged(self.path, MISSING_SCOPE)
        if self._min_chars is not None and not np.array_equal(has_signature, long):
            raise damaged(self.path, SIGNATURE_MISMATCH)

    def content_splits(self, ids: list[int]) -> list[ContentSplit]:
        """The distinct (content, split) pairs the index holds sources of, for these ids."""
        return [ContentSplit(*row) for row in rows_in(
            self._con, "SELECT DISTINCT content, split FROM sources WHERE content IN ({})", ids)]

    # -- history
    def history_band_hits(self, keys: np.ndarray, pool_contents: list[int],
                          pool_nodes: set[tuple[int, str]]) -> BandHits:
        """Band rows with one of ``keys`` (distinct, sorted) whose content is outside the pool.

        A pool content (one of ``pool_contents``) is history too when the index holds a source
        of it in a split where it is not in the pool (``pool_nodes`` are the pool's
        (content, split) pairs). The keys reach SQLite as JSON arrays of `PROBE_KEYS`
        (``json_each``, built into SQLite since 3.38): the join walks the band B-tree in key
        order, one search per key, without a temporary table of a million keys to fill
        first (1.2·10^6 keys: 0.01–0.03 s to render against 0.30–0.40 s to insert). The
        pool's contents go into a temporary table, and the longest run of consecutive row ids
        among them (the contents the pool's own batch added, as a rule) is tested first as
        a range: the pool finds its own band rows under each of its keys, and a comparison
        drops them where a lookup per row did. When no content is after
        ``meta.bands_merged_through``, or those after it are all in that run (the pool is the
        index's newest batch, and its rows are the whole of ``bands_recent``),
        ``bands_recent`` holds nothing to find and is not probed."""
        con = self._con
        # SQLite's join (`postgres.PostgresSnapshot` joins on its own connections)
        assert isinstance(con, sqlite3.Connection)
        con.execute("CREATE TEMP TABLE scan_contents (id INTEGER PRIMARY KEY)")
        try:
            _fill_temp(con, "scan_contents", list(pool_contents))
            mixed = sorted({c for c, split in con.execute(
                "SELECT DISTINCT s.content, s.split FROM temp.scan_contents t "
                "JOIN main.sources s ON s.content = t.id") if (c, split) not in pool_nodes})
            con.executemany("DELETE FROM temp.scan_contents WHERE id = ?", ((c,) for c in mixed))
            tables, lo, hi = self._band_tables_to_probe(pool_contents, mixed)
            # CROSS JOIN keeps the probe keys outside: one B-tree search per key in key order
            # (left to the planner, SQLite scans all of bands and probes the keys instead)
            sql = " UNION ALL ".join(
                f"SELECT b.key, b.content FROM json_each(?1) q CROSS JOIN main.{table} b "
                f"ON b.key = q.value WHERE b.content NOT BETWEEN ?2 AND ?3 "
                f"AND b.content NOT IN (SELECT id FROM temp.scan_contents)"
                for table in tables)
            keys = np.ascontiguousarray(keys, dtype=np.int64)
            rows: list[tuple[int, int]] = []
            for i in range(0, len(keys), PROBE_KEYS):
                part = orjson.dumps(keys[i:i + PROBE_KEYS], option=orjson.OPT_SERIALIZE_NUMPY)
                rows += con.execute(sql, (part.decode(), lo, hi)).fetchall()
        finally:
            con.execute("DROP TABLE temp.scan_contents")
        found = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
        return BandHits(found[:, 0], found[:, 1])

    def _band_tables_to_probe(self, pool_contents: Sequence[int],
                              mixed: Iterable[int]) -> tuple[list[str], int, int]:
        """The band tables that can hold history rows, and ``lo``..``hi``, the longest run of
        consecutive row ids among the pool's contents outside the history (``pool_contents``
        less ``mixed``): ``bands_recent`` holds the rows of the contents after
        ``meta.bands_merged_through``, so it holds none to find when there are no such
        contents, or when they are all in that run (the pool is the index's newest batch)."""
        lo, hi = longest_run(np.setdiff1d(np.asarray(pool_contents, dtype=np.int64),
                                          np.fromiter(mixed, dtype=np.int64)))
        merged, newest = int(self.meta()[BANDS_MERGED_THROUGH]), self.counts().contents
        nothing_recent = newest <= merged or (lo <= merged + 1 and hi >= newest)
        return ["bands"] if nothing_recent else list(BAND_TABLES), lo, hi

    # -- the report
    def outside_sources(self, contents_: list[int],
                        pool_package_ids: set[str]) -> list[OutsideSource]:
        """Sources of these contents in packages other than ``pool_package_ids``."""
        out = []
        for row in rows_in(
                self._con, "SELECT s.content, p.package_id, s.sample_id, s.split FROM sources s "
                           "JOIN packages p ON p.id = s.package WHERE s.content IN ({})",
                contents_):
            if row[1] not in pool_package_ids:
                out.append(OutsideSource(*row))
        return out

    # -- provenance (`index find`)
    def scope_keys(self) -> dict[int, str]:
        return dict(self._con.execute("SELECT id, scope_key FROM scopes"))

    def batch_dates(self) -> dict[int, str]:
        return dict(self._con.execute("SELECT seq, created_at FROM batches"))

    def content_rows(self, content_ids: list[bytes]) -> dict[bytes, int]:
        return {bytes(c): i for c, i in rows_in(
            self._con, "SELECT content_id, id FROM contents WHERE content_id IN ({})",
            sorted(set(content_ids)))}

    def content_sources(self, ids: list[int]) -> list[ContentSource]:
        rows = [ContentSource(c, p, s, split, bytes(sha), d) for c, p, s, split, sha, d in rows_in(
            self._con, "SELECT content, package, sample_id, split, text_sha256, domain "
                       "FROM sources WHERE content IN ({})", sorted(set(ids)))]
        return sorted(rows)


def _fill_temp(con: sqlite3.Connection, table: str, values: list[int], rows: int = 500) -> None:
    """Insert one-column rows into ``temp.<table>``, ``rows`` per statement (a third of the
    cost of one statement per row)."""
    full = len(values) // rows * rows
    if full:
        sql = f"INSERT INTO temp.{table} VALUES " + ",".join(["(?)"] * rows)
        con.executemany(sql, (values[i:i + rows] for i in range(0, full, rows)))
    if full < len(values):
        con.execute(f"INSERT INTO temp.{table} VALUES " + ",".join(["(?)"] * (len(values) - full)),
                    values[full:])


#: Probe keys per statement of `IndexSnapshot.history_band_hits` (a JSON array of about 1.3 MB).
PROBE_KEYS = 1 << 16


#: `read_ahead` asks for an index file only when it takes at most this share of the memory
#: available (the rest of the machine keeps its page cache).
READ_AHEAD_SHARE = 0.5


def read_ahead(index: Path) -> bool:
    """Ask the kernel to read a SQLite index file into its page cache in the background
    (``posix_fadvise`` WILLNEED), when the file takes at most `READ_AHEAD_SHARE` of the
    memory available; whether it asked. Nothing waits for it.

    A scan reads pages all over the file (the pool's sources and contents, the band B-trees,
    the candidates' texts). From a cold page cache SQLite reads them one page at a time, each
    a synchronous disk read, while the kernel reads a hinted file in large requests: at a time
    when the disk answered slowly, a 1M pool's samples and contents
    (`IndexSnapshot.pool_samples`, `content_columns`) took 44.6 s to load after the file had
    left the cache, 5.0 s after the hint; when it answers fast, both take the warm cache's time
    (``bench.cold_index``). The verify workers' texts come from the same cache. A batch
    appended to the index reads a small part of it (raw-text and content-id keys), so `index`
    does not ask: a cumulative snapshot took 29.0 s with the hint, 25.8 s without."""
    if not hasattr(os, "posix_fadvise"):
        return False
    try:
        fd = os.open(index, os.O_RDONLY)
    except OSError:
        return False
    try:
        available = _available_memory()
        if available is None or os.fstat(fd).st_size > READ_AHEAD_SHARE * available:
            return False
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _available_memory() -> int | None:
    """Bytes of memory available to new work (``MemAvailable``: free memory and page cache
    that can be reclaimed), or None where the system does not say."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
