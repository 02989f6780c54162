"""What `index compact` costs, by the code before and the code now, on the same index
(docs/iceberg.md, "Buckets grow with the index"; bench only).

Two local Iceberg indexes are built alike (untimed): the small real package
``samples/cpt/2026-11-25/cpt-v1`` by ``near-dedup index`` (a new index: its bucket count is
the current code's start), then ``--contents`` generated contents (`bench.scale_history
append`, seed 1) and ``--day-contents`` more (seed 2): every band bucket then has three
files. Then `index compact` runs on the first by the code in ``--before`` (a folder holding
an older ``near_dedup_core``) and on the second by this checkout, measured (CPU and peak
memory of the process tree, `bench.measure`). Both compacted band tables must hold the same
rows (their count and the sums of their keys and contents). Printed and written to
``--out``/result.json.

    python -m bench.compact_ab --contents 1000000 --day-contents 100000 \\
        --before /tmp/before --out bench/out/compact-ab
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq

from bench.measure import code_version, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
BASE = ROOT / "samples" / "cpt" / "2026-11-25" / "cpt-v1"


def near_dedup(index: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "near_dedup_core",
        "--quiet",
        "--config",
        str(CONFIG),
        "--index",
        index,
        *args,
    ]


def env_for(code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code)}


def band_digest(index: str) -> dict:
    """The published band table's row count, bucket count, file count and the sums of its
    keys and contents (modulo 2^64)."""
    from near_dedup_core.index_store.iceberg import tables as it
    from near_dedup_core.index_store.iceberg.datafiles import local_path
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    pinned = Pinned(index)
    rows, keys, contents = 0, 0, 0
    files = pinned.data_files("bands")
    for f in files:
        t = pq.read_table(local_path(f.file_path), columns=["key", "content"])
        rows += t.num_rows
        with np.errstate(over="ignore"):
            keys += int(t.column("key").to_numpy().view(np.uint64).sum(dtype=np.uint64))
            contents += int(t.column("content").to_numpy().view(np.uint64).sum(dtype=np.uint64))
    buckets = int(dict(pinned.rows("meta", ("key", "value")))[it.BUCKETS_KEY])
    return {
        "rows": rows,
        "buckets": buckets,
        "files": len(files),
        "key_sum": keys % (1 << 64),
        "content_sum": contents % (1 << 64),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--contents", type=int, required=True)
    ap.add_argument("--day-contents", type=int, required=True)
    ap.add_argument("--before", type=Path, required=True, help="a checkout of older code")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    index = {n: f"iceberg://{out / n}" for n in ("before", "now")}
    for n in index:
        append = [sys.executable, "-m", "bench.scale_history", "--quiet", "append",
                  "--index", index[n], "--contents"]
        for step, command in (
            ("base", near_dedup(index[n], "index", "--inputs", str(BASE))),
            ("history", [*append, str(args.contents)]),
            ("day", [*append, str(args.day_contents), "--seed", "2"]),
        ):
            done = run(command, out / f"{n}-{step}.log", env=env_for(ROOT))
            if done.returncode:
                raise SystemExit(f"{step} of {n}: {done.stderr_tail}")
    result: dict = {
        "started": wall_clock(),
        "code": code_version(ROOT),
        "contents": args.contents,
        "day_contents": args.day_contents,
        "bands_before_compaction": band_digest(index["now"]),
        "load_before": os.getloadavg(),
    }
    for n, code in (("before", args.before.resolve()), ("now", ROOT)):
        # run from the code's folder: ``python -m`` puts the working folder first on the path
        done = run(
            near_dedup(index[n], "index", "compact"),
            out / f"{n}-compact.log",
            cwd=code,
            env=env_for(code),
        )
        if done.returncode:
            raise SystemExit(f"compaction by {n}: {done.stderr_tail}")
        result[n] = {**done.as_dict(), "bands": band_digest(index[n])}
        result[f"load_after_{n}"] = os.getloadavg()
    same = ("rows", "key_sum", "content_sum")
    if any(result["before"]["bands"][k] != result["now"]["bands"][k] for k in same):
        raise SystemExit("the two compacted band tables differ")
    result["now_over_before"] = {
        "cpu": round(result["now"]["cpu_s"] / result["before"]["cpu_s"], 3),
        "peak_rss": round(
            result["now"]["peak_tree_rss_mib"] / result["before"]["peak_tree_rss_mib"], 3
        ),
    }
    (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    for n in ("before", "now"):
        r = result[n]
        print(
            f"{n}: {r['cpu_s']:.1f} s CPU, {r['peak_tree_rss_mib']:.0f} MiB, "
            f"{r['wall_s']:.1f} s wall; {r['stdout']}; bands {r['bands']}"
        )
    print(f"now / before: {result['now_over_before']}")


if __name__ == "__main__":
    main()
