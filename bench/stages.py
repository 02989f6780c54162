"""Run the CLI in this process with the main process's stages timed: each named function
prints its wall and CPU seconds (of this process) to stderr when it returns, so a stage's
share of a run, and whether the main process was alone meanwhile (`bench.timeline`), can be
read off one run. Workers are not timed (they run in other processes).

The stages are the functions the entry points call by module attribute; ``--stage
module:name`` (repeatable) times others, ``module:Class.method`` methods. With ``--totals``
each stage prints once, at the exit: its calls, and its wall and CPU seconds summed over
them, the CPU of the calling thread only (``time.thread_time``), so that a function called
once per block (`BatchTransaction.add_sources`, say) is one line, not a thousand, and the
pool's result thread, which runs meanwhile, is not counted in it. A stage that calls
another counts the inner one's time too.

Usage (from the checkout to measure, so that its code is the one imported)::

    cd bench/out/e2e-ab/tree-REV && PYTHONPATH=$PWD python -m bench.stages -- \\
        --config config/near-dedup.json --index /tmp/i.sqlite index --inputs ... --workers 2
"""

from __future__ import annotations

import argparse
import functools
import importlib
import resource
import runpy
import sys
import time

#: The main process's stages of `index` and `scan`.
DEFAULT_STAGES = (
    "near_dedup_core.ingest.batch:BatchWriter._write_tail",
    "near_dedup_core.ingest.run:_append_in",
    "near_dedup_core.scan.run:load_pool",
    "near_dedup_core.scan.run:build_nodes",
    "near_dedup_core.scan.run:pool_candidates",
    "near_dedup_core.scan.run:report_columns",
    "near_dedup_core.scan.verify:VerifyJob.collect",
    "near_dedup_core.scan.run:decide",
    "near_dedup_core.scan.write:write_lines",
    "near_dedup_core.scan.run:write_report",
)

_T0 = time.perf_counter()
#: With ``--totals``: label -> [calls, wall seconds, CPU seconds of the calling thread].
_TOTALS: dict[str, list[float]] | None = None


def _timed(label: str, func):
    @functools.wraps(func)
    def timed(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            print(f"[{time.perf_counter() - _T0:7.2f} s] {label}: "
                  f"{time.perf_counter() - wall:.2f} s wall, "
                  f"{time.process_time() - cpu:.2f} s CPU", file=sys.stderr, flush=True)
    return timed


def _summed(label: str, func):
    assert _TOTALS is not None
    total = _TOTALS.setdefault(label, [0, 0.0, 0.0])

    @functools.wraps(func)
    def summed(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            total[0] += 1
            total[1] += time.perf_counter() - wall
            total[2] += time.thread_time() - cpu
    return summed


def _wrap(spec: str) -> None:
    module_name, _, path = spec.partition(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    wrap = _timed if _TOTALS is None else _summed
    setattr(owner, name, wrap(path, getattr(owner, name)))


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.stages", description=__doc__.splitlines()[0])
    p.add_argument("--stage", action="append", help="module:function to time (repeatable)")
    p.add_argument("--totals", action="store_true",
                   help="one line per stage at the exit: calls, summed wall and thread CPU")
    p.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the near-dedup arguments")
    args = p.parse_args()
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    global _TOTALS
    if args.totals:
        _TOTALS = {}
    for spec in args.stage or DEFAULT_STAGES:
        _wrap(spec)
    sys.argv = ["near-dedup", *cli]
    try:
        runpy.run_module("near_dedup_core", run_name="__main__")
    finally:
        for label, (calls, wall, cpu) in (_TOTALS or {}).items():
            print(f"{label}: {calls:,.0f} calls, {wall:.2f} s wall, {cpu:.2f} s CPU of the "
                  f"calling thread", file=sys.stderr)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(f"[{time.perf_counter() - _T0:7.2f} s] exit: main process "
              f"{usage.ru_utime + usage.ru_stime:.1f} s CPU", file=sys.stderr, flush=True)


if __name__ == "__main__":  # the forkserver's workers import this module's parent, never run it
    main()
