"""Backends and executors side by side: `index` + `scan` of one pool through the CLI, in the same
run, as ratios.

- ``--backends``: the SQLite file against a PostgreSQL database on a throw-away local server
  (Debian's postgresql, started like the tests' fixture), both with ``--executor local``.
- ``--executors``: ``--executor local`` against ``--executor ray`` (a local Ray started for
  each command, the way a user without a cluster runs it), both on SQLite. Run it as root in
  a private network namespace (``unshare -n``) or on a developer machine; see docs/ray.md.
  ``--ray-nodes N`` runs the ray side on a simulated cluster of N one-CPU nodes instead
  (``ray.cluster_utils.Cluster``, reached through ``RAY_ADDRESS``).

Rounds alternate the two sides (A B A B …) so that the shared box's noise hits both. Every
report's jsonl files must be byte-identical to the first one. Prints a markdown table and
writes ``bench/out/scaleout-<mode>.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.build_corpus import ensure
from bench.e2e import CONFIG, REPORT_FILES, text_bytes
from bench.measure import Measurement, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


def _cli(name: str, index: str, args: list[str], out: Path) -> Measurement:
    cmd = [sys.executable, "-m", "near_dedup_core", "--index", index, "--config", str(CONFIG),
           *args]
    m = run(cmd, out / "logs" / f"{name}.log", cwd=ROOT)
    print(f"[{wall_clock()}] {name}: exit {m.returncode}, wall {m.wall_s:.1f} s, CPU "
          f"{m.tree_cpu_s:.1f} s, peak tree RSS {m.peak_tree_rss_mib:,.0f} MiB", flush=True)
    if m.returncode != 0:
        raise SystemExit(f"scaleout: {name} failed: {m.stderr_tail}")
    return m


def _report_bytes(report: Path) -> dict[str, bytes]:
    return {name: (report / name).read_bytes() for name in REPORT_FILES}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.scaleout", description=__doc__)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--backends", action="store_true")
    mode.add_argument("--executors", action="store_true")
    p.add_argument("--pool", default="pool-100k", help="bench.build_corpus package name")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ray-nodes", type=int, default=0,
                   help="with --executors: a simulated cluster of this many one-CPU nodes")
    args = p.parse_args(argv)

    (pool,) = ensure(args.pool)
    records, nbytes = text_bytes(pool)
    label = "backends" if args.backends else "executors"
    server: Any = None
    if args.backends:
        sys.path.insert(0, str(ROOT / "tests"))
        from pg_server import PostgresServer, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("scaleout: PostgreSQL binaries not found: apt-get install postgresql")
        server = PostgresServer(bindir)
        sides = {"sqlite": "local", "postgresql": "local"}
    else:
        sides = {"local": "local", "ray": "ray"}
        if args.ray_nodes:
            from ray.cluster_utils import Cluster

            server = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
            for _ in range(args.ray_nodes - 1):
                server.add_node(num_cpus=1)
            os.environ["RAY_ADDRESS"] = server.address
            label = f"executors-{args.ray_nodes}-nodes"
    out = OUT / f"scaleout-{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True)
    rows: dict[str, list[dict]] = {side: [] for side in sides}
    reference = None
    try:
        for r in range(args.rounds):
            for side, executor in sides.items():
                if side == "postgresql":
                    index = server.create_database()
                else:
                    index = str(out / f"{side}-{r}.sqlite")
                common = ["--workers", str(args.workers), "--executor", executor]
                mi = _cli(f"{side}-{r}-index", index,
                          ["--quiet", "index", "--inputs", str(pool), *common], out)
                report = out / f"report-{side}-{r}"
                ms = _cli(f"{side}-{r}-scan", index, ["--quiet", "scan", "--inputs", str(pool),
                                                      "--output", str(report), *common], out)
                got = _report_bytes(report)
                reference = reference or got
                if got != reference:
                    raise SystemExit(f"scaleout: {side} round {r}: report differs")
                size = None
                if side == "postgresql":
                    import psycopg

                    with psycopg.connect(index) as con:
                        size = con.execute("SELECT pg_database_size(current_database())"
                                           ).fetchone()[0]
                elif side == "sqlite":
                    size = Path(index).stat().st_size
                rows[side].append({"index_s": mi.wall_s, "scan_s": ms.wall_s,
                                   "cpu_s": mi.tree_cpu_s + ms.tree_cpu_s,
                                   "peak_tree_mib": max(mi.peak_tree_rss_mib,
                                                        ms.peak_tree_rss_mib),
                                   "index_bytes": size})
    finally:
        if server is not None:
            if args.backends:
                server.stop()
            else:
                server.shutdown()
    first = next(iter(sides))
    summary = {}
    print(f"\n{records:,} records, {nbytes / 1e6:,.0f} MB of text, {args.workers} workers, "
          f"{args.rounds} rounds (median)\n")
    print("| side | index s | scan s | total s | × " + first + " | CPU s | peak tree MiB | "
          "index bytes / text byte |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = statistics.median(x["index_s"] + x["scan_s"] for x in rows[first])
    for side, rs in rows.items():
        idx = statistics.median(x["index_s"] for x in rs)
        scn = statistics.median(x["scan_s"] for x in rs)
        tot = statistics.median(x["index_s"] + x["scan_s"] for x in rs)
        cpu = statistics.median(x["cpu_s"] for x in rs)
        peak = max(x["peak_tree_mib"] for x in rs)
        size = rs[-1]["index_bytes"]
        per_byte = f"{size / nbytes:.3f}" if size else "–"
        summary[side] = {"index_s": idx, "scan_s": scn, "total_s": tot, "ratio": tot / base,
                         "cpu_s": cpu, "peak_tree_mib": peak, "index_bytes": size}
        print(f"| {side} | {idx:.1f} | {scn:.1f} | {tot:.1f} | {tot / base:.2f} | {cpu:.1f} | "
              f"{peak:,.0f} | {per_byte} |")
    (out / "scaleout.json").write_bytes(orjson.dumps(
        {"records": records, "text_bytes": nbytes, "rounds": rows, "summary": summary},
        option=orjson.OPT_INDENT_2))
    print(f"\nreports byte-identical across sides and rounds; details in {out}")


if __name__ == "__main__":
    main()
