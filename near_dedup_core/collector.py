"""Python's cyclic garbage collector during bulk work.

CPython runs a young collection whenever the container objects (tuples, lists, dicts)
allocated and not yet freed exceed 700, and a full one, which walks every live container,
after ten middle ones once the objects that survived since the last full collection reach a
quarter of all long-lived ones. A scan or an index batch holds millions of containers at a
time (the row tuples of a query, the lists of rows for ``executemany``), so building them
triggers dozens of full walks over everything alive, and none of it is garbage: the
product's records hold no reference cycles. On the 1M pool that was 5.6 s of the scan's 21 s
of main-process CPU (31 full collections that freed 41 objects).

`rare_collections` raises the young threshold to `YOUNG_THRESHOLD` for a bulk command (`index`,
`scan`, `contamination`, and a mixture's plan and build): young collections come after
100,000 net allocations instead of 700, and full ones (ten middle ones later, with the
quarter rule unchanged) after about ten million. Garbage in cycles (a caught
exception's traceback, say) is still collected, a little later. A bulk command runs with
it while its work runs (`runtime.command`, applied by the CLI and the Dagster assets per
`runtime.PROFILES`); the pool's forkserver (`workers.guard_forkserver`) and its worker
processes (`near_dedup_core.workers`) for their whole life.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: net container allocations between young collections during bulk work (CPython: 700)
YOUNG_THRESHOLD = 100_000


def use_bulk_threshold() -> None:
    """Raise the young threshold of this process to `YOUNG_THRESHOLD` (older generations keep
    theirs)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)


@contextmanager
def rare_collections() -> Iterator[None]:
    """`use_bulk_threshold` for the duration of the block; the previous thresholds after it."""
    previous = gc.get_threshold()
    use_bulk_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*previous)
