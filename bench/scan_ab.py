"""`near-dedup scan` of one pool with two versions of the code, alternating, on one index.

The box is shared and its load varies from minute to minute, so two versions are only
compared within one run: round r scans with version A, then with version B (the order flips
every round), each through the CLI under ``/usr/bin/time -v`` with the process tree sampled
(`bench.measure`). A version is a checkout of this repository: the command runs with that
checkout as its working directory and ``PYTHONPATH``. The report's jsonl files must be
byte-identical across versions and rounds (the run stops otherwise). Scan never writes the
index, so one index serves every run.

With ``--b-index``, version B scans another index (the same pool indexed after more
history, say) and the B/A ratio is that of the two indexes; the reports must then be
identical within each side only.

Usage::

    python -m bench.scan_ab --index I.sqlite|postgresql://… --inputs POOL [POOL…] --a /work/main --b . \\
        [--b-index OTHER.sqlite] [--rounds 3] [--workers 2] [--out bench/out/scan-ab]

Prints one row per run and the per-version medians with the B/A ratios of wall and CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

import orjson

from near_dedup_core.fsutil import sha256_file
from near_dedup_core.index_store import open_index

from bench.measure import Measurement, code_version, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
REPORT_FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")


def scan_once(code: Path, index: str, inputs: list[Path], output: Path, workers: int,
              config: Path, log: Path) -> Measurement:
    cmd = [sys.executable, "-m", "near_dedup_core", "--quiet", "--index", str(index),
           "--config", str(config), "scan", "--inputs", *map(str, inputs), "--output",
           str(output), "--workers", str(workers)]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(code)
    try:
        return run(cmd, log, cwd=code)
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def _location(index: str) -> str:
    """A PostgreSQL URL as given, a SQLite path made absolute (each scan runs in its
    checkout's folder)."""
    return open_index(index).location


def _label(index: str) -> str:
    """What the json keeps of an index: a URL without its password."""
    return open_index(index).label


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.scan_ab", description=__doc__.splitlines()[0])
    p.add_argument("--index", required=True, help="SQLite path or postgresql:// URL")
    p.add_argument("--b-index", help="the index version B scans (default: --index)")
    p.add_argument("--inputs", type=Path, nargs="+", required=True)
    p.add_argument("--a", type=Path, required=True, help="checkout of version A (the baseline)")
    p.add_argument("--b", type=Path, default=ROOT, help="checkout of version B (default: this one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "scan-ab")
    args = p.parse_args(argv)
    versions = {"A": args.a.resolve(), "B": args.b.resolve()}
    # each scan runs in its checkout's folder: paths given relative to this one are resolved
    indexes = {"A": _location(args.index), "B": _location(args.b_index or args.index)}
    args.inputs = [x.resolve() for x in args.inputs]
    args.config = args.config.resolve()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    digests: dict[str, set[tuple]] = {"A": set(), "B": set()}
    for r in range(args.rounds):
        for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
            report = args.out / f"report-{name}"
            if report.exists():
                shutil.rmtree(report)
            m = scan_once(versions[name], indexes[name], args.inputs, report, args.workers,
                          args.config, args.out / "logs" / f"{name}-{r}.log")
            if m.returncode != 0:
                raise SystemExit(f"scan_ab: {name} round {r} failed: {m.stderr_tail}")
            digest = tuple(sha256_file(report / f) for f in REPORT_FILES)
            digests[name].add(digest)
            row = {"version": name, "round": r, "digest": digest[0][:12], **m.as_dict()}
            rows.append(row)
            print(f"[{wall_clock()}] {name} round {r}: wall {m.wall_s:.1f} s, CPU {m.cpu_s:.1f} s "
                  f"({m.cpu_share:.2f} cores), peak RSS {m.max_rss_process_mib:,.0f} MiB/process, "
                  f"{m.peak_tree_rss_mib:,.0f} MiB/tree, decisions {digest[0][:12]}", flush=True)
            same_index = indexes["A"] == indexes["B"]
            kinds = digests["A"] | digests["B"] if same_index else digests[name]
            if len(kinds) != 1:
                raise SystemExit("scan_ab: the reports differ between versions or rounds")
    summary = {}
    for name in versions:
        mine = [x for x in rows if x["version"] == name]
        summary[name] = {k: statistics.median(x[k] for x in mine)
                         for k in ("wall_s", "cpu_s", "cpu_share", "max_rss_process_mib",
                                   "peak_tree_rss_mib")}
    ratio = {k: summary["B"][k] / summary["A"][k] for k in ("wall_s", "cpu_s")}
    result = {"index": {k: _label(v) for k, v in indexes.items()},
              "inputs": [str(x) for x in args.inputs],
              "versions": {k: str(v) for k, v in versions.items()},
              "code": {k: code_version(v) for k, v in versions.items()},
              "runs": rows, "median": summary, "ratio_b_over_a": ratio,
              "reports_identical": len(digests["A"] | digests["B"]) == 1}
    (args.out / "scan-ab.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    for name, s in summary.items():
        print(f"{name} ({versions[name]}): median wall {s['wall_s']:.1f} s, CPU {s['cpu_s']:.1f} s "
              f"({s['cpu_share']:.2f} cores), peak RSS {s['max_rss_process_mib']:,.0f} / "
              f"{s['peak_tree_rss_mib']:,.0f} MiB")
    same = "byte-identical" if result["reports_identical"] else "identical within each side"
    print(f"B/A: wall {ratio['wall_s']:.3f}, CPU {ratio['cpu_s']:.3f}; reports {same}")


if __name__ == "__main__":
    main()
