"""Where the probe runs (``--executor``): the one place the contamination command opens its
work pool (`near_dedup_core.workers.choose_executor`), and how a task reaches the probe state there.
A local pool's workers get the state once, when they start (`probe.init_probe_worker`); a Ray task
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
    init_probe_worker,
    probe_block,
    probe_block_carrying,
    probe_contents,
    probe_utf8_carrying,
)
from near_dedup_core.package import LineBlock
from near_dedup_core.workers import Executors, choose_executor, parallelism


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


def start_early(executor: str | Executors, workers: int) -> None:
    """Begin starting the pool now (a local pool's forkserver), so that its start overlaps
    reading the items."""
    choose_executor(executor, workers).start_early(PRELOAD)


@contextmanager
def probe_workers(executor: str | Executors, workers: int,
                  state: ProbeState) -> Iterator[Probes]:
    """The work pool of ``--executor`` with ``workers`` (`workers.choose_executor`), ready to
    probe with ``state``: its workers start with it, or each task carries it."""
    chosen = choose_executor(executor, workers)
    with chosen.start(init_probe_worker, (state,), PRELOAD) as ex:
        carried = chosen.carry(state)
        if chosen.in_process:
            init_probe_worker(state)
        yield Probes(ex.submit, parallelism(ex, chosen.workers), carried,
                     inline=chosen.in_process)
