"""What a scan takes at its start, before its memory grows: the thread that writes
``decisions.jsonl`` (`write.write_report`) and the compiled kernels its own process runs.

Under an address-space cap (``ulimit -v``, RLIMIT_AS) what fails late in a run is whatever
is mapped late, and some of it cannot fail cleanly: a thread's stack (Python raises "can't
start new thread", which the CLI reports in one line), but also a compiled kernel that numba
loads from its cache (or compiles) at its first call, in LLVM, which aborts the process when
an allocation fails (``std::bad_alloc``, "LLVM ERROR: out of memory"), and a new thread's
first use of a library's thread-local data, which glibc allocates lazily and aborts on
("cannot allocate memory for thread-local data"). Python can catch none of these: the
process dies with SIGABRT, its staging folder left behind.

So a scan starts its writer thread as it opens its output (a thread that cannot start is the
one-line ``out of memory`` error there, nothing written yet), and that thread's first task,
which the scan waits for before it does anything else, asks for `KERNEL_ROOM` (LLVM aborts
where numpy raises MemoryError: `write.headroom`), then loads every kernel of the scan's
own process (`_kernels`) and runs the decisions kernel once on nothing: each kernel is in
memory and the thread has touched what it will use before the pool, the candidates and the
report's columns take their space. The kernels are loaded for the argument types the scan
passes them (`tests/test_exhaustion.py` checks that a scan loads none later); a cold cache
compiles them here, once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from near_dedup_core.jit import numba

types = numba.types


def _c(dtype: Any, ndim: int = 1, *, readonly: bool = False) -> Any:
    return types.Array(dtype, ndim, "C", readonly=readonly)


_I = _c(types.int64)
_RO_BYTES = _c(types.uint8, readonly=True)


def _kernels(inline: bool) -> list[tuple[Any, tuple]]:
    """(kernel, argument types) of each kernel the scan's own process calls, as it calls
    them (with ``inline``, the verification's too): a type that differs (a dtype, a layout,
    a read-only array) is another overload, loaded at the first call."""
    from near_dedup_core.scan import candidates, decide, write
    from near_dedup_core.signature import band_keys_into, components, pair_common_utf8

    sig16 = _c(types.uint16, 2)
    kernels = [
        (band_keys_into, (sig16, types.int64, types.int64, _c(types.int64, 2))),
        (candidates.band_runs, (_I, _I, _c(types.int64, 2), _I)),
        (candidates.insert_run_pairs, (_I, _I, types.int64, _I, _I)),
        (candidates.filter_pairs, (_I, _I, sig16, _I, sig16, _I, types.float64,
                                   types.int64)),
        (components, (types.Array(types.int64, 1, "A"), types.Array(types.int64, 1, "A"),
                      types.int64)),
        (decide.greedy, (_c(types.bool_), _c(types.bool_), _I, _I, _c(types.float64),
                          _c(types.int8), _c(types.int8), _I, _c(types.float64))),
        (write.render_decisions, (types.int64, types.int64, _c(types.uint8), types.int64,
                                   *[_I] * 7, _RO_BYTES, _I, _RO_BYTES, _I, _RO_BYTES, _I,
                                   _RO_BYTES, _I, types.int64, types.int64, types.int64)),
    ]
    if inline:
        kernels.append((pair_common_utf8, (_RO_BYTES, _I, types.int64, types.uint64, _I,
                                            _c(types.bool_), types.int64, _I, _I, _I, _I,
                                            _I)))
    return kernels


#: Address space that must be free before numba loads the kernels (it took 20 MiB, the
#: thread's stack included, on a warm cache).
KERNEL_ROOM = 64 << 20


def load_kernels(inline: bool = False) -> None:
    """Load (or compile) `_kernels` now, once `KERNEL_ROOM` is free, then run the decisions
    kernel on nothing and hash nothing in this thread (the one that will write
    ``decisions.jsonl``)."""
    from near_dedup_core.scan import write

    write.headroom(KERNEL_ROOM)
    for kernel, args in _kernels(inline):
        kernel.compile(args)
    write.render_nothing()
    hashlib.sha256(b"").hexdigest()


@contextmanager
def reserved(inline: bool) -> Iterator[ThreadPoolExecutor]:
    """The scan's writer thread, started now, once it has run `load_kernels` (with
    ``inline``, the verification runs in this process: its kernel too). On the way out it is
    joined (a ``decisions.jsonl`` it is writing is finished before its folder is removed),
    unless the wait for its first task was stopped (a SIGTERM: seconds, on a cold cache)."""
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="near-dedup-writer")
    loaded = False
    try:
        thread.submit(load_kernels, inline).result()
        loaded = True
        yield thread
    except BaseException:
        thread.shutdown(wait=loaded, cancel_futures=True)
        raise
    thread.shutdown(wait=True)
