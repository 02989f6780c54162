"""`contamination --index` next to the dedup `scan` of the same index, for given eval items
and pool, in alternating rounds of one run (bench only).

The comparison of the 10,000-item row of docs/benchmarks.md (`bench.contamination
--from-index`), for any eval package and pool package (``--pool`` a folder, or a name under
``bench/out/pkg``: ``pool-1m``): ``index`` of the pool into a fresh SQLite index (untimed
for the ratio, recorded), then ``--rounds`` rounds of ``near-dedup contamination --index``
and ``near-dedup scan`` on that index, the order alternating from round to round, each
through the CLI under `bench.measure.run` with ``--workers`` workers (1: the command's whole
work in one process). The reports of every round must be the same bytes. The ratio is of
the medians, CPU and wall. Printed and written to ``--out``/result.json.

    python -m bench.contamination_scan --evals bench/out/contamination-quality/speed/evals \\
        --pool pool-1m --rounds 1 --out bench/out/contamination-scan-1m
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

import orjson

from bench.build_corpus import PKG_DIR
from bench.contamination_quality import WORK
from bench.measure import code_version, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
SAME = ("contamination.jsonl", "set_aside.jsonl", "summary.json")


def package(value: str) -> Path:
    path = Path(value)
    if not path.exists() and (PKG_DIR / value).exists():
        path = PKG_DIR / value
    return path.resolve()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--evals", type=package, default=WORK / "speed" / "evals")
    ap.add_argument("--pool", type=package, required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.evals = args.evals.resolve()
    for path in (args.evals, args.pool):
        if not (path / "manifest.json").exists():
            raise SystemExit(f"contamination_scan: {path} is no package")
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    index = out / "index.sqlite"
    cli = [sys.executable, "-m", "near_dedup_core", "--index", str(index), "--quiet"]
    workers = ["--workers", str(args.workers)]

    def step(name: str, command: list[str]) -> dict:
        load = os.getloadavg()[0]
        print(f"[{wall_clock()}] {name} (load {load:.1f})", file=sys.stderr, flush=True)
        m = run(command, out / f"{name}.log", cwd=ROOT)
        if m.returncode != 0:
            raise SystemExit(f"contamination_scan: {name} exited {m.returncode}: {m.stderr_tail}")
        row = {
            "cpu_s": round(m.cpu_s, 2),
            "wall_s": round(m.wall_s, 2),
            "peak_tree_rss_mib": round(m.peak_tree_rss_mib),
            "load": [round(load, 1), round(os.getloadavg()[0], 1)],
        }
        print(f"[{wall_clock()}] {name}: {row}", file=sys.stderr, flush=True)
        return row

    result: dict = {
        "code": code_version(ROOT),
        "evals": str(args.evals),
        "pool": str(args.pool),
        "workers": args.workers,
        "index": step("index", [*cli, "index", "--inputs", str(args.pool), *workers]),
        "contamination": [],
        "scan": [],
    }
    for r in range(args.rounds):
        order = ("contamination", "scan") if r % 2 == 0 else ("scan", "contamination")
        for side in order:
            target = out / f"{side}-{r}"
            if side == "contamination":
                command = [
                    *cli,
                    "contamination",
                    "--evals",
                    str(args.evals),
                    "--inputs",
                    str(args.pool),
                    "--output",
                    str(target),
                    *workers,
                ]
            else:
                command = [
                    *cli,
                    "scan",
                    "--inputs",
                    str(args.pool),
                    "--output",
                    str(target),
                    *workers,
                ]
            result[side].append(step(f"{side}-{r}", command))
            if side == "scan":
                shutil.rmtree(target)  # the scan's report is not compared, only timed
        for name in SAME:
            if (out / f"contamination-{r}" / name).read_bytes() != (
                out / "contamination-0" / name
            ).read_bytes():
                raise SystemExit(f"contamination_scan: round {r}: {name} differs")
    manifest = orjson.loads((out / "contamination-0" / "manifest.json").read_bytes())
    result["report"] = {k: manifest.get(k) for k in ("counts", "candidates", "anchors")}
    result["reports_identical"] = True
    result["contamination_over_scan"] = {
        k: round(
            statistics.median(x[k] for x in result["contamination"])
            / statistics.median(x[k] for x in result["scan"]),
            3,
        )
        for k in ("cpu_s", "wall_s")
    }
    (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
