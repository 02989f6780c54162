"""What writes a SQLite index: the writer's lock file, the connections of a batch (WAL mode,
``BEGIN IMMEDIATE``), and the life of a brand-new index, built in a staged sibling file and
renamed into place after its first batch commits (`sqlite_batch`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.pool import NullPool

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.batch import BatchTransaction
from near_dedup_core.index_store.invariants import quick_check, sqlite_background_check
from near_dedup_core.index_store.schema import create_schema
from near_dedup_core.index_store.sqlite.snapshot import (
    BUSY_TIMEOUT_ENV,
    DEFAULT_BUSY_TIMEOUT,
    check_binding,
    connect_reader,
    raise_if_damaged,
    read_foreign,
    sqlite_errors,
)
from near_dedup_core.index_store.texts import CACHE_SIZE

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig

def _pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout = 60000")
    cur.execute(f"PRAGMA cache_size = {CACHE_SIZE}")
    cur.close()


def _interruption_is_no_disconnect(context: ExceptionContext) -> None:
    """A statement interrupted by an exception that is not an ``Exception`` (the CLI's
    SIGTERM, Ctrl-C) leaves the connection as sound as any failed statement: close the
    statement's cursor, and roll back and close as for any error.

    SQLAlchemy takes such an exception for a lost connection and drops the connection
    without closing the cursor, which the exception's traceback keeps (in a reference
    cycle). A SQLite connection closed with a statement still open stays open, holding its
    lock and the index's -wal and -shm files, until that statement is freed; a terminated
    command leaves (``os._exit``) before that, and the two files stay beside the index."""
    if not isinstance(context.original_exception, Exception):
        context.is_disconnect = False


def _engine(creator) -> Engine:
    engine = create_engine("sqlite://", creator=creator, poolclass=NullPool)
    event.listen(engine, "connect", _pragmas)
    event.listen(engine, "handle_error", _interruption_is_no_disconnect)
    return engine


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
        try:  # an interruption (SIGTERM) while the lock is taken still releases it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _is_current(fd, lock_path):
                break
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise NearDedupError(
                    f"index {path}: busy, another near-dedup index run holds it "
                    f"(waited {timeout:g}s); try again when it has finished") from None
            time.sleep(0.1)
            continue
        except BaseException:
            _release_lock(fd, lock_path)
            raise
        os.close(fd)  # locked a file its previous holder has removed: lock the current one
    try:
        yield
    finally:
        _release_lock(fd, lock_path)


def _release_lock(fd: int, lock_path: Path) -> None:
    """Remove the lock file and unlock it: the file is removed while it is still locked (if
    ``fd`` holds it), so no one else can own it yet; a file ``fd`` does not hold is left."""
    if _is_current(fd, lock_path):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours already, or free
        except BlockingIOError:
            os.close(fd)  # another holder's
            return
        lock_path.unlink(missing_ok=True)
    os.close(fd)


def _is_current(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)



def _missing_dirs(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_db_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = path.with_name(path.name + suffix)
        if p.exists():
            p.unlink()


#: What a batch turns into the damage line when SQLite's ``quick_check`` then finds the index
#: damaged: values that pages of garbage give when SQLite reads them without noticing.
_GARBAGE_VALUES = (LookupError, ValueError, TypeError, AttributeError)


@contextmanager
def sqlite_batch(path: Path, config: NearDedupConfig, created_at: str
                 ) -> Iterator[BatchTransaction]:
    """One batch on the SQLite index at ``path``, under the writer's lock (`writer_lock`):
    the open transaction of an existing index (checked to be bound to ``config``, upgraded
    by `BatchTransaction.upgrade_schema` if need be), or, for a new index, the first
    transaction of a staged sibling file, renamed into place when the block leaves without
    error and added a batch (`BatchTransaction.add_batch`); on any error nothing changes, and
    the folders made for the index are removed again."""
    created = _missing_dirs(path.parent)
    try:
        with writer_lock(path), sqlite_errors(path):
            try:
                with _existing_batch(path, config) if path.exists() else \
                        _new_batch(path, config, created_at) as store:
                    yield store
            except _GARBAGE_VALUES as exc:
                if path.is_file():
                    raise_if_damaged(path, exc)
                raise
    except BaseException:
        if path.is_file():
            settle_side_files(path)
        for folder in created:  # made for this batch, which failed: leave no trace of it
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


#: Seconds a failed batch waits for the other processes of its command (killed workers that
#: read the index) to let go of the index before it removes the -wal and -shm files.
SETTLE_SECONDS = 2.0


def settle_side_files(path: Path, seconds: float = SETTLE_SECONDS) -> None:
    """Leave the index at ``path`` without its ``-wal`` and ``-shm`` files after a failed
    batch, as before it: SQLite removes them when the last connection closes, which may be a
    worker's that dies after this process closed its own (a terminated command kills its
    pool). Open and close a connection until it is the last one (the -wal file goes), for at
    most ``seconds``; a live reader of another command keeps them, as it should."""
    wal = path.with_name(path.name + "-wal")
    deadline = time.monotonic() + seconds
    while wal.exists():
        try:
            con = sqlite3.connect(str(path), isolation_level=None)
            try:
                con.execute("PRAGMA schema_version").fetchone()
            finally:
                con.close()
        except sqlite3.Error:
            return
        if not wal.exists() or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


@contextmanager
def _existing_batch(path: Path, config: NearDedupConfig) -> Iterator[BatchTransaction]:
    values = read_foreign(path)
    check_binding(path, values, config, writing=True)
    engine = open_writable(path)
    pages = None
    try:
        with engine.begin() as conn:  # BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any error
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None
            quick_check(path, dbapi.execute)  # the index the batch extends is sound …
            # … up to its pages and content rows, checked meanwhile
            pages = sqlite_background_check(path, connect_reader, config.min_chars)
            with pages.explains_failures():
                yield BatchTransaction(conn, str(path.resolve()))
            pages.result()
    finally:
        if pages is not None:
            pages.close()
        engine.dispose()


@contextmanager
def _new_batch(path: Path, config: NearDedupConfig, created_at: str
               ) -> Iterator[BatchTransaction]:
    # under the writer lock any temporary sibling is left over from a killed first batch
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        stale.unlink()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    engine = open_writable(tmp, staged=True)  # no journal: on any failure it is deleted
    try:
        create_schema(engine, config, created_at)
        with engine.begin() as conn:
            store = BatchTransaction(conn, None)
            yield store
        engine.dispose()
        if store.seq is not None:
            publish_staged(tmp, path)
    finally:
        engine.dispose()
        _remove_db_files(tmp)
