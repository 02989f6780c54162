"""How a command's process is set up and ended, per command, in one table (`PROFILES`),
applied by the two entry points around the command's work (`command`): the CLI (`cli.run`,
`cli.console_main`) and the Dagster assets (``near_dedup_assets``). The stages themselves
(``index_packages``, ``scan_pool``, ``contamination_report``, ``plan_mixture``,
``build_mixture``) leave the process as they find it; a library caller that wants the same
set-up uses `command` too.

What a profile asks for:

- ``bulk``: rare garbage collections while the command runs (`collector.rare_collections`):
  a bulk command builds millions of containers, none of them garbage (`index find` builds
  hundreds of thousands, its queries' and its answers': at the default threshold, 10,000
  queries against a 1M index cost its main thread 0.3 s of collections that freed a few
  hundred objects);
- ``kernels``: load numba first (`jit`), for a command whose own process runs compiled
  kernels;
- ``pool``: the modules the workers of a local pool run: their forkserver is started before
  the command imports its own modules, when the inputs hold enough records to use the pool
  (`workers.POOL_RECORDS`), so that the server's imports overlap the command's.

`begin` starts a CLI process, before it loads numpy: glibc's allocator is asked for one arena
(`workers.one_arena`; the pool's forkserver asks too, and its workers inherit it), and
OpenBLAS (loaded with numpy and scipy) for one thread unless ``OPENBLAS_NUM_THREADS`` says
otherwise (no command multiplies matrices; the pool's processes inherit the setting). By
default each thread that allocates gets an arena of its own, which reserves 64 MiB of address
space, and OpenBLAS starts a thread per core with buffers of its own: a command of a few
threads reserved over 200 MiB it never used, and under an address-space cap (``ulimit -v``,
RLIMIT_AS) its threads failed to start, or glibc aborted the process.

`finish` ends a CLI process: every object still alive is frozen (``gc.freeze``), so that the
interpreter's last collections skip numba's, SQLAlchemy's and pydantic's objects; exit
handlers still run.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from near_dedup_core.collector import rare_collections
from near_dedup_core.errors import NearDedupError
from near_dedup_core.workers import (
    POOL_RECORDS,
    Executors,
    choose_executor,
    one_arena,
    start_forkserver,
)

if TYPE_CHECKING:
    from near_dedup_core.storage import Location


@dataclass(frozen=True)
class Profile:
    bulk: bool = False
    kernels: bool = False
    pool: tuple[str, ...] = ()


#: `index` workers run `ingest.work.WORKER_MODULES` (kept there, beside the work they do).
_INDEX_POOL = ("near_dedup_core.ingest.work",)

#: A pool's modules are given by their dotted names, not imported: the forkserver imports
#: them while this process imports its own (`tests/test_startup.py` checks that every name
#: here, in `ingest.work.WORKER_MODULES`, `contamination.probe.PRELOAD` and the backends'
#: `worker_modules` is a module of the package).

PROFILES: dict[str, Profile] = {
    "index": Profile(bulk=True, pool=_INDEX_POOL),
    "scan": Profile(bulk=True, kernels=True,
                    pool=("near_dedup_core.scan", "near_dedup_core.normalize",
                          "near_dedup_core.scan.verify")),
    "contamination": Profile(bulk=True, kernels=True),
    "index find": Profile(bulk=True, kernels=True),
    "mixture": Profile(bulk=True),
    "report": Profile(bulk=True),
}


@contextmanager
def command(name: str, *, inputs: Sequence[str | Path | Location] = (), workers: int = 1,
            executor: str | Executors = "local", index: str | Path | None = None
            ) -> Iterator[None]:
    """This process set up for the command ``name`` (a key of `PROFILES`; others need
    nothing) while the block runs: the collector's thresholds are as before after it."""
    profile = PROFILES.get(name, Profile())
    with rare_collections() if profile.bulk else nullcontext():
        if profile.pool and inputs and choose_executor(executor, workers).shares_memory:
            _start_pool_early(profile.pool, inputs, index)
        if profile.kernels:
            import near_dedup_core.jit  # noqa: F401
        yield


def _start_pool_early(pool: tuple[str, ...], inputs: Sequence[str | Path | Location],
                      index: str | Path | None) -> None:
    """Start the forkserver of the pool the command is about to need, if its inputs hold
    more than `workers.POOL_RECORDS` records. Whatever is wrong with the inputs is left to
    the command to report; an index whose inputs are indexed already leaves it unused."""
    from near_dedup_core.index_store import open_index
    from near_dedup_core.package import load_package
    from near_dedup_core.storage import parse_location

    try:
        if not all(parse_location(path).is_local for path in inputs):
            return  # a package on object storage is opened once, by the command
        records = sum(load_package(path).record_count for path in inputs)
    except (NearDedupError, OSError, ValueError):
        return
    if records <= POOL_RECORDS:
        return
    if pool == _INDEX_POOL:  # an index worker's modules import neither SQLAlchemy nor pydantic
        from near_dedup_core.ingest.work import WORKER_MODULES

        pool = WORKER_MODULES
    if index is not None:  # what the workers read the index with (their own connections)
        try:
            pool = (*open_index(index).worker_modules, *pool)
        except NearDedupError:
            pass  # an index location the command refuses itself
    start_forkserver(pool)


#: The environment variable that sets how many threads OpenBLAS starts (read as it loads).
OPENBLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"


def begin() -> None:
    """The start of a CLI process (see the module doc)."""
    one_arena()
    os.environ.setdefault(OPENBLAS_THREADS_ENV, "1")


def finish() -> None:
    """The end of a CLI process (see the module doc)."""
    gc.freeze()
