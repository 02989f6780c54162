"""`scan` from a cold page cache, with and without the read-ahead hint
(`index_store.read_ahead`), alternating in one run; and, for comparison, `index` appending a
package to a cold index with and without the same hint given before it.

A daily scan or batch meets an index file that left the page cache hours ago. Before each
run the index file is dropped from the cache (``posix_fadvise`` DONTNEED; its pages are
clean, so they go) and the package is read through (so that only the index is cold); the run
is the library call the CLI makes (`scan_pool`, or `index_packages` on a fresh copy of
``--index`` for ``--append``), in this process, with its worker pool. For a scan, "no hint"
sets `READ_AHEAD_SHARE` to 0, so that `read_ahead` asks for nothing; `index` does not ask
(a batch reads little of the index), so for ``--append`` "hint" asks before the call. Prints
wall seconds per run.

Usage::

    python -m bench.cold_index --index INDEX --scan POOL [--rounds 2] [--workers 2]
    python -m bench.cold_index --index BASE --append CUMULATIVE [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from near_dedup_core import runtime
from near_dedup_core.config import load_config
from near_dedup_core.index_store import snapshot as db
from near_dedup_core.ingest.run import index_packages
from near_dedup_core.scan import scan_pool

from bench.measure import read_through

CONFIG = Path(__file__).resolve().parents[1] / "config" / "near-dedup.json"


def drop_from_cache(path: Path) -> None:
    """Ask the kernel to drop ``path``'s clean pages from its page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def one_run(args: argparse.Namespace, hint: bool, tmp: Path) -> float:
    config = load_config(CONFIG)
    db.READ_AHEAD_SHARE = 0.5 if hint else 0.0  # read by read_ahead when it runs
    if args.scan is not None:
        index, out = args.index, tmp / "report"
        read_through(args.scan)
        drop_from_cache(index)
        start = time.perf_counter()
        scan_pool(index, config, [args.scan], out, workers=args.workers)
        wall = time.perf_counter() - start
        shutil.rmtree(out)
        return wall
    index = tmp / "index.sqlite"
    shutil.copyfile(args.index, index)
    read_through(args.append)
    drop_from_cache(index)
    start = time.perf_counter()
    db.read_ahead(index)
    with runtime.command("index"):  # the collector's set-up of the CLI's `index`
        index_packages(index, config, [args.append], workers=args.workers)
    wall = time.perf_counter() - start
    for leftover in tmp.iterdir():
        leftover.unlink()
    return wall


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.cold_index",
                                description=__doc__.splitlines()[0])
    p.add_argument("--index", type=Path, required=True)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--scan", type=Path, help="a package indexed in --index")
    what.add_argument("--append", type=Path, help="a package to index on a copy of --index")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    walls: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(dir=args.index.parent) as tmp:
        for r in range(args.rounds):
            for hint in ((True, False) if r % 2 == 0 else (False, True)):
                wall = one_run(args, hint, Path(tmp))
                walls[hint].append(wall)
                print(f"round {r}, {'hint' if hint else 'no hint'}: {wall:.1f} s", flush=True)
    for hint in (True, False):
        w = walls[hint]
        print(f"{'hint' if hint else 'no hint'}: mean {sum(w) / len(w):.1f} s "
              f"({', '.join(f'{x:.1f}' for x in w)})")


if __name__ == "__main__":
    main()
