"""Run the CLI in this process with the main process's stages timed: each named function
prints its wall and CPU seconds (of this process) to stderr when it returns, so a stage's
share of a run, and whether the main process was alone meanwhile (`bench.timeline`), can be
read off one run. Workers are not timed (they run in other processes).

The stages are the functions the entry points call by module attribute; ``--stage
module:name`` (repeatable) times others, ``module:Class.method`` methods.

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
    "near_dedup_core.ingest:_append_batch",
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


def _wrap(spec: str) -> None:
    module_name, _, path = spec.partition(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    setattr(owner, name, _timed(path, getattr(owner, name)))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__.splitlines()[0])
    p.add_argument("--stage", action="append", help="module:function to time (repeatable)")
    p.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the near-dedup arguments")
    args = p.parse_args()
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    for spec in args.stage or DEFAULT_STAGES:
        _wrap(spec)
    sys.argv = ["near-dedup", *cli]
    try:
        runpy.run_module("near_dedup_core", run_name="__main__")
    finally:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(f"[{time.perf_counter() - _T0:7.2f} s] exit: main process "
              f"{usage.ru_utime + usage.ru_stime:.1f} s CPU", file=sys.stderr, flush=True)


if __name__ == "__main__":  # the forkserver's workers import this module's parent, never run it
    main()
