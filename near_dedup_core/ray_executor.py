"""The Ray executor: the parallel stages of ``index`` and ``scan`` as Ray tasks on a cluster.

``--executor ray`` (or ``NEAR_DEDUP_EXECUTOR=ray``) hands the same work that the local process
pool does — normalize + sign + compress chunks in ``index``, exact Jaccard + guard over
candidate chunks in ``scan`` — to Ray tasks. The cluster is the one ``RAY_ADDRESS`` names
(``auto``, ``ray://head:10001``, ``host:6379``), read by Ray itself; when it is unset a local
Ray of its own is started for the run (even beside a head started on this machine, which it
does not join) and stopped at its end. Ray's own messages go to a log file (`ray_connect`).

What stays on the driver is everything that must be serial and deterministic: the batch order
and the index writes of ``index``, candidate generation (set-based band joins against the index),
decisions and report writing of ``scan``. Results are consumed in submission order, never in
completion order, so reports are byte-identical to ``--executor local`` whatever the number of
nodes and workers.

What travels to tasks:

- ``index``: the records' compared texts of a chunk (the driver parses the JSON lines; packages
  need not be on the workers' storage), and back signatures, band keys and compressed texts.
- ``scan``: the zstd-compressed normalized texts of a chunk's contents, read by the driver from
  its one index snapshot, with the text dictionaries they need. A worker therefore never opens
  the index: a task reads exactly the snapshot the scan reads, on any backend, and the index
  need not be reachable from the nodes. Compressed texts are about a third of the raw bytes.

Failures: a task whose worker dies (killed process, lost node) is retried by Ray up to
``MAX_RETRIES`` times; if it still fails, the command stops with one line and exit 1 — ``index``
rolls its transaction back and ``scan`` has written nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from near_dedup_core.errors import NearDedupError
from near_dedup_core.ray_connect import (
    TokenRefused,
    check_token,
    is_token_refusal,
    ray_log,
    ray_output_to,
    token_message,
)

#: Attempts after the first for a task whose worker process or node died.
MAX_RETRIES = 3
INSTALL_HINT = "install it with: pip install 'near-dedup[ray]'"


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise NearDedupError(f"--executor ray needs Ray, which is not installed; {INSTALL_HINT}") \
            from None
    return ray


class RayExecutor(Executor):
    """A ``concurrent.futures.Executor`` whose work runs as Ray tasks.

    Connects to the cluster named by ``RAY_ADDRESS`` (or ``address``) or starts a local Ray
    with ``local_cpus`` CPUs; a Ray it started is shut down with the executor. Exceptions of
    Ray itself (a worker that died beyond its retries, a lost node, an unreachable cluster)
    reach the caller as ``NearDedupError``; exceptions raised by the submitted function reach
    it unchanged.
    """

    def __init__(self, *, local_cpus: int | None = None, address: str | None = None) -> None:
        ray = import_ray()
        self._ray = ray
        self._started = False
        self._watchdog: subprocess.Popen | None = None
        address = address or os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():
            if address:
                _reachable(address)
            else:  # before Ray starts: a command killed while it starts leaves nothing
                self._watchdog = start_watchdog(_mark_local_ray())
            log = ray_log()
            try:
                with ray_output_to(log):
                    if address:
                        check_token(address, ray)
                    # "local": a Ray of its own, even beside a head started on this machine
                    ray.init(address=address or "local",
                             num_cpus=None if address else local_cpus,
                             include_dashboard=False, log_to_driver=False,
                             logging_level=logging.ERROR, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError, TokenRefused,
                    ray.exceptions.RayError) as exc:
                self.shutdown()
                raise NearDedupError(_init_failure(address, exc, log, ray)) from None
            self._started = True
        self._remotes: dict[Callable, Any] = {}

    @property
    def parallelism(self) -> int:
        """CPUs of the cluster: how many tasks can run at once."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        remote = self._remotes.get(fn)
        if remote is None:
            remote = self._remotes[fn] = self._ray.remote(fn).options(
                num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)
        ray_future = remote.remote(*args, **kwargs).future()
        out: Future = Future()
        ray_future.add_done_callback(lambda f: _settle(out, f, self._ray))
        return out

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._started:
            with ray_output_to(ray_log()):
                self._ray.shutdown()
            self._started = False
        if self._watchdog is not None:  # its input closed: it stops what is left, and ends
            stop_watchdog(self._watchdog)
            self._watchdog = None
            os.environ.pop(OWNER_ENV, None)


#: Seconds to wait for a cluster's port before giving up (Ray itself retries for minutes).
CONNECT_TIMEOUT = 10.0


def _reachable(address: str) -> None:
    """A ``host:port`` or ``ray://host:port`` address must accept a TCP connection, so that an
    unreachable cluster is one line at once; ``auto`` and other forms are left to Ray."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise NearDedupError(f"ray: cannot reach cluster {address} ({exc.strerror or exc})"
                             ) from None


def _init_failure(address: str | None, exc: BaseException, log: str | None, ray: Any) -> str:
    if address and is_token_refusal(exc, ray):
        return token_message(address)
    where = f"cluster {address}" if address else "a local Ray"
    seen = f" (Ray's messages: {log})" if log else ""
    return f"ray: cannot start or reach {where}: {_first_line(exc)}{seen}"


def _settle(out: Future, done: Future, ray: Any) -> None:
    """Hand ``done``'s result to ``out``: the function's own exception unchanged, Ray's
    failures as one-line NearDedupError."""
    exc = done.exception()
    if exc is None:
        out.set_result(done.result())
        return
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        if isinstance(cause, ray.exceptions.RayError):
            exc = cause
        else:
            out.set_exception(cause)
            return
    if isinstance(exc, ray.exceptions.RayError):
        out.set_exception(NearDedupError(
            f"ray: a task failed after {MAX_RETRIES} retries ({type(exc).__name__}: "
            f"{_first_line(exc)}); nothing was written"))
    else:
        out.set_exception(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ------------------------------------------------------------------ a local Ray dies with us
#: How often the watchdog lists the command's descendants (seconds).
WATCH_EVERY = 0.5


#: The environment variable that marks the processes of a local Ray this process starts:
#: Ray's servers inherit the driver's environment, and its agents and workers theirs.
OWNER_ENV = "NEAR_DEDUP_RAY_OWNER"


def _mark_local_ray() -> str:
    """A mark unique to the local Ray about to start, set in this process's environment so
    that every process of that Ray carries it (`watch` finds them by it)."""
    mark = f"{os.getpid()}-{time.time_ns()}"
    os.environ[OWNER_ENV] = mark
    return mark


def start_watchdog(mark: str) -> subprocess.Popen:
    """Start the watchdog of a local Ray started by this process: a small process of its
    own session (so that neither Ctrl-C nor the end of this process reaches it) that lists
    this process's descendants that are Ray's (servers, agents and workers) every
    `WATCH_EVERY` seconds and, once this process is gone or done with Ray (its input pipe
    closed, even by ``SIGKILL``), kills those still alive, the Ray processes that carry
    ``mark`` in their environment (`OWNER_ENV`: those that started after the last listing,
    whose parent died before it) and what they started. Ray's agents otherwise outlive a
    killed driver."""
    return subprocess.Popen(
        [sys.executable, "-c", "from near_dedup_core.ray_executor import watch; watch()",
         str(os.getpid()), mark], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


#: What `stop_watchdog` tells the watchdog before it closes its pipe: the command is done
#: with Ray, not killed.
DONE = b"done"


def stop_watchdog(watchdog: subprocess.Popen, timeout: float = 10.0) -> None:
    if watchdog.stdin is not None:
        with contextlib.suppress(OSError):
            watchdog.stdin.write(DONE)
            watchdog.stdin.flush()
        with contextlib.suppress(OSError):
            watchdog.stdin.close()
    try:
        watchdog.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid → (parent pid, start time)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        found[int(entry.name)] = (int(fields[1]), fields[19].decode())
    return found


def _descendants(root: int, table: dict[int, tuple[int, str]]) -> dict[int, str]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = table[pid][1]
            todo.extend(children.get(pid, []))
    return out


def watch() -> None:
    """The watchdog's body (`start_watchdog`): ``argv[1]`` is the command's pid, ``argv[2]``
    the mark of its Ray's processes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    root = int(sys.argv[1])
    mark = f"{OWNER_ENV}={sys.argv[2]}".encode()
    seen: dict[int, str] = {}
    others: set[tuple[int, str]] = set()
    done = False  # the command said it is done with Ray (`stop_watchdog`), not killed
    while True:
        for pid, started in _descendants(root, _processes()).items():
            if pid not in seen and (pid, started) not in others:
                if _is_ray(pid):
                    seen[pid] = started
                else:
                    others.add((pid, started))
        ready, _, _ = select.select([sys.stdin], [], [], WATCH_EVERY)
        if ready:
            said = os.read(sys.stdin.fileno(), 4096)
            if not said:
                break
            done = done or DONE in said
    # freeze them first, so that none starts another (Ray's servers restart their agents),
    # then take in what they started meanwhile, and kill them all
    table = _processes()
    doomed = {pid: started for pid, started in seen.items()
              if table.get(pid, (0, ""))[1] == started}  # the same process, not a reused pid
    doomed.update({pid: started for pid, (_, started) in table.items()
                   if pid not in doomed and pid != os.getpid() and _carries(pid, mark)
                   and _is_ray(pid)})
    while True:
        for pid in doomed:
            _signal(pid, signal.SIGSTOP)
        table = _processes()
        more = {child: started for pid in doomed
                for child, started in _descendants(pid, table).items()
                if child not in doomed and child != os.getpid()}
        if not more:
            break
        doomed.update(more)
    for pid in doomed:
        _signal(pid, signal.SIGKILL)
    if not done:  # the command was killed: nothing of its Ray may outlive it
        _sweep(mark)


#: After a killed command's Ray is killed, how long no process of it may show up before the
#: watchdog leaves (seconds).
SWEEP_QUIET = 1.0


def _sweep(mark: bytes) -> None:
    """Kill every Ray process that carries ``mark`` until none has shown up for
    `SWEEP_QUIET` seconds: one that was starting as the others were stopped (an agent whose
    server forked it between two listings, still without its name) is found once it has
    one."""
    quiet_until = time.monotonic() + SWEEP_QUIET
    while time.monotonic() < quiet_until:
        time.sleep(0.1)
        for pid in _processes():
            if pid != os.getpid() and _carries(pid, mark) and _is_ray(pid):
                _signal(pid, signal.SIGKILL)
                quiet_until = time.monotonic() + SWEEP_QUIET


def _carries(pid: int, mark: bytes) -> bool:
    """Whether process ``pid`` was started with ``mark`` (``NAME=value``) in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return mark in f.read().split(b"\0")
    except OSError:
        return False


def _is_ray(pid: int) -> bool:
    """Whether process ``pid`` is one of Ray's (its servers, agents and workers), not some
    other child of the command (its worker pool's server, a database server of a test)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return cmdline.startswith(b"ray::") or b"/ray/" in cmdline


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        return
