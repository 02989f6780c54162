"""The per-bucket history join of an Iceberg index on its data files as they are: every
bucket's files (`snapshot.bucket_hits`) probed with a sample of the index's distinct keys (a
tenth by default), one task after another on one thread. Printed: band files per bucket,
the join's total and per-task times. Run it before and after ``index compact`` to see what
a batch's several files per bucket (one per band chunk) cost the join.

    python -m bench.iceberg_join --index iceberg:///tmp/icebench-1m/pool-iceberg
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import orjson

from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.snapshot import (
    IcebergSnapshot,
    Pinned,
    bucket_hits,
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True, help="an iceberg:///folder index")
    ap.add_argument("--probe-share", type=float, default=0.1)
    args = ap.parse_args(argv)
    pinned = Pinned(args.index)
    keys = np.unique(pinned.read("bands", ("key",)).column("key").to_numpy())
    rng = np.random.default_rng(1)
    probes = np.sort(rng.choice(keys, int(len(keys) * args.probe_share), replace=False))
    tasks = IcebergSnapshot(pinned).bucket_tasks(probes)
    skip = np.zeros(0, np.int64)
    times, hits = [], 0
    for paths, bucket_probes in tasks:
        start = time.perf_counter()
        found, _ = bucket_hits(paths, bucket_probes, skip, 0, -1)
        times.append(time.perf_counter() - start)
        hits += len(found)
    files = [len(paths) for paths, _ in tasks]
    t = np.asarray(times)
    print(orjson.dumps({
        "index": args.index,
        "buckets": int(dict(pinned.rows("meta", ("key", "value")))[it.BUCKETS_KEY]),
        "band_files": int(sum(files)), "files_per_bucket": sorted(set(files)),
        "probes": len(probes), "hits": hits,
        "join_s": round(float(t.sum()), 3), "task_median_s": round(float(np.median(t)), 4),
        "task_p90_s": round(float(np.percentile(t, 90)), 4),
        "task_max_s": round(float(t.max()), 4)}, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
