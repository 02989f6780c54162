"""Start-up cost: each command on the bundled sample CPT days (218 records).

On inputs this small nearly all of a command's time is Python start-up, imports and numba's
loading of its compiled kernels, so this measures exactly that. For each code tree (this
checkout, and with ``--base DIR`` another checkout of the project, e.g. the commit before a
change, as a ``git worktree``) every round runs ``index`` of ``samples/cpt/*/cpt-*`` into a
fresh SQLite index, then ``scan`` of the same packages, then on that report ``report verify``,
``report explain`` of its first sample and ``report diff`` of it with itself, then
``contamination`` of the first day's texts as eval items in the last day, each as
``python -m near_dedup_core --quiet`` with ``PYTHONPATH`` set to the tree; the trees alternate
within each round (rotated order), so both see the same load on a shared machine. Each
command's wall time and CPU time (user + system of the command's process and the children it
waited for, from ``getrusage``) are kept; the table shows medians over rounds and the ratio
of the medians.

Cold start: ``--cold`` also copies each tree's ``near_dedup_core`` sources to a fresh
temporary folder (no ``__pycache__``: no bytecode, no numba cache, as right after a fresh
``pip install``) and times its first ``index`` and ``scan`` there, then the same commands
again after ``scripts/warm_caches.py`` ran on the copy (what ``make install`` does).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.measure import code_version

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "cpt"


def sample_packages() -> list[Path]:
    return sorted(SAMPLES.glob("*/cpt-*"))


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one command; a failure stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"startup: {' '.join(cmd)} failed ({done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


COMMANDS = ("index", "scan", "report verify", "report explain", "report diff", "contamination")


def index_and_scan(tree: Path, work: Path) -> dict[str, tuple[float, float]]:
    """Time `index` into a fresh index, then `scan`, with the code of ``tree``, then the
    report commands on the scan's report and `contamination` of the sample days."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    pkgs = [str(p) for p in sample_packages()]
    cli = [sys.executable, "-m", "near_dedup_core", "--quiet"]
    base = [*cli, "--index", str(work / "i.sqlite")]
    report = str(work / "report")
    out = {
        "index": timed([*base, "index", "--inputs", *pkgs], env, work),
        "scan": timed([*base, "scan", "--inputs", *pkgs, "--output", report], env, work),
    }
    with open(work / "report" / "decisions.jsonl", "rb") as fh:
        first = orjson.loads(fh.readline())
    out["report verify"] = timed([*cli, "report", "verify", report], env, work)
    out["report explain"] = timed([*cli, "report", "explain", report, first["package_id"],
                                   first["sample_id"]], env, work)
    out["report diff"] = timed([*cli, "report", "diff", report, report], env, work)
    out["contamination"] = timed([*cli, "contamination", "--evals", pkgs[0], "--inputs",
                                  pkgs[-1], "--output", str(work / "contamination")], env, work)
    return out


def cold_start(tree: Path, tmp: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """First runs from a copy of ``tree``'s sources with no caches, then after warming."""
    copy = tmp / "cold" / tree.name
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(tree / "near_dedup_core", copy / "near_dedup_core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = {"first run": index_and_scan(copy, tmp / "work-cold")}
    shutil.rmtree(copy)
    shutil.copytree(tree / "near_dedup_core", copy / "near_dedup_core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    warm_script = ROOT / "scripts" / "warm_caches.py"
    warm_seconds, warm_cpu = timed([sys.executable, str(warm_script)],
                                   {**os.environ, "PYTHONPATH": str(copy)}, tmp)
    out["after warm_caches.py"] = index_and_scan(copy, tmp / "work-cold")
    out["warm_caches.py"] = {"run": (warm_seconds, warm_cpu)}
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.startup",
                                description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, help="another checkout to compare with (alternating)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="also time first runs without caches")
    p.add_argument("--out", type=Path, default=Path("bench/out/startup.json"))
    args = p.parse_args(argv)

    trees = {"this checkout": ROOT}
    if args.base is not None:
        trees["base"] = args.base.resolve()
    names = list(trees)
    result: dict = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds,
                    "records": 218, "trees": {n: str(t) for n, t in trees.items()},
                    "code": {n: code_version(t) for n, t in trees.items()}}
    times: dict[str, dict[str, list[tuple[float, float]]]] = {
        n: {c: [] for c in COMMANDS} for n in names}
    with tempfile.TemporaryDirectory(prefix="near-dedup-startup-") as tmp_name:
        tmp = Path(tmp_name)
        for name in names:  # warm-up: bytecode and numba caches of each tree
            index_and_scan(trees[name], tmp / "work")
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                for cmd, measured in index_and_scan(trees[name], tmp / "work").items():
                    times[name][cmd].append(measured)
            print(f"round {r + 1}/{args.rounds}: " + "; ".join(
                f"{n}: " + ", ".join(f"{c} {v[-1][0]:.2f} s wall {v[-1][1]:.2f} s CPU"
                                     for c, v in times[n].items()) for n in names),
                file=sys.stderr)
        if args.cold:
            result["cold"] = {n: cold_start(t, tmp) for n, t in trees.items()}

    def med(values: list[tuple[float, float]], i: int) -> float:
        return statistics.median(v[i] for v in values)

    result["times"] = times
    print("| tree | command | wall (median) | CPU (median) |")
    print("|---|---|---:|---:|")
    for name in names:
        for cmd, values in times[name].items():
            print(f"| {name} | {cmd} | {med(values, 0):.2f} s | {med(values, 1):.2f} s |")
    if "base" in times:
        for cmd in COMMANDS:
            now, base = times["this checkout"][cmd], times["base"][cmd]
            print(f"{cmd}: wall {med(now, 0) / med(base, 0):.2f}×, "
                  f"CPU {med(now, 1) / med(base, 1):.2f}× of base")
    for name, runs in result.get("cold", {}).items():
        for when, cmds in runs.items():
            print(f"cold {name}, {when}: " + ", ".join(
                f"{c} {w:.2f} s wall {c_:.2f} s CPU" for c, (w, c_) in cmds.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
