"""What one record costs an `index` worker, stage by stage: CPU microseconds per record of
`ingest.work.process_block` over the first ``--blocks`` line blocks of a package, and of the
stages it is made of, each timed on its own over the same blocks, in this process (pin it
to one core with ``taskset``).

With ``--index`` (an index that already holds most of the package's texts, such as the base
of `bench.cumulative_ab`) the blocks are looked up there as an appending batch's workers
do, on a read connection kept for the whole run: this is the cost of a cumulative snapshot,
where most records only need their line parsed, their compared text hashed and looked up.

Stages:

- ``parse``: `package.parse_block` (orjson and the record checks);
- ``text sha256``: `compare.text_sha256` of every compared text (UTF-8 encoding + SHA-256);
- ``lookup``: `index_store.KnownTexts.contents` of the block's distinct hashes;
- ``rest``: the whole block minus those three: the record loop, and the normalization,
  signing and compression of the texts the index did not know.

Each round times every stage over all blocks, one stage after the other; the figure kept is
the best round, so that the box's slower minutes (round twelve in `git log -p docs/benchmarks.md`) count
as little as they can.

Usage::

    taskset -c 1 .venv/bin/python -m bench.record_costs --package bench/out/pkg/cumulative-1m \\
        --index bench/out/cumulative-ab/base.sqlite --blocks 80
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from near_dedup_core import index_store as db
from near_dedup_core.collector import use_bulk_threshold
from near_dedup_core.compare import compared_text, text_sha256
from near_dedup_core.config import load_config
from near_dedup_core.ingest import work
from near_dedup_core.normalize import build_table
from near_dedup_core.package import LineBlock, parse_block
from near_dedup_core.params import WorkerParams

from bench.cpu_probe import first_blocks

ROOT = Path(__file__).resolve().parent.parent


def costs(package: Path, blocks: int, index: Path | None, config: Path,
          rounds: int) -> dict[str, float]:
    """Best-round CPU seconds per record of each stage (and of the whole block)."""
    use_bulk_threshold()  # as in a pool worker
    cfg = load_config(config)
    pkg, found = first_blocks(package, blocks + 2)
    warm, timed = found[:2], found[2:]
    params = WorkerParams.of(cfg)
    build_table()
    known_texts = str(index.resolve()) if index is not None else None
    work.init_worker(None, 0)  # lookups on one connection kept for the run, as a pool worker's
    dictionary = work.process_block(work.BlockJob(warm[0], params, pkg.tokenizer, known_texts,
                                                  None, True, True, False)).dictionary

    def job(block: LineBlock) -> work.BlockJob:
        return work.BlockJob(block, params, pkg.tokenizer, known_texts, dictionary, False,
                             False, False)

    texts = [[compared_text(b.kind, data) for _sid, data, ref in parse_block(b).records
              if ref is None] for b in timed]
    hashes = [sorted({text_sha256(t) for t in block_texts}) for block_texts in texts]
    lookups = db.open_known_texts(known_texts, cached=True) if known_texts else None
    # each stage keeps one block's results at a time, as a worker does
    stages: dict[str, Callable[[int], object]] = {
        "block": lambda k: work.process_block(job(timed[k])),
        "parse": lambda k: parse_block(timed[k]),
        "text sha256": lambda k: [text_sha256(t) for t in texts[k]],
    }
    if lookups is not None:
        stages["lookup"] = lambda k: lookups.contents(hashes[k])
    for block in warm[1:]:
        work.process_block(job(block))
    best = dict.fromkeys(stages, float("inf"))
    for _ in range(rounds):
        for name, run in stages.items():
            start = time.process_time()
            for k in range(len(timed)):
                run(k)
            best[name] = min(best[name], time.process_time() - start)
    if lookups is not None:
        lookups.close()
    records = sum(b.line_count for b in timed)
    per_record = {name: seconds / records for name, seconds in best.items()}
    per_record["rest"] = per_record["block"] - sum(v for k, v in per_record.items()
                                                   if k != "block")
    return per_record


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.record_costs",
                                description=__doc__.splitlines()[0])
    p.add_argument("--package", type=Path, required=True)
    p.add_argument("--index", type=Path, help="look the texts up in this index")
    p.add_argument("--blocks", type=int, default=80)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--config", type=Path, default=ROOT / "config" / "near-dedup.json")
    args = p.parse_args()
    per_record = costs(args.package, args.blocks, args.index, args.config, args.rounds)
    total = per_record["block"]
    print(f"{args.blocks} blocks of {args.package}"
          + (f", looked up in {args.index}" if args.index else ""))
    print("| stage | µs per record | share | CPU s per 10^6 records |")
    print("|---|---:|---:|---:|")
    for name in ("parse", "text sha256", "lookup", "rest", "block"):
        if name in per_record:
            us = per_record[name] * 1e6
            print(f"| {name} | {us:.2f} | {per_record[name] / total:.0%} | {us:.1f} |")


if __name__ == "__main__":
    main()
