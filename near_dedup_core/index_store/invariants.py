"""The invariants of an index that every scan and every append verifies before it relies on
them (`quick_check`), at the cost of a few index probes: `index check` verifies them first,
with the same one-line messages, then everything else (`check`).

What a scan or an append relies on, and how it is verified cheaply:

- the binding rows of ``meta`` (and ``kind`` once a batch exists): key look-ups;
- ``packages`` rows are exactly the packages that the ``batches`` rows list, each in its
  batch: both tables are small;
- every package's samples are indexed: the ``sources`` rows number the packages' ``records``
  (SQLite counts a table from its B-tree's page headers; the scan also counts each pool
  package's rows as it reads them, `IndexSnapshot.pool_samples`);
- no content row is missing: content row ids are assigned by the batches, 1 to the highest
  without gaps, so their count is the highest id;
- every content a scan reads names an existing scope and has a signature exactly when its
  text has ``min_chars`` characters or more: checked on the rows the scan reads
  (`IndexSnapshot.content_columns`);
- SQLite's pages: ``PRAGMA quick_check`` beside the scan or the batch, and beside a batch
  the scopes and signatures of all contents (`BackgroundCheck`), waited for before a report
  is published or a batch committed.

Plain ``sqlite3`` or `postgres.QmarkConnection` statements: no SQLAlchemy, no pydantic.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.texts import damaged

#: meta key: the content row id up to which band rows are in ``bands`` (see `write_bands`).
BANDS_MERGED_THROUGH = "bands_merged_through"
#: The schema before ``bands_recent``: not read by this tool, but upgraded in place by the
#: next batch (`BatchTransaction.upgrade_schema`), inside that batch's transaction.
UPGRADABLE_SCHEMA = "2"
REQUIRED_META = ("format", "schema_version", "algorithm_version", "config_fingerprint",
                 "config", "created_at", BANDS_MERGED_THROUGH)


def restore(label: Path | str, what: str) -> NearDedupError:
    """The one line for an index whose rows break an invariant."""
    return NearDedupError(f"index {label}: {what}; restore it from a backup")


def check_meta_keys(label: Path | str, values: dict[str, str], batches: int | None = None
                    ) -> None:
    """The binding rows are present (``kind`` too once ``batches`` > 0; an index of the
    `UPGRADABLE_SCHEMA` has no ``bands_merged_through`` yet) and
    ``bands_merged_through`` is a row id."""
    required = [k for k in REQUIRED_META if not (
        k == BANDS_MERGED_THROUGH and values.get("schema_version") == UPGRADABLE_SCHEMA)]
    if batches:
        required.append("kind")
    missing = [k for k in required if k not in values]
    if missing:
        raise restore(label, f"meta lacks {', '.join(missing)}")
    merged = values.get(BANDS_MERGED_THROUGH)
    if merged is not None and not merged.isdigit():
        raise restore(label, f"meta {BANDS_MERGED_THROUGH} is not a row id")


def check_batch_packages(label: Path | str, batches: Iterable[tuple[int, str]],
                         packages: Iterable[tuple[str, int]]) -> None:
    """The ``packages`` rows (package_id, batch) are exactly the packages that the
    ``batches`` rows (seq, JSON list of package ids) list, each in its batch."""
    listed: dict[str, int] = {}
    for seq, ids in batches:
        try:
            names = orjson.loads(ids)
        except orjson.JSONDecodeError:
            raise restore(label, f"batch {seq} lists its packages as {ids!r}") from None
        for package_id in names:
            listed[str(package_id)] = seq
    held = dict(packages)
    if held != listed:
        gone = sorted(listed.keys() - held.keys())
        if gone:
            raise restore(label, f"no packages row for {gone[0]}, which batch "
                                 f"{listed[gone[0]]} added")
        extra = sorted(held.keys() - listed.keys())
        if extra:
            raise restore(label, f"packages row {extra[0]} is in no batch's list")
        moved = sorted(k for k in held if held[k] != listed[k])
        raise restore(label, f"packages row {moved[0]} names batch {held[moved[0]]}, batch "
                             f"{listed[moved[0]]} added it")


def quick_check(label: Path | str, execute: Callable[..., Any]) -> None:
    """The cheap invariants (module doc) on the connection whose ``execute(sql)`` is given,
    inside the caller's transaction; raises the one-line error of the first broken one."""
    values = dict(execute("SELECT key, value FROM meta").fetchall())
    (batches,) = execute("SELECT COUNT(*) FROM batches").fetchone()
    check_meta_keys(label, values, batches)
    rows = execute("SELECT package_id, batch, records FROM packages").fetchall()
    check_batch_packages(label, execute("SELECT seq, packages FROM batches").fetchall(),
                         [(package_id, batch) for package_id, batch, _records in rows])
    records = sum(r for *_, r in rows)
    (sources,) = execute("SELECT COUNT(*) FROM sources").fetchone()
    if sources != records:
        raise restore(label, f"the index holds {sources:,} sources, its packages "
                             f"{records:,} records")
    (count,) = execute("SELECT COUNT(*) FROM contents").fetchone()
    (top,) = execute("SELECT MAX(id) FROM contents").fetchone()
    if count != (top or 0):
        raise damaged(label, f"{(top or 0) - count:,} content rows are missing")


def check_pages(path: Path, con: sqlite3.Connection) -> None:
    """SQLite's ``PRAGMA quick_check`` of the whole file: the damage line for a bad page."""
    problems = [row[0] for row in con.execute("PRAGMA quick_check(1)")]
    if problems != ["ok"]:
        raise damaged(path, f"SQLite quick_check: {' '.join(problems[0].split())}")


#: The damage lines of content rows that name a missing scope, or whose signature does not
#: match their length (a signature exactly when ``norm_chars`` ≥ ``min_chars``).
MISSING_SCOPE = "a content names a missing scope"
SIGNATURE_MISMATCH = "a content's signature does not match its length (min_chars)"


def check_content_rows(label: Path | str, execute: Callable[..., Any], min_chars: int) -> None:
    """Every content names an existing scope and has a signature exactly when its text has
    ``min_chars`` characters or more: one pass over ``contents`` (`index check` and, beside
    its work, an append)."""
    scopes = ",".join(str(i) for (i,) in execute("SELECT id FROM scopes").fetchall()) or "0"
    mismatched, unscoped = execute(
        f"SELECT COALESCE(SUM(CASE WHEN (signature IS NULL) = (norm_chars >= {int(min_chars)}) "
        f"THEN 1 ELSE 0 END), 0), COALESCE(SUM(CASE WHEN scope NOT IN ({scopes}) THEN 1 "
        f"ELSE 0 END), 0) FROM contents").fetchone()
    if unscoped:
        raise damaged(label, MISSING_SCOPE)
    if mismatched:
        raise damaged(label, SIGNATURE_MISMATCH)


def _yield_the_cpu() -> None:
    """Lower the calling thread to the lowest CPU priority (Linux: a thread's own nice value)."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:  # a sandbox that forbids it: the check runs at the caller's priority
            pass


def _lift(thread: threading.Thread) -> bool:
    """Put a thread that `_yield_the_cpu` lowered back at the calling thread's CPU priority;
    False where the system refuses it (raising a nice value again needs the privilege to,
    which an unprivileged user lacks) or the thread has ended."""
    if not sys.platform.startswith("linux") or thread.native_id is None:
        return False
    try:
        own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, thread.native_id, own)
    except OSError:
        return False
    return True


class BackgroundCheck:
    """Checks of a whole index that run in a thread on a connection of their own while the
    caller works (SQLite and psycopg leave the GIL while they read), so that a scan or an
    append pays for them in time only where they outlast its work; `result` waits for them
    and raises the line of the first broken invariant.

    A scan or an append reads only some pages of a SQLite file, and SQLite may read garbage in
    them without noticing: `check_pages` reads every page.

    With ``idle`` (checks that run in this process, SQLite's), the thread runs at the lowest
    CPU priority: it takes the cores the caller's own threads and workers leave idle instead
    of competing with them. When the caller then waits and the checks have not finished (a
    box too busy to leave them a core), `result` puts the thread back at the caller's
    priority and waits for it; where the system does not allow that (an unprivileged user
    may lower a thread's priority, not raise it again), it stops the checks between or
    inside two checks and runs what is left in the caller's thread, at its priority: at most
    one check's work is paid twice, and never minutes of waiting behind other processes."""

    def __init__(self, con: Any, checks: list[Callable[[Any], None]],
                 interrupt: Callable[[], None], *, idle: bool = False) -> None:
        self._con = con
        self._checks = checks
        self._interrupt = interrupt
        self._idle = idle
        self._error: BaseException | None = None
        self._passed = 0  # checks that finished without finding damage
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="index-check", daemon=True)
        try:
            self._thread.start()
        except BaseException:  # interrupted (SIGTERM) while the thread starts
            self.close()
            raise

    def _run(self) -> None:
        try:
            if self._idle:
                _yield_the_cpu()
            for check in self._checks:
                if self._stop:
                    return
                check(self._con)
                self._passed += 1
        except BaseException as exc:  # handed to the caller's thread by `result`
            self._error = exc

    def result(self) -> None:
        """Wait for the checks; the one-line error of the first that failed."""
        try:
            if self._idle and self._thread.is_alive() and _lift(self._thread):
                self._thread.join()  # what it has read is not read again
            elif self._idle and self._thread.is_alive():
                self._stop = True
                while self._thread.is_alive():  # a check that starts just after an interrupt
                    self._interrupt()
                    self._thread.join(0.05)
                if not isinstance(self._error, NearDedupError):  # stopped, not failed
                    self._error = None
                    for check in self._checks[self._passed:]:
                        check(self._con)
            else:
                self._thread.join()
        finally:
            self.close()
        if self._error is not None:
            raise self._error

    @contextmanager
    def explains_failures(self) -> Iterator[None]:
        """A failure of the block other than a one-line error (a constraint that the damaged
        rows break, a value they lack) waits for the checks: the damage they find is the
        error to report."""
        try:
            yield
        except NearDedupError:
            raise
        except Exception:
            self.result()
            raise

    def close(self) -> None:
        """Stop the checks if they still run, and close their connection."""
        self._stop = True
        while self._thread.is_alive():  # a check that starts just after an interrupt
            self._interrupt()
            self._thread.join(0.05)
        self._con.close()


def sqlite_background_check(path: Path, connect: Callable[[Path], sqlite3.Connection],
                            min_chars: int | None = None) -> BackgroundCheck:
    """`BackgroundCheck` of the SQLite index at ``path``: its pages, and with ``min_chars``
    (an append's) its content rows (`check_content_rows`). A scan's check (pages only) runs
    at the lowest priority; an append's at the append's own, so that a SIGTERM's unwinding
    never waits on a starved thread before the append's connections close."""
    checks: list[Callable[[Any], None]] = [lambda c: check_pages(path, c)]
    if min_chars is not None:
        checks.append(lambda c: check_content_rows(path, c.execute, min_chars))
    con = connect(path)
    try:
        return BackgroundCheck(con, checks, con.interrupt, idle=min_chars is None)
    except BaseException:  # an open reader would keep the index's -wal and -shm files
        con.close()
        raise
