"""How fast the box's CPU is right now, in our own work: CPU seconds of
`ingest.work.process_block` over the first ``--blocks`` line blocks of a package, in this
process (pin it to one core with ``taskset``), after two untimed blocks.

The box is shared and its CPU speed moves by a third between hours with the same code
(round twelve in `git log -p docs/benchmarks.md`), without any stall that `bench.measure.BoxStalls` would
count. A probe run beside a benchmark says which kind of hour its figures come from; compare
probes of the same code only (the work is the code's own).

Usage::

    taskset -c 1 .venv/bin/python -m bench.cpu_probe --package bench/out/pkg/pool-1m --blocks 80
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from near_dedup_core.config import load_config
from near_dedup_core.ingest import work
from near_dedup_core.normalize import build_table
from near_dedup_core.package import LineBlock, Package, open_packages, read_blocks
from near_dedup_core.params import WorkerParams

ROOT = Path(__file__).resolve().parent.parent


def first_blocks(package: Path, count: int) -> tuple[Package, list[LineBlock]]:
    """The package and its first ``count`` line blocks, as an `index` batch cuts them."""
    (pkg,) = open_packages([package])
    found: list[LineBlock] = []
    for event in read_blocks([pkg]):
        if isinstance(event, LineBlock):
            found.append(event)
            if len(found) >= count:
                break
    return pkg, found


def probe(package: Path, blocks: int, config: Path) -> float:
    """CPU seconds of `work.process_block` over the first ``blocks`` blocks of ``package``
    (each compressed with the dictionary trained on the first, as a batch does)."""
    cfg = load_config(config)
    pkg, found = first_blocks(package, blocks)
    params = WorkerParams.of(cfg)
    build_table()

    def job(block: LineBlock, dictionary: bytes | None, train: bool = False) -> work.BlockJob:
        return work.BlockJob(block, params, pkg.tokenizer, None, dictionary, train, train,
                             False)

    dictionary = work.process_block(job(found[0], None, train=True)).dictionary
    for block in found[1:3]:  # untimed: the compiled kernels are loaded
        work.process_block(job(block, dictionary))
    start = time.process_time()
    for block in found:
        work.process_block(job(block, dictionary))
    return time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.cpu_probe",
                                description=__doc__.splitlines()[0])
    p.add_argument("--package", type=Path, required=True)
    p.add_argument("--blocks", type=int, default=80)
    p.add_argument("--config", type=Path, default=ROOT / "config" / "near-dedup.json")
    args = p.parse_args()
    print(f"{probe(args.package, args.blocks, args.config):.2f} s of CPU for "
          f"{args.blocks} blocks of {args.package}")


if __name__ == "__main__":
    main()
