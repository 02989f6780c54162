"""`near-dedup index` + `scan` of one pool, an Iceberg index (``iceberg:///folder``) against a
SQLite index, in the same run, through the CLI under /usr/bin/time -v (`bench.measure.run`).

The two sides run in turns (SQLite first), each from an empty index: index the pool, scan it.
The reports' jsonl files must be byte-identical. Printed and written to ``--out``/result.json:
each command's wall and CPU seconds (of its process tree) and peak memory, the Iceberg/SQLite ratio of index,
scan and both, the index sizes on disk.

    python -m bench.iceberg --pool bench/out/pool-1m --out bench/out/iceberg-1m
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import orjson

from bench.measure import read_through, run

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
REPORT_FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def side(name: str, index: str, index_path: Path, pool: Path, out: Path, workers: int) -> dict:
    cli = [sys.executable, "-m", "near_dedup_core", "--quiet", "--config", str(CONFIG),
           "--index", index]
    read_through(pool)
    ix = run([*cli, "index", "--inputs", str(pool), "--workers", str(workers)],
             out / f"{name}-index.log")
    if ix.returncode:
        raise SystemExit(f"{name} index failed: {ix.stderr_tail}")
    report = out / f"report-{name}"
    read_through(pool)
    sc = run([*cli, "scan", "--inputs", str(pool), "--output", str(report), "--workers",
              str(workers)], out / f"{name}-scan.log")
    if sc.returncode:
        raise SystemExit(f"{name} scan failed: {sc.stderr_tail}")
    return {"index": ix.as_dict(), "scan": sc.as_dict(), "index_bytes": _size(index_path),
            "report": {f: (report / f).read_bytes() for f in REPORT_FILES}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, required=True, help="a pool package folder")
    ap.add_argument("--out", type=Path, required=True, help="a folder for indexes and logs")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    lite = out / "pool.sqlite"
    folder = out / "pool-iceberg"
    results = {"sqlite": side("sqlite", str(lite), lite, args.pool, out, args.workers),
               "iceberg": side("iceberg", f"iceberg://{folder}", folder, args.pool, out,
                               args.workers)}
    same = results["sqlite"].pop("report") == results["iceberg"].pop("report")
    if not same:
        raise SystemExit("the Iceberg report differs from the SQLite report")
    walls = {k: {c: results[k][c]["wall_s"] for c in ("index", "scan")} for k in results}
    summary = {
        "pool": str(args.pool), "workers": args.workers, "reports_identical": same,
        "wall_s": walls,
        "ratio": {c: round(walls["iceberg"][c] / walls["sqlite"][c], 3)
                  for c in ("index", "scan")},
        "ratio_total": round(sum(walls["iceberg"].values()) / sum(walls["sqlite"].values()), 3),
        # CPU seconds of each command's process tree: on a box shared with other work the
        # fairer comparison of the two sides
        "cpu_s": {k: {c: round(max(results[k][c]["user_s"] + results[k][c]["sys_s"],
                                   results[k][c]["tree_cpu_s"]), 1) for c in ("index", "scan")}
                  for k in results},
        "index_bytes": {k: results[k]["index_bytes"] for k in results},
        "peak_rss_mib": {k: {c: results[k][c]["peak_tree_rss_mib"] for c in ("index", "scan")}
                         for k in results},
    }
    (out / "result.json").write_bytes(orjson.dumps({"summary": summary, "runs": results},
                                                   option=orjson.OPT_INDENT_2))
    print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
