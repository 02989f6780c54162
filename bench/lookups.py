"""What a day's content-id lookups cost against an Iceberg index, alone (docs/measurements/
2026-12-06-day-4.md, "Fewer lookups and their memory"): ``--calls`` lookups of ``--keys``
random content ids each, through the index's own lookup (`keyed.content_lookup`), in a
process of their own; its CPU, wall and peak RSS, and the files the lookup kept open, as
one JSON line. A 50,000-record day asks 49 lookups of about 1,000 new contents one block at
a time, about 26 of 1,900 when the writer asks for the blocks whose results are in. The
collector runs with the `index` command's threshold (`collector.use_bulk_threshold`), as
the writer's lookups do.

With ``--code CHECKOUT`` the process imports that checkout's ``near_dedup_core`` (say the
commit before, `git worktree add`), for a before/after run in turns::

    python -m bench.lookups --index iceberg://$PWD/bench/out/scale8/history --calls 26 \\
        --keys 1900 [--code /tmp/before] [--known 0.03] [--footer-chunks N]

``--known`` makes that share of each call's ids the index's own (a day's repeats, which pass
the Bloom filters and read their row groups); ``--footer-chunks`` sets how many footer
column chunks the lookup keeps open (`keyed.FOOTER_CHUNKS`), for an A/B in one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent

# run in the measured process (`python -c`), ``near_dedup_core`` from its PYTHONPATH
_CHILD = """
import resource, sys, time
import numpy as np
from near_dedup_core.collector import use_bulk_threshold
from near_dedup_core.index_store.iceberg import datafiles, keyed
from near_dedup_core.index_store.iceberg.keyed import content_lookup, content_rows
from near_dedup_core.index_store.iceberg.snapshot import Pinned
location, calls, keys, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
known, chunks = float(sys.argv[5]), int(sys.argv[6])
if chunks >= 0:
    keyed.FOOTER_CHUNKS = chunks
pinned = Pinned(location)
lookup = content_lookup(pinned)
rng = np.random.default_rng(seed)
asked = [[rng.bytes(16) for _ in range(keys)] for _ in range(calls)]
# a share of each call's ids are the index's own (four of a random row group at a time)
files = keyed.keyed_files(pinned, "content_keys")
for call in asked:
    share = int(keys * known)
    for at in range(0, share, 4):
        f = datafiles.parquet_file(files[rng.integers(len(files))].path)
        ids = f.read_row_group(int(rng.integers(f.num_row_groups)),
                               columns=["content_id"]).column(0).to_pylist()
        n = min(4, share - at)
        call[at:at + n] = [ids[int(i)] for i in rng.integers(len(ids), size=n)]
        del f
use_bulk_threshold()
cpu, wall = time.process_time(), time.perf_counter()
found = sum(len(content_rows(lookup, k)) for k in asked)
print(round(time.process_time() - cpu, 3), round(time.perf_counter() - wall, 3),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, found,
      getattr(lookup, "files_kept", 0))
"""


def measure(location: str, calls: int, keys: int, seed: int = 1,
            code: Path | None = None, known: float = 0.0, footer_chunks: int = -1) -> dict:
    """The lookups run in a new process (``code``'s ``near_dedup_core``, else this one's);
    ``known``: the share of each call's ids drawn from the index's own content ids;
    ``footer_chunks`` (when not negative): `keyed.FOOTER_CHUNKS` in that process."""
    env = {**os.environ, "PYTHONPATH": str(code or ROOT)}
    out = subprocess.run([sys.executable, "-c", _CHILD, location, str(calls), str(keys),
                          str(seed), str(known), str(footer_chunks)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        last = out.stderr.strip().splitlines() or [f"exit {out.returncode}"]
        raise SystemExit(f"bench.lookups: {last[-1]}")
    cpu, wall, peak, found, kept = out.stdout.split()
    return {"code": str(code or ROOT), "calls": calls, "keys": keys, "known": known,
            "footer_chunks": footer_chunks, "cpu_s": float(cpu),
            "wall_s": float(wall), "peak_rss_mib": int(peak), "found": int(found),
            "files_kept_open": int(kept)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.lookups", allow_abbrev=False)
    ap.add_argument("--index", required=True, help="an Iceberg index (iceberg:///…)")
    ap.add_argument("--calls", type=int, default=26)
    ap.add_argument("--keys", type=int, default=1900, help="content ids a call asks")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--code", type=Path, help="a checkout whose near_dedup_core runs them")
    ap.add_argument("--known", type=float, default=0.0,
                    help="the share of each call's ids that the index holds (a generated "
                         "day's lookups find almost none: its repeats are found by their raw "
                         "text first)")
    ap.add_argument("--footer-chunks", type=int, default=-1,
                    help="keyed.FOOTER_CHUNKS in the measured process (default: the code's)")
    args = ap.parse_args(argv)
    code = None if args.code is None else args.code.resolve()
    print(orjson.dumps(measure(args.index, args.calls, args.keys, args.seed, code, args.known,
                               args.footer_chunks)).decode())


if __name__ == "__main__":
    main()
