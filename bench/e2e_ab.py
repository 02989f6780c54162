"""`index` + `scan` of one pool with two versions of the code, alternating, in one run.

The box is shared and its load varies from minute to minute, so a speed-up is only claimed
from one run that measures both versions: round r runs version A, then version B (the order
flips every round), each through the CLI with a fresh index, under ``/usr/bin/time -v`` with
the process tree sampled (`bench.measure`), its inputs read once right before it
(`bench.measure.read_through`). A version is a git revision: it is checked out
into a worktree under ``bench/out/`` (or given as a checkout folder) and runs with that
folder as its working directory and ``PYTHONPATH``. The reports' jsonl files must be
byte-identical across versions and rounds (the run stops otherwise).

Usage::

    python -m bench.e2e_ab --pool pool-1m --a b212d84 --b . [--rounds 1] [--workers 2]

Prints one row per command and the per-version totals with the B/A ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import orjson

from near_dedup_core.fsutil import sha256_file

from bench.build_corpus import ensure
from bench.measure import Measurement, code_version, read_through, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
REPORT_FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")


def checkout(version: str, out: Path) -> Path:
    """A folder holding ``version``: a checkout folder as given, or a worktree of a revision."""
    if Path(version).is_dir():
        return Path(version).resolve()
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", version],
                         check=True, capture_output=True, text=True).stdout.strip()
    tree = out / f"tree-{rev}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                       check=True, capture_output=True)
    return tree


def cli(code: Path, args: list[str], log: Path) -> Measurement:
    cmd = [sys.executable, "-m", "near_dedup_core", "--quiet", "--config", str(CONFIG), *args]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(code)
    try:
        m = run(cmd, log, cwd=code)
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    if m.returncode != 0:
        raise SystemExit(f"e2e_ab: {' '.join(args[:4])} failed: {m.stderr_tail}")
    return m


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.e2e_ab", description=__doc__.splitlines()[0])
    p.add_argument("--pool", default="pool-1m", help="a bench package name or a package path")
    p.add_argument("--a", required=True, help="git revision or checkout folder")
    p.add_argument("--b", required=True, help="git revision or checkout folder")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "e2e-ab")
    args = p.parse_args(argv)
    pool = (Path(args.pool) if Path(args.pool).is_dir() else ensure(args.pool)[0]).resolve()
    args.out = args.out.resolve()  # each version's CLI runs in its own checkout
    args.out.mkdir(parents=True, exist_ok=True)
    versions = {"A": checkout(args.a, args.out), "B": checkout(args.b, args.out)}
    rows: list[dict] = []
    digests: dict[str, str] = {}
    for r in range(args.rounds):
        for name in (("A", "B") if r % 2 == 0 else ("B", "A")):
            code = versions[name]
            work = args.out / f"run-{name}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            index = work / "index.sqlite"
            row: dict = {"round": r, "version": name, "code": code_version(code)}
            for step, extra in (("index", ["index", "--inputs", str(pool)]),
                                ("scan", ["scan", "--inputs", str(pool), "--output",
                                          str(work / "report")])):
                read_through(pool, *([index] if index.exists() else []))
                m = cli(code, ["--index", str(index), *extra, "--workers", str(args.workers)],
                        work / f"{step}.log")
                row[step] = m.as_dict()
                print(f"[{wall_clock()}] round {r} {name} {step}: wall {m.wall_s:.1f} s, CPU "
                      f"{m.cpu_s:.1f} s ({m.cpu_share:.2f} cores), peak "
                      f"{m.max_rss_process_mib:,.0f} MiB/process {m.peak_tree_rss_mib:,.0f} "
                      f"MiB/tree, load {os.getloadavg()[0]:.1f}, {m.box.note()}", flush=True)
            for f in REPORT_FILES:
                digest = sha256_file(work / "report" / f)
                if digests.setdefault(f, digest) != digest:
                    raise SystemExit(f"e2e_ab: {f} differs in round {r} version {name}")
            rows.append(row)
            shutil.rmtree(work)
    (args.out / "e2e_ab.json").write_bytes(orjson.dumps(
        {"pool": str(pool), "a": args.a, "b": args.b, "rows": rows, "report_sha256": digests},
        option=orjson.OPT_INDENT_2))
    print("\n| version | index wall s | scan wall s | total wall s | CPU s | cores busy | "
          "peak MiB process / tree |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    total: dict[str, float] = {}
    for name in ("A", "B"):
        mine = [x for x in rows if x["version"] == name]

        def med(step: str, key: str, rows: list[dict] = mine) -> float:
            return statistics.median(x[step][key] for x in rows)

        wall = med("index", "wall_s") + med("scan", "wall_s")
        cpu = med("index", "cpu_s") + med("scan", "cpu_s")
        total[name] = wall
        peak_p = max(max(x[s]["max_rss_process_mib"] for s in ("index", "scan")) for x in mine)
        peak_t = max(max(x[s]["peak_tree_rss_mib"] for s in ("index", "scan")) for x in mine)
        head = str(mine[0]["code"].get("git_head", "?"))[:7]
        print(f"| {name} `{head}` | {med('index', 'wall_s'):.1f} | "
              f"{med('scan', 'wall_s'):.1f} | {wall:.1f} | {cpu:.1f} | {cpu / wall:.2f} | "
              f"{peak_p:,.0f} / {peak_t:,.0f} |")
    print(f"\nB/A total wall: {total['B'] / total['A']:.2f}; reports byte-identical: "
          f"decisions {digests['decisions.jsonl'][:12]}…")


if __name__ == "__main__":
    main()
