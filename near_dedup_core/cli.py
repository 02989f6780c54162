"""`near-dedup` command line: the process around a command (its set-up, SIGTERM and Ctrl-C,
failures as one line and an exit code); the commands themselves are in `commands`.

Exit codes: 0 success, 1 invalid input/usage/state (one line on stderr), 2 a limit was exceeded.
"""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from near_dedup_core import runtime
from near_dedup_core.commands import Command, build_parser, chosen
from near_dedup_core.errors import NearDedupError
from near_dedup_core.progress import close_bars, command_clock
from near_dedup_core.workers import choose_executor


def run(args: argparse.Namespace) -> None:
    """The command of ``args`` (`commands.chosen`), in the process set-up of its profile
    (`runtime.command`)."""
    command = chosen(args)
    if hasattr(args, "executor"):  # chosen once: the stages ask it, never which one it is
        args.executor = choose_executor(args.executor, args.workers)
    with command_clock(progress=not args.quiet), \
            runtime.command(command.profile, inputs=getattr(args, "inputs", None) or (),
                            workers=getattr(args, "workers", 1),
                            executor=getattr(args, "executor", "local"), index=args.index):
        try:
            command.run(args)
        except NearDedupError as exc:
            hint = None if exc.exit_code != 1 or str(exc).startswith("usage:") \
                else _misplaced_folder(command, args)
            if hint is None:
                raise
            raise NearDedupError(hint) from exc


def _misplaced_folder(command: Command, args: argparse.Namespace) -> str | None:
    """The one line for a local folder argument that is another kind of folder than the
    command takes (a mixture given to `report verify`, a release day's folder of packages
    given to `snapshot validate`), or None (`folders.misplaced`)."""
    from near_dedup_core.folders import misplaced
    from near_dedup_core.storage import Location

    for folder in command.folders:
        value = getattr(args, folder.attr, None)
        for given in value if isinstance(value, list) else [value]:
            if isinstance(given, Location):
                given = given.local_path
            if isinstance(given, Path):
                hint = misplaced(given, folder.kinds, folder.called, str(given))
                if hint is not None:
                    return hint
    return None


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that open transactions roll back, temporary
    folders are removed and worker pools are stopped, as for Ctrl-C."""


class _NotTheStop(logging.Filter):
    """Drops a library's log record of the SIGTERM or Ctrl-C that stops the command: SQLAlchemy's
    pool logs an interruption that lands while it closes a connection (with its traceback)
    before it re-raises it, and the command's one line already says that it was stopped."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, Terminated | KeyboardInterrupt)


_NOT_THE_STOP = _NotTheStop()


#: Seconds a terminated command has to unwind (roll its batch back, remove its temporary
#: files, stop its workers) before it leaves regardless.
TERM_GRACE = 5.0


def _terminate(signum, _frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    code, line = _thread_failure() or (_TERMINATED, "near-dedup: terminated")
    deadline = threading.Timer(TERM_GRACE, _leave, (code, line + "\n"))
    deadline.daemon = True
    try:
        deadline.start()
    except RuntimeError:  # no thread can start (memory is exhausted): the kernel's alarm
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # ends the process if unwinding hangs
        signal.alarm(int(TERM_GRACE))
    raise Terminated(signum)


#: What ended a thread of the command (`_thread_failed`), first only.
_FAILED_THREADS: list[BaseException] = []


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """An exception that ends a thread (ours or a library's, such as the thread that feeds a
    process pool's tasks, whose own threads fail to start when memory runs out) would be a
    traceback on stderr and, worse, work that never finishes while the main thread waits for
    it. The command is stopped instead, as a SIGTERM stops it (its temporaries removed, its
    pool stopped), and says why in one line (`_thread_failure`)."""
    if isinstance(args.exc_value, Terminated | KeyboardInterrupt | SystemExit):
        return
    _stop_for(args.exc_value or RuntimeError("a thread failed"))


def _stop_for(exc: BaseException) -> None:
    """Stop the command (a SIGTERM to its main thread) for ``exc``, what ended one of its
    threads; the first such exception is the one the command's line names."""
    if not _FAILED_THREADS:
        _FAILED_THREADS.append(exc)
    if signal.getsignal(signal.SIGTERM) is _terminate:  # the command still runs
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)


def _thread_failure() -> tuple[int, str] | None:
    """The exit code and line of a command stopped because one of its threads failed."""
    if not _FAILED_THREADS:
        return None
    exc = _FAILED_THREADS[0]
    if isinstance(exc, MemoryError) or _no_thread(exc):
        return 1, f"near-dedup: error: {_OUT_OF_MEMORY.format(f' ({exc})' if str(exc) else '')}"
    first = str(exc).strip().splitlines()
    return 1, (f"near-dedup: error: unexpected {type(exc).__name__} in a thread"
               f"{': ' + first[0] if first else ''}; nothing was changed")


def _no_thread(exc: BaseException) -> bool:
    """Whether ``exc`` is Python's failure to start a thread (no memory for its stack)."""
    return isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)


_OUT_OF_MEMORY = ("out of memory{}; nothing was changed; try fewer --workers or a smaller "
                  "input pool")


def _unraisable(unraisable: Any) -> None:
    """A SIGTERM or Ctrl-C that lands in a finalizer or a weakref callback (run by a garbage
    collection) cannot propagate from there; Python would print it as "Exception ignored" with
    its traceback. It is not printed: the command then either finishes its work (exit 0, what
    it did is complete) or is ended by the deadline its first delivery started (`TERM_GRACE`,
    exit 143 with the one line). Memory that runs out as a thread starts (before its own code
    runs, where `threading.excepthook` does not see it) stops the command (`_stop_for`)."""
    exc = unraisable.exc_value
    if isinstance(exc, MemoryError) or _no_thread(exc):
        # a thread that could not even start its own code (its first allocation failed):
        # its work never happens, so the command stops as for a thread that failed
        _stop_for(exc)
    elif not isinstance(exc, Terminated | KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _leave(code: int, line: str = "") -> None:
    """End the process now, without joining its threads: after a SIGTERM or Ctrl-C a pool's
    result thread can wait forever on a pipe that a killed worker left half-written (the
    process itself holds its other end). Everything that must be undone was undone by the
    unwinding (or, past `TERM_GRACE`, is undone by the database's own recovery: a batch
    that was not committed is not in the index); the pool's server and workers die with
    this process (`workers.die_with_parent`)."""
    if line:
        os.write(2, line.encode())
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            continue
    os._exit(code)


_INTERRUPTED, _TERMINATED = 130, 143
_NO_SPACE = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def main(argv: list[str] | None = None) -> int:
    """Run one command; every failure is one stderr line and an exit code.

    Bad input or state raises NearDedupError where it is found (the index store names the
    index for SQLite errors, atomic_dir the output for failed writes). The last-resort cases
    here are the ones that can happen anywhere: memory exhaustion (MemoryError, numpy's
    allocation error is one; a C extension that fails an allocation without setting an error
    raises SystemError), a full disk or file-size limit (OSError ENOSPC/EFBIG/EDQUOT),
    other OSErrors on a named path, and a worker process that died (killed, e.g. by the OOM
    killer). Anything else unexpected (seen under memory caps: a worker's import failing to
    map a shared object) is one line too, naming its type; ``NEAR_DEDUP_TRACEBACK=1`` shows
    the traceback. In each case nothing was published: batches are transactions, outputs are
    renamed into place only when complete."""
    previous = None
    if logging.lastResort is not None:  # where a library's records go when nobody configured logging
        logging.lastResort.addFilter(_NOT_THE_STOP)
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
        sys.unraisablehook = _unraisable
        threading.excepthook = _thread_failed
    _FAILED_THREADS.clear()  # a process that runs commands one after the other
    try:
        args = build_parser().parse_args(argv)
        run(args)
    except NearDedupError as exc:
        return _fail(str(exc), exc.exit_code)
    except MemoryError as exc:
        return _fail(_OUT_OF_MEMORY.format(f" ({exc})" if str(exc) else ""))
    except SystemError as exc:  # a C extension that failed without setting an error
        return _fail(f"an extension module failed ({exc}), as happens when memory runs out; "
                     f"nothing was changed; try fewer --workers or a smaller input pool")
    except OSError as exc:  # a path that cannot be read or written: bad input or state
        if exc.errno == errno.ENOMEM:  # a mapping, a fork or a pipe that memory refused
            return _fail(_OUT_OF_MEMORY.format(f" ({exc.strerror or exc})"))
        where_ = f"{exc.filename}: " if exc.filename else ""
        if exc.errno in _NO_SPACE:
            return _fail(f"{where_}{exc.strerror or exc} (out of disk space or over the "
                         f"file-size limit); nothing was changed")
        return _fail(f"{where_}{exc.strerror or exc}")
    except KeyboardInterrupt as exc:
        return _stopped(exc)
    except Exception as exc:  # the last resort: still one line, still nothing published
        if isinstance(exc.__cause__, Terminated | KeyboardInterrupt):
            # the signal came during a class definition (an import), whose ``__set_name__``
            # failure Python reports as a RuntimeError caused by it
            return _stopped(exc.__cause__)
        if _no_thread(exc):
            return _fail(_OUT_OF_MEMORY.format(f" ({exc})"))
        if _broken_pool(exc):
            return _fail("a worker process died (killed, or out of memory); nothing was "
                         "changed; try fewer --workers")
        if os.environ.get(TRACEBACK_ENV):
            raise
        first = str(exc).strip().splitlines()
        return _fail(f"unexpected {type(exc).__name__}"
                     f"{': ' + first[0] if first else ''}; nothing was changed (under memory "
                     f"pressure, try fewer --workers; {TRACEBACK_ENV}=1 shows where it "
                     f"happened)")
    except Terminated as exc:
        return _stopped(exc)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
            sys.unraisablehook = sys.__unraisablehook__
            threading.excepthook = threading.__excepthook__
    return 0


def _stopped(exc: Terminated | KeyboardInterrupt) -> int:
    """The line and exit code of a command stopped by SIGTERM or Ctrl-C (or by a thread that
    failed, `_thread_failed`)."""
    close_bars()
    failure = _thread_failure()
    if failure is not None:
        print(failure[1], file=sys.stderr)
        return failure[0]
    if isinstance(exc, Terminated):
        print("near-dedup: terminated", file=sys.stderr)
        return _TERMINATED
    print("near-dedup: interrupted", file=sys.stderr)
    return _INTERRUPTED


#: Set to show the traceback of an unexpected error instead of its one line.
TRACEBACK_ENV = "NEAR_DEDUP_TRACEBACK"


def _broken_pool(exc: BaseException) -> bool:
    """Whether ``exc`` is a process pool's BrokenProcessPool (a worker died). Its module is
    looked up, not imported: a command that started no pool cannot have raised it, and the
    import (multiprocessing with it) is not paid by commands that run inline."""
    module = sys.modules.get("concurrent.futures.process")
    return module is not None and isinstance(exc, module.BrokenProcessPool)


def _fail(message: str, code: int = 1) -> int:
    close_bars()
    print(f"near-dedup: error: {message}", file=sys.stderr)
    return code


def console_main() -> None:
    """The process entry point (``near-dedup``, ``python -m near_dedup_core``): `main`, then
    `runtime.finish` and exit; a terminated or interrupted command leaves at once (`_leave`).
    Callers in a process that goes on (tests, the Dagster assets) call `main`."""
    runtime.begin()
    code = main()
    # the command is done: a SIGTERM from here on (while the interpreter exits: exit hooks,
    # module teardown) is ignored, so that the process ends with the command's code, not
    # killed by the signal (a handler of ours would be reset to the default by then)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if code in (_INTERRUPTED, _TERMINATED) or _FAILED_THREADS:
        # What the unwinding did not reach is garbage now, often in reference cycles (a
        # traceback whose frames hold the exception they handled; every SQLite connection,
        # through its statement cache): collected, a connection opened just before the
        # signal closes, and a context manager entered just as it came is exited. `_leave`
        # collects nothing, and an open connection would leave the index's -wal and -shm.
        gc.collect()
        _leave(code)
    runtime.finish()
    raise SystemExit(code)


if __name__ == "__main__":
    console_main()
