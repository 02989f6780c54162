"""Where the parallel work of `index`, `scan` and `contamination` runs: the executor chosen
once from ``--executor`` and ``--workers`` (`choose_executor`, `work_pool`), and this
machine's worker pool, which makes its processes die with the command.

Workers come from a ``forkserver`` (a clean process started once, without the parent's
threads, open connections or large arrays; each worker is forked from it). On Linux every
process of the pool asks the kernel for ``SIGKILL`` when its parent dies
(``prctl(PR_SET_PDEATHSIG)``): the forkserver when the command's process dies (or at once, if
the command died while the server started), a worker when the forkserver dies. So a command
killed with ``SIGKILL`` (which no handler can catch) leaves no worker, forkserver or resource
tracker behind: the tracker exits once the last process holding its pipe is gone, and removes
the pool's semaphores without a word (`_quiet_resource_tracker`). ``SIGTERM`` is turned into
an exception by the CLI, which unwinds the open transaction or temporary folder, kills the
pool's workers without waiting for their work, and leaves without joining the pool's threads.

``workers=1`` runs everything inline in the calling process (no pool, no start-up cost);
multiprocessing itself is imported only when a pool starts.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import TYPE_CHECKING, Any

from near_dedup_core.collector import use_bulk_threshold

if TYPE_CHECKING:
    import multiprocessing.context
    import multiprocessing.process

PARENT_ENV = "NEAR_DEDUP_POOL_PARENT"
#: The modules the forkserver imports (`_preload`), comma-separated.
PRELOAD_ENV = "NEAR_DEDUP_POOL_PRELOAD"
#: Set by the forkserver in its own environment: its pid, which its workers inherit.
SERVER_ENV = "NEAR_DEDUP_POOL_SERVER"
#: `scan` runs a pool of at most this many records inline, in its own process (no start-up
#: to pay); `index` does so up to two blocks of lines, the same number by default.
POOL_RECORDS = 2048
_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere). If the
    parent is already gone (reparented before the request took effect), exit now."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the pool still works, without the guard
        return
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)


#: ``mallopt``'s parameter for the most arenas glibc's allocator makes (malloc.h).
_M_ARENA_MAX = -8


def one_arena() -> None:
    """Ask glibc's allocator for a single arena: threads share the main one instead of each
    reserving its own 64 MiB. Called before the process starts threads; elsewhere than on
    glibc it does nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)
    except (OSError, AttributeError):  # another C library: it has arenas of its own kind
        return


def guard_forkserver() -> None:
    """In the pool's forkserver (`near_dedup_core._forkserver`, its first import): die with
    the command that started it (at once if that command is already gone, so that a
    command killed while its server starts leaves nothing behind), record its own pid for
    the workers it forks (`_worker_init`), end quietly on an error (`_leave_quietly`), and
    use the bulk collector threshold."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit():
        return
    die_with_parent(int(parent))
    one_arena()  # before the modules it preloads start threads; its workers inherit it
    os.environ[SERVER_ENV] = str(os.getpid())
    sys.excepthook = _leave_quietly
    use_bulk_threshold()


def _leave_quietly(*_exc_info: object) -> None:
    """The forkserver's (and its workers') last resort: a module it preloads that fails
    (out of memory, say) ends it without a traceback on the command's stderr; the command
    learns of it as a broken pool and says so in one line."""
    os._exit(1)


def _worker_init(initializer: Callable | None = None, initargs: tuple = ()) -> None:
    server = os.environ.get(SERVER_ENV, "")
    die_with_parent(int(server) if server.isdigit() else None)
    use_bulk_threshold()  # a worker only ever does bulk work
    if initializer is None:
        return
    try:
        initializer(*initargs)
    except BaseException:  # noqa: BLE001 (the command reports the broken pool in one line)
        # concurrent.futures would log this worker's traceback on the command's stderr and
        # mark the pool broken; leaving at once marks it broken without the traceback.
        os._exit(1)


class InlineExecutor(Executor):
    """Runs submitted work at once in this process (workers=1). A failure of the work is
    the future's exception; a stop (the CLI's SIGTERM, Ctrl-C) is raised by ``submit``
    itself, so that the command stops there rather than going on until it asks the future
    (by then, past the time a terminated command has to unwind)."""

    parallelism = 1

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 (handed to the caller through the future)
            fut.set_exception(exc)
        return fut


def submit_in_turn(executor: Executor, calls: Sequence[tuple]) -> list[Future]:
    """Each ``(fn, *args)`` of ``calls`` submitted to ``executor`` once the one before has
    finished, from a thread of its own: side work that keeps one worker busy at a time, so
    that it never takes more than one core from the caller. A process pool starts a worker
    on its first submit, which waits until the forkserver has imported what it preloads:
    that wait is the thread's too, while the caller goes on with its own work. A call that
    fails leaves the later ones cancelled, and the caller learns of it from the failed
    call's future."""
    import threading

    futures: list[Future] = [Future() for _ in calls]

    def run() -> None:
        for k, (fn, *args) in enumerate(calls):
            try:
                futures[k].set_result(executor.submit(fn, *args).result())
            except BaseException as exc:  # noqa: BLE001 (handed to the caller through the future)
                for later in futures[k + 1:]:
                    later.cancel()
                futures[k].set_exception(exc)
                return

    threading.Thread(target=run, name="near-dedup-side-work", daemon=True).start()
    return futures


def _context(preload: Sequence[str] = ()) -> multiprocessing.context.BaseContext:
    """The forkserver context, its server running: started once per process, on first
    use, it imports ``near_dedup_core._forkserver``, which ties it to this process's life,
    then the modules `_preload` lists for ``preload`` (if it is not running yet): every
    worker then has them from the fork."""
    import multiprocessing
    import multiprocessing.forkserver

    _quiet_resource_tracker()
    os.environ[PARENT_ENV] = str(os.getpid())
    os.environ[PRELOAD_ENV] = ",".join(_preload(preload))  # read by the server as it starts
    multiprocessing.forkserver.set_forkserver_preload(["near_dedup_core._forkserver"])
    _create_temp_dir_removed_by_name()
    multiprocessing.forkserver.ensure_running()
    _list_temp_dir()
    return multiprocessing.get_context("forkserver")


#: multiprocessing's temporary folder, by path: the names it held once the forkserver ran.
_TEMP_DIR_NAMES: dict[str, list[str]] = {}


def _create_temp_dir_removed_by_name() -> None:
    """multiprocessing removes its temporary folder (``pymp-…``, which holds the forkserver's
    socket) at exit with ``shutil.rmtree``, which lists the folder first: a command that
    ended because memory ran out could not (``Cannot allocate memory``), printed that
    traceback after its one line and left the folder. The folder is created here, before the
    forkserver, so that its exit removal is `_remove_folder`: by the names it held once the
    forkserver ran (`_list_temp_dir`, listed while there is memory to list it), and listed
    at exit only if something else was put in it. A folder created earlier in the process
    keeps multiprocessing's own removal."""
    import shutil
    from multiprocessing import util

    rmtree = shutil.rmtree
    # CPython 3.11 has no public way to choose this removal: `util.get_temp_dir` registers
    # whatever `shutil.rmtree` is when it creates the folder, so it is this one meanwhile.
    shutil.rmtree = _RemoveByName(rmtree)
    try:
        util.get_temp_dir()
    finally:
        shutil.rmtree = rmtree


class _RemoveByName:
    """``shutil.rmtree`` for multiprocessing's temporary folder once listed (`_remove_folder`
    with the names it held), and ``shutil.rmtree`` itself for every other call."""

    def __init__(self, rmtree: Any) -> None:
        self.rmtree = rmtree
        self.avoids_symlink_attacks: bool = rmtree.avoids_symlink_attacks

    def __call__(self, path: Any, *args: Any, **kwargs: Any) -> None:
        names = _TEMP_DIR_NAMES.get(os.fspath(path))
        if names is None or args or kwargs:
            self.rmtree(path, *args, **kwargs)
        else:
            _remove_folder(os.fspath(path), names)


def _list_temp_dir() -> None:
    """Remember what multiprocessing's temporary folder holds now that the forkserver runs
    (its socket), for `_create_temp_dir_removed_by_name`'s removal at exit."""
    from multiprocessing import util

    folder = util.get_temp_dir()
    with suppress(OSError):
        _TEMP_DIR_NAMES[folder] = os.listdir(folder)


def _remove_folder(folder: str, names: Sequence[str]) -> None:
    """Remove multiprocessing's temporary ``folder``: the ``names`` it held when the pool
    started, then the folder; anything else in it, or a failure, by ``shutil.rmtree``,
    quietly."""
    import shutil

    try:
        for name in names:
            with suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)


#: What multiprocessing's resource tracker must not print: it cleans up the semaphores of a
#: command that was killed (``SIGKILL`` leaves no chance to release them) and warns about
#: each kind of them on stderr, after the command is gone.
_TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"


def _quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (once per process) with its warnings
    ignored: the tracker still removes what a killed command leaves, without a word."""
    from multiprocessing import resource_tracker

    sys.warnoptions.append(_TRACKER_QUIET)  # the tracker's interpreter gets them as -W
    try:
        resource_tracker.ensure_running()
    finally:
        sys.warnoptions.remove(_TRACKER_QUIET)


def start_forkserver(preload: Sequence[str] = ()) -> None:
    """Start the forkserver now, without waiting for it: its start-up (and the import of
    ``preload``) overlaps the caller's own work until the first worker forks from it."""
    _context(preload)


def _preload(extra: Sequence[str] = ()) -> list[str]:
    """What the forkserver imports before it forks a worker (`near_dedup_core._forkserver`):
    every module of this package that this process has imported (the functions handed to
    workers live in them), then those of ``extra`` (the modules the workers run, whose
    ``warm_up`` the server runs). Each worker is forked with all of it loaded, where it
    would otherwise import it again (about 1 s of CPU per worker for `index` or `scan`)."""
    ours = sorted(name for name in sys.modules
                  if name.startswith("near_dedup_core.") and name not in _NOT_PRELOADED)
    return list(dict.fromkeys([*ours, *(m for m in extra if m not in _NOT_PRELOADED)]))


#: Modules the forkserver must not import again: the entry point runs the CLI when
#: imported, the server's own module is imported first; the package manifest's model loads
#: pydantic, and workers parse line blocks, never a manifest.
_NOT_PRELOADED = {"near_dedup_core.__main__", "near_dedup_core._forkserver",
                  "near_dedup_core.package.model"}


@contextmanager
def process_pool(workers: int, initializer: Callable | None = None, initargs: tuple = (),
                 preload: Sequence[str] = ()) -> Iterator[Executor]:
    """An executor of ``workers`` processes (inline for 1, where ``initializer`` is the
    caller's business); each worker runs ``initializer(*initargs)`` first. On an exception
    (including KeyboardInterrupt and the CLI's SIGTERM) pending work is cancelled and the
    workers are killed at once instead of finishing their current task."""
    if workers <= 1:
        with InlineExecutor() as inline:
            yield inline
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = _context(preload)
    before = set(multiprocessing.active_children())
    ex = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                             initargs=(initializer, initargs))
    # Every worker is started at the first submit, before any task can reach one (as
    # CPython starts them for the "fork" method), not one by one as tasks come. A stop that
    # lands while a worker starts, after its fork and before the pool has recorded it, can
    # then only leave that worker idle until it dies with the command: started later, it
    # could already be running a task that reads the index, which `stop` cannot kill, and
    # which would keep the index's -wal and -shm files after the command.
    # (CPython's own switch for it, present since 3.11: checked, not assumed)
    assert isinstance(vars(ex).get("_safe_to_dynamically_spawn_children"), bool)
    vars(ex)["_safe_to_dynamically_spawn_children"] = False
    pool = _LocalPool(ex, workers, before)
    try:
        yield pool
    except BaseException:
        pool.stop()
        raise
    ex.shutdown(wait=True)


def stop_at_once(ex: Executor) -> None:
    """Stop ``ex``'s work now: a local pool's workers are killed (`_LocalPool.stop`), not
    waited for; inline work has stopped already. For a command that was stopped (SIGTERM,
    Ctrl-C) and must remove a folder its tasks write into."""
    if isinstance(ex, _LocalPool):
        ex.stop()


class _LocalPool(Executor):
    """A process pool that says how many tasks it runs at once, and whose workers failing to
    start (their server gone: killed, or out of memory) is a broken pool, as a worker dying
    is."""

    def __init__(self, ex: Executor, workers: int,
                 before: set[multiprocessing.process.BaseProcess]) -> None:
        self._ex = ex
        self.parallelism = workers
        self._before = before  # the processes that are not its workers

    def stop(self) -> None:
        """Cancel pending work and kill the workers at once, instead of letting them finish
        their current task."""
        import multiprocessing

        # after shutdown no submit starts a worker any more: the list below is complete
        self._ex.shutdown(wait=False, cancel_futures=True)
        stop_processes([p for p in multiprocessing.active_children()
                        if p not in self._before])

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self._ex.submit(fn, *args, **kwargs)
        except (EOFError, ConnectionError) as exc:
            raise BrokenProcessPool(f"the worker pool's server is gone ({exc})") from None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._ex.shutdown(wait=wait, cancel_futures=cancel_futures)


def stop_processes(processes: Sequence[multiprocessing.process.BaseProcess],
                   timeout: float = 2.0) -> None:
    """Kill ``processes`` and reap them, waiting at most ``timeout`` seconds in all."""
    import time

    for proc in processes:
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):  # already gone, or never started
            continue
    deadline = time.monotonic() + timeout
    for proc in processes:
        try:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        except (OSError, ValueError, AssertionError):
            continue


#: Where the parallel stages of `index`, `scan` and `contamination` run (``--executor``).
EXECUTORS = ("local", "ray")


class Executors:
    """Where a command's parallel work runs, chosen once from ``--executor`` and
    ``--workers`` (`choose_executor`). The stages ask it what they need to know, never which
    one it is:

    - ``in_process``: the work runs inline, in the command's own process (one worker);
    - ``workers_read_index``: a worker may open the index (and the packages) itself, on this
      machine; otherwise the stage ships it what it reads;
    - ``shares_memory``: workers are processes of this machine that can attach shared memory;
    - ``reads_storage``: the work may run on other machines, which read the packages on object
      storage themselves (given byte ranges) rather than receive their bytes;
    - `start` (a context manager): the running executor, with ``submit`` and
      ``parallelism`` (how many tasks it runs at once);
    - `for_work`: the executor for a given amount of work (a local pool runs little work
      inline rather than paying for processes)."""

    name: str = ""
    in_process: bool = False
    workers_read_index: bool = False
    shares_memory: bool = False
    reads_storage: bool = False

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def start(self, initializer: Callable | None = None, initargs: tuple = (),
              preload: Sequence[str] = ()) -> AbstractContextManager[Executor]:
        raise TypeError(f"{type(self).__name__} does not start")

    def start_early(self, preload: Sequence[str] = ()) -> None:
        """Begin now what `start` needs, so that it overlaps the caller's own work."""

    def carry(self, state: Any) -> Any | None:
        """What each task carries instead of the ``state`` its workers were started with
        (``initializer(*initargs)`` of `start`); None where they run the initializer."""
        return None

    def for_work(self, records: int, inline_at_most: int) -> Executors:
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workers={self.workers})"


class LocalExecutors(Executors):
    """This machine's worker processes (`process_pool`), each forked with the modules of
    ``preload`` imported and running ``initializer(*initargs)`` first; inline for one
    worker."""

    name = "local"
    workers_read_index = True

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.in_process = self.workers <= 1
        self.shares_memory = not self.in_process

    def start(self, initializer: Callable | None = None, initargs: tuple = (),
              preload: Sequence[str] = ()) -> AbstractContextManager[Executor]:
        return process_pool(self.workers, initializer, initargs, preload)

    def for_work(self, records: int, inline_at_most: int) -> Executors:
        return LocalExecutors(1) if records <= inline_at_most else self

    def start_early(self, preload: Sequence[str] = ()) -> None:
        """Start the pool's forkserver now (`start_forkserver`)."""
        if not self.in_process:
            start_forkserver(preload)


class RayExecutors(Executors):
    """A Ray cluster (`ray_executor.RayExecutor`): the one ``RAY_ADDRESS`` names, or a local
    Ray of ``workers`` CPUs started for the run. Its tasks never open the index; they read
    the byte ranges of packages on object storage that they are given."""

    name = "ray"
    reads_storage = True

    @contextmanager
    def _started(self) -> Iterator[Executor]:
        from near_dedup_core.ray_executor import RayExecutor

        ray_ex = RayExecutor(local_cpus=self.workers)
        try:
            yield ray_ex
        finally:
            ray_ex.shutdown()

    def start(self, initializer: Callable | None = None, initargs: tuple = (),
              preload: Sequence[str] = ()) -> AbstractContextManager[Executor]:
        return self._started()

    def carry(self, state: Any) -> Any:
        """``state`` put once in the cluster's object store: a task on any node reads it."""
        from near_dedup_core.ray_executor import import_ray

        return import_ray().put(state)


_CHOICES: dict[str, type[Executors]] = {"local": LocalExecutors, "ray": RayExecutors}


def choose_executor(executor: str | Executors, workers: int = 1) -> Executors:
    """The executor of ``--executor`` (one of `EXECUTORS`) and ``--workers``; an
    `Executors` is returned as it is."""
    if isinstance(executor, Executors):
        return executor
    try:
        return _CHOICES[executor](workers)
    except KeyError:
        raise ValueError(f"unknown executor {executor!r}; expected one of "
                         f"{', '.join(EXECUTORS)}") from None


def work_pool(executor: str | Executors, workers: int = 1,
              initializer: Callable | None = None, initargs: tuple = (),
              preload: Sequence[str] = ()) -> AbstractContextManager[Executor]:
    """The running executor of ``--executor`` and ``--workers`` (`choose_executor`), as a
    context manager: ``with work_pool("local", 4, init, (state,), modules) as ex:``. Its
    ``parallelism`` attribute says how much work to keep in flight."""
    return choose_executor(executor, workers).start(initializer, initargs, preload)


def parallelism(ex: Executor, workers: int) -> int:
    """How many tasks ``ex`` runs at once: a Ray cluster's CPUs, else ``workers``."""
    return int(getattr(ex, "parallelism", workers))
