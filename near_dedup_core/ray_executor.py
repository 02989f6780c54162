"""The Ray executor: the parallel stages of ``index`` and ``scan`` as Ray tasks on a cluster.

``--executor ray`` (or ``NEAR_DEDUP_EXECUTOR=ray``) hands the same work that the local process
pool does — normalize + sign + compress chunks in ``index``, exact Jaccard + guard over
candidate chunks in ``scan`` — to Ray tasks. The cluster is the one ``RAY_ADDRESS`` names
(``auto``, ``ray://head:10001``, ``host:6379``), read by Ray itself; when it is unset a local
Ray is started for the run and stopped at its end.

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

import logging
import os
import socket
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from near_dedup_core.errors import NearDedupError

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
        address = address or os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():
            if address:
                _reachable(address)
            try:
                ray.init(address=address, num_cpus=None if address else local_cpus,
                         include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"cluster {address}" if address else "a local Ray"
                raise NearDedupError(f"ray: cannot start or reach {where}: "
                                     f"{_first_line(exc)}") from None
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
            self._ray.shutdown()
            self._started = False


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
