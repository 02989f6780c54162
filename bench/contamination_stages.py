"""Where `contamination`'s CPU goes, stage by stage, in one process (bench only).

Runs `contamination.run.compute` with one worker (the probe inline) on the items and pool
that ``bench.contamination_quality --speed`` wrote, with each stage's function wrapped in
``time.process_time``: reading the items, the anchor and run tables (``build_state``), the
probe of the pool (parsing, normalizing, both compiled kernels and the per-pair checks;
within it each kernel), the item spans; the total is the whole of ``compute`` (no report
is written). The code measured is the ``near_dedup_core`` on ``PYTHONPATH``: run it once per
checkout, in turns, to compare two.

    PYTHONPATH=CHECKOUT python -m bench.contamination_stages
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.contamination_quality import WORK


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--evals", type=Path, default=WORK / "speed" / "evals")
    ap.add_argument("--pool", type=Path, default=WORK / "pool")
    args = ap.parse_args(argv)
    from near_dedup_core.config import NearDedupConfig
    from near_dedup_core.contamination import probe
    from near_dedup_core.contamination import run as command
    from near_dedup_core.package import load_package

    spent: dict[str, float] = {}

    def timed(name: str, f: Callable) -> Callable:
        def wrapper(*a: Any, **k: Any) -> Any:
            start = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - start

        return wrapper

    wrapped = [
        (command, "read_items", "reading the items"),
        (command, "build_state", "anchor and run tables"),
        (command, "probe_pool", "probing the pool"),
        (probe, "probe_batch", "  containment kernel"),
        (probe, "exact_batch", "  word-run kernel"),
        (command, "item_span", "item spans"),
    ]
    originals = [getattr(module, name) for module, name, _ in wrapped]
    for (module, name, label), f in zip(wrapped, originals, strict=True):
        setattr(module, name, timed(label, f))
    try:
        evals, pool = [load_package(args.evals)], [load_package(args.pool)]
        start = time.process_time()
        command.compute(NearDedupConfig(), evals, pool, workers=1)
        total = time.process_time() - start
    finally:
        for (module, name, _), f in zip(wrapped, originals, strict=True):
            setattr(module, name, f)
    for label, seconds in spent.items():
        print(f"{label}: {seconds:.2f} s")
    print(f"total (compute): {total:.2f} s")


if __name__ == "__main__":
    main()
