"""The band-key bucket count of an Iceberg index, measured on the band rows of an existing
one: for each count, the rows are written as one Parquet file per bucket (sorted by key, in
the layout of a batch's files, `batch.BAND_FILE_OPTIONS`), then joined per bucket
(`snapshot.bucket_hits`) with a sample of the keys as probes (a tenth by default: a pool
whose keys partly hit the history). Printed: the files' write time, the join's total and per-task times, one thread.

    python -m bench.iceberg_buckets --index iceberg:///tmp/icebench-1m-b/pool-iceberg
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from near_dedup_core.index_store.iceberg.bands import bucket_hits, bucket_of
from near_dedup_core.index_store.iceberg.batch import BAND_FILE_OPTIONS
from near_dedup_core.index_store.iceberg.snapshot import Pinned


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True, help="an iceberg:///folder index")
    ap.add_argument("--counts", default="16,64,256,1024")
    ap.add_argument("--probe-share", type=float, default=0.1)
    args = ap.parse_args(argv)
    rows = Pinned(args.index).read("bands", ("key", "content"))
    keys = rows.column("key").to_numpy()
    contents = rows.column("content").to_numpy()
    order = np.lexsort((contents, keys))
    keys, contents = keys[order], contents[order]
    distinct = np.unique(keys)
    rng = np.random.default_rng(1)
    probes = np.sort(rng.choice(distinct, int(len(distinct) * args.probe_share), replace=False))
    out = []
    for count in [int(c) for c in args.counts.split(",")]:
        folder = Path(tempfile.mkdtemp(prefix=f"buckets-{count}-"))
        try:
            of = bucket_of(keys, count)
            by = np.argsort(of, kind="stable")
            bounds = np.searchsorted(of[by], np.arange(count + 1))
            t = time.perf_counter()
            paths = []
            for b in range(count):
                part = by[bounds[b]:bounds[b + 1]]
                path = folder / f"{b:05d}.parquet"
                pq.write_table(pa.table({"bucket": pa.array(np.full(len(part), b, np.int32)),
                                         "key": keys[part], "content": contents[part]}), path,
                               **BAND_FILE_OPTIONS)
                paths.append(str(path))
            write_s = time.perf_counter() - t
            probe_of = bucket_of(probes, count)
            tasks = []
            for b in range(count):
                mine = probes[probe_of == b]
                t = time.perf_counter()
                bucket_hits([paths[b]], mine, np.zeros(0, np.int64), 1, 0)
                tasks.append(time.perf_counter() - t)
            times = np.asarray(tasks)
            out.append({"buckets": count, "band_rows": len(keys), "probes": len(probes),
                        "write_s": round(write_s, 2), "join_s": round(float(times.sum()), 2),
                        "task_median_s": round(float(np.median(times)), 4),
                        "task_max_s": round(float(times.max()), 4)})
            print(orjson.dumps(out[-1]).decode(), flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
