"""Where the probe runs (``--executor``): the one place the contamination command opens its
work pool (`near_dedup_core.workers.work_pool`), and how a task reaches the probe state there.
A local pool's workers get the state once, when they start (`probe._init_worker`); a Ray task
carries it as one object put in Ray's object store, and gets the texts of an indexed pool
from the driver, which reads them from its snapshot (a Ray node need not reach the index)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from near_dedup_core.contamination.probe import (
    PRELOAD,
    ProbeState,
    _init_worker,
    probe_block,
    probe_block_carrying,
    probe_contents,
    probe_utf8_carrying,
)
from near_dedup_core.package import LineBlock
from near_dedup_core.workers import parallelism, start_forkserver, work_pool


@dataclass(frozen=True)
class Probes:
    """Submits probe tasks to the command's work pool."""

    submit: Callable[..., Future]
    parallelism: int
    carried: Any  # what a task carries instead of the workers' state; None locally
    inline: bool  # the tasks run in this process (one worker)

    def block(self, block: LineBlock, max_chars: int) -> Future:
        """`probe.probe_block` of a line block of the pool."""
        if self.carried is None:
            return self.submit(probe_block, block, max_chars)
        return self.submit(probe_block_carrying, self.carried, block, max_chars)

    def contents(self, snap: Any, ids: list[int]) -> Future:
        """`probe.probe_contents` of content rows of an index snapshot: read by a local
        worker on its own connection (by this process with one worker), shipped to Ray."""
        if self.carried is None:
            return self.submit(probe_contents, snap if self.inline else snap.location, ids)
        return self.submit(probe_utf8_carrying, self.carried, snap.utf8_texts(ids), ids,
                           str(snap.path))


def start_early(executor: str, workers: int) -> None:
    """Start the local pool's forkserver now, so that its start overlaps reading the items."""
    if executor == "local" and workers > 1:
        start_forkserver(PRELOAD)


@contextmanager
def probe_workers(executor: str, workers: int, state: ProbeState) -> Iterator[Probes]:
    """The work pool of ``--executor`` with ``workers`` (`work_pool`), ready to probe with
    ``state``."""
    from near_dedup_core.ray_executor import RayExecutor, import_ray

    with work_pool(executor, workers, _init_worker, (state,), PRELOAD) as ex:
        carried = None
        if isinstance(ex, RayExecutor):
            carried = import_ray().put(state)
        elif workers <= 1:
            _init_worker(state)
        yield Probes(ex.submit, parallelism(ex, workers), carried,
                     inline=carried is None and workers <= 1)
