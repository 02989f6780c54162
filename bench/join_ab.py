"""The per-bucket history join of two (or more) code versions, in turns, on the same band
folders (bench only; docs/measurements/2026-12-04-scale.md, "The per-bucket join").

Each ``--code`` is a checkout of the product (this one by default); each ``--bands`` a folder
written by ``bench.scale_history bands`` (by any version: the band files' layout is the
writer's of that version). For every round, every checkout and every folder, one new Python
process started in the checkout imports that checkout's `iceberg.snapshot.bucket_hits` and
runs each bucket's task on one thread, as ``bench.scale_history join`` does (the probes: the
distinct band keys of ``--probes``, a pool indexed alone, read once and handed to every
run; with ``--hit-every-row-group``, each row group's lowest key added to its bucket's probes,
so that every row group holds a hit, as in a history with near copies everywhere). Printed
per run: the tasks' wall and the process's CPU seconds (a version that decodes
on several threads shows it there), band rows per second of each, the task distribution,
bytes per band row, the load average before and after.

::

    python -m bench.join_ab --probes iceberg://$PWD/bench/out/pool-index \\
        --bands bench/out/bands-old --bands bench/out/bands-new --code /path/to/old --code .
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent

#: The run in a checkout: argv = probes.npz, bands folder, "1" to add a hit in every row group;
#: prints one JSON object.
WORKER = r"""
import os, sys, time
from pathlib import Path
import numpy as np, orjson, pyarrow.parquet as pq
from near_dedup_core.index_store.iceberg.bands import bucket_hits, bucket_of

data = np.load(sys.argv[1])
probes, pool_last = data["keys"], int(data["last"])
folder = Path(sys.argv[2])
buckets = orjson.loads((folder / "bands.json").read_bytes())["buckets"]
parts = sorted(folder.glob("bucket=*/*.parquet"),
               key=lambda p: int(p.parent.name.split("=")[1]))
of = bucket_of(probes, buckets)
tasks = [([str(p)], probes[of == int(p.parent.name.split("=")[1])]) for p in parts]
if sys.argv[3] == "1":  # one probe more per row group: its lowest key, a hit in each
    def lowest(p):
        meta = pq.ParquetFile(p).metadata
        at = meta.schema.to_arrow_schema().get_field_index("key")
        return [meta.row_group(g).column(at).statistics.min for g in range(meta.num_row_groups)]
    tasks = [(paths, np.unique(np.concatenate([mine, np.asarray(lowest(paths[0]), np.int64)])))
             for paths, mine in tasks]
rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
size = sum(p.stat().st_size for p in parts)
load_before = [round(x, 2) for x in os.getloadavg()]
times, hits, skip = [], 0, np.zeros(0, np.int64)
cpu = time.process_time()
for paths, mine in tasks:
    t = time.perf_counter()
    keys, _ = bucket_hits(paths, mine, skip, 1, pool_last)
    times.append(time.perf_counter() - t)
    hits += len(keys)
cpu = time.process_time() - cpu
arr = np.asarray(times)
print(orjson.dumps({
    "tasks": len(tasks), "band_rows": rows, "bytes_per_row": round(size / rows, 2),
    "hits": hits, "total_s": round(float(arr.sum()), 4), "cpu_s": round(cpu, 4),
    "rows_per_s": round(rows / float(arr.sum())), "rows_per_cpu_s": round(rows / max(cpu, 1e-9)),
    "median_s": round(float(np.median(arr)), 4), "p90_s": round(float(np.percentile(arr, 90)), 4),
    "max_s": round(float(arr.max()), 4), "load_before": load_before,
    "load_after": [round(x, 2) for x in os.getloadavg()]}).decode())
"""


def commit_of(code: Path) -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=code,
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.join_ab",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--probes", required=True, help="iceberg:/// index of the pool alone")
    ap.add_argument("--bands", type=Path, action="append", required=True,
                    help="a folder written by `bench.scale_history bands` (repeatable)")
    ap.add_argument("--code", type=Path, action="append",
                    help="a checkout of the product (repeatable; default: this one)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hit-every-row-group", action="store_true",
                    help="add each row group's lowest key to the probes: a hit in every row "
                         "group (a history with near copies everywhere), not in none")
    args = ap.parse_args(argv)
    from bench.scale_history import probe_keys

    codes = [c.resolve() for c in (args.code or [ROOT])]
    for c in codes:
        if not (c / "near_dedup_core").is_dir():
            raise SystemExit(f"{c}: not a checkout of near-dedup (no near_dedup_core)")
    for f in args.bands:
        if not (f / "bands.json").is_file():
            raise SystemExit(f"{f}: not a folder of `bench.scale_history bands`")
    keys, last = probe_keys(args.probes)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        probes = Path(tmp) / "probes.npz"
        np.savez(probes, keys=keys, last=last)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        for r in range(args.rounds):
            for code in codes:
                for folder in args.bands:
                    done = subprocess.run(
                        [sys.executable, "-c", WORKER, str(probes), str(folder.resolve()),
                         "1" if args.hit_every_row_group else "0"],
                        cwd=code, env=env, capture_output=True, text=True)
                    if done.returncode:
                        raise SystemExit(f"{code} on {folder}: {done.stderr.strip()[-500:]}")
                    runs.append({"round": r + 1, "code": str(code), "commit": commit_of(code),
                                 "hit_every_row_group": args.hit_every_row_group,
                                 "bands": str(folder), **orjson.loads(done.stdout)})
                    print(orjson.dumps(runs[-1]).decode(), file=sys.stderr, flush=True)
    print(orjson.dumps({"probes": len(keys), "runs": runs},
                       option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
