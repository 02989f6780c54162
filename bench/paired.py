"""Paired end to end on the 20k set: the whole CLI (`index` + `scan`) against datasketch
signatures alone, on the same documents, in alternating rounds of one run.

Each round runs, in alternating order:

1. **ours** — ``near-dedup index`` of the set20k snapshot package into a fresh index, then
   ``near-dedup scan`` of it, each with ``--workers N`` (default 2) and the shipped config,
   as separate processes from the command line: reading and checking the package, normalizing,
   signing, writing the index, LSH, exact verification, decisions and the report. Wall time of
   the two commands together (CPU time of their process trees is recorded too).
2. **datasketch** — ``MinHash(num_perm=128)`` signatures of the same 20,000 documents in this
   process pinned to one CPU, exactly as in ``bench.peers`` (`run_datasketch`: the Python set
   of 5-code-point shingles of the normalized text, ``update_batch`` of their UTF-8 bytes).
   The texts are normalized once before the rounds and that time is not counted: datasketch
   gets only its signatures, ours does everything.

The ratio of a round is datasketch seconds / our seconds; the result is the median over
rounds. With ``--base DIR`` (another checkout of the project, e.g. the commit before a change,
as a ``git worktree`` with its kernels' caches warmed) each round also runs that code's
``index`` + ``scan`` (``PYTHONPATH`` and working directory set to the checkout), the three
sides in rotated order, so that both versions' ratios and the ratio between them come from
the same minutes of a shared machine; the two versions' reports must be byte-identical. Before the rounds one untimed CLI run warms the bytecode and numba caches and
datasketch signs a few documents (imports); before each of our timed runs, an untimed run on
a bundled sample day (`warm_start`) and a read of the package bring our files back into the
page cache, which this box empties of idle pages within seconds. The package is built from
``bench/corpus/set20k.jsonl`` if missing (``bench.build_corpus.ensure``: the code of
``near-dedup snapshot create``), in the same document order.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

from near_dedup_core.fsutil import sha256_file

from bench.build_corpus import OUT, SET20K, ensure, read_jsonl
from bench.measure import Measurement, code_version, read_through, run
from bench.peers import run_datasketch

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"


REPORT_FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")


def ours(package: Path, work: Path, workers: int,
         code: Path = ROOT) -> dict[str, Measurement]:
    """`index` into a fresh index under ``work``, then `scan`, with the code of the checkout
    ``code``; each measured."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(code)}
    base = [sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
            str(work / "index.sqlite"), "--config", str(CONFIG)]
    steps = {
        "index": [*base, "index", "--inputs", str(package), "--workers", str(workers)],
        "scan": [*base, "scan", "--inputs", str(package), "--output", str(work / "report"),
                 "--workers", str(workers)],
    }
    warm_start(work / "warm", code)
    out = {}
    for name, cmd in steps.items():
        read_through(package)  # datasketch's texts are in memory: ours come from the cache
        m = run(cmd, work / "logs" / f"{name}.log", cwd=code, env=env)
        if m.returncode != 0:
            raise SystemExit(f"paired: {name} failed with exit {m.returncode}: {m.stderr_tail}")
        out[name] = m
    return out


def report_digests(work: Path) -> dict[str, str]:
    return {f: sha256_file(work / "report" / f) for f in REPORT_FILES}


def warm_start(work: Path, code: Path = ROOT) -> None:
    """An untimed `index` + `scan` of the first bundled sample day, so that our commands start
    from the page cache as datasketch, running in this process, does. The benchmark box
    reclaims file pages that sit idle for some seconds (the kernel's DAMON ``pageout``): after
    a datasketch round, the environment's modules and libraries (numba, llvmlite, numpy,
    SQLAlchemy …) were read from disk again, and a 20k `index` took 10.2–10.6 s instead of
    4.6–6.7 s (alternating runs, 20 s apart)."""
    day = sorted((ROOT / "samples" / "cpt").glob("*/cpt-*"))[0]
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    base = [sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
            str(work / "index.sqlite"), "--config", str(CONFIG)]
    for cmd in ([*base, "index", "--inputs", str(day)],
                [*base, "scan", "--inputs", str(day), "--output", str(work / "report")]):
        subprocess.run(cmd, cwd=code, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(code)})
    shutil.rmtree(work)


def datasketch_seconds(texts: list[str], cpu: int) -> tuple[float, float]:
    """(wall, CPU) seconds of datasketch signatures of ``texts`` with this process on one CPU;
    the previous affinity is restored (the CLI runs must not inherit the pinning)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        run_datasketch(texts)
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        os.sched_setaffinity(0, before)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.paired", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cpu", type=int, default=0, help="CPU datasketch is pinned to")
    p.add_argument("--base", type=Path,
                   help="another checkout to run in the same rounds (e.g. the commit before a "
                        "change, a git worktree)")
    p.add_argument("--workdir", type=Path, default=OUT / "paired")
    p.add_argument("--out", type=Path, default=OUT / "paired.json")
    args = p.parse_args(argv)

    (package,) = ensure("set20k")
    package = package.resolve()
    from near_dedup_core.normalize import normalize
    from near_dedup_core.package import load_package

    raw = [r["text"] for r in read_jsonl(SET20K)]
    records = load_package(package).record_count
    if records != len(raw):
        raise SystemExit(f"paired: {package} has {records} records, {SET20K} {len(raw)}: "
                         f"remove the package to rebuild it")
    texts = [normalize(t) for t in raw]
    text_mb = sum(len(t.encode("utf-8", "surrogatepass")) for t in raw) / 1e6

    base = args.base.resolve() if args.base else None
    args.workdir = args.workdir.resolve()  # each checkout's CLI runs in its own folder
    sides = ["ours", "datasketch", *(["base"] if base else [])]
    print(f"warm-up: CLI index + scan of {package}, datasketch imports", file=sys.stderr)
    ours(package, args.workdir, args.workers)
    digests = report_digests(args.workdir)
    if base:
        ours(package, args.workdir, args.workers, base)
        if report_digests(args.workdir) != digests:
            raise SystemExit(f"paired: the report of {base} differs from this checkout's")
    run_datasketch(texts[:20])

    rounds = []
    for r in range(args.rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        row: dict = {"round": r + 1, "order": list(order)}
        for side in order:
            if side == "datasketch":
                row["datasketch_s"], row["datasketch_cpu_s"] = datasketch_seconds(texts,
                                                                                  args.cpu)
                continue
            steps = ours(package, args.workdir, args.workers,
                         base if side == "base" and base else ROOT)
            if report_digests(args.workdir) != digests:
                raise SystemExit(f"paired: round {r + 1}: the report of {side} differs")
            key = "" if side == "ours" else "base_"
            row[f"{key}index_s"] = steps["index"].wall_s
            row[f"{key}scan_s"] = steps["scan"].wall_s
            row[f"{key}ours_s"] = row[f"{key}index_s"] + row[f"{key}scan_s"]
            row[f"{key}ours_cpu_s"] = sum(m.cpu_s for m in steps.values())
            row[f"{key}report"] = steps["scan"].stdout
        row["ratio"] = row["datasketch_s"] / row["ours_s"]
        extra = ""
        if base:
            row["base_ratio"] = row["datasketch_s"] / row["base_ours_s"]
            row["now_over_base"] = row["ours_s"] / row["base_ours_s"]
            extra = (f"; base {row['base_ours_s']:.2f} s (index {row['base_index_s']:.2f} + "
                     f"scan {row['base_scan_s']:.2f}; {row['base_ours_cpu_s']:.1f} s CPU), "
                     f"ratio {row['base_ratio']:.2f}×, now/base {row['now_over_base']:.3f}")
        rounds.append(row)
        print(f"round {r + 1}/{args.rounds}: ours {row['ours_s']:.2f} s (index "
              f"{row['index_s']:.2f} + scan {row['scan_s']:.2f}; {row['ours_cpu_s']:.1f} s CPU), "
              f"datasketch {row['datasketch_s']:.2f} s, ratio {row['ratio']:.2f}×{extra}, "
              f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)

    def med(key: str) -> float:
        return statistics.median(row[key] for row in rounds)

    result = {
        "date": time.strftime("%Y-%m-%d"),
        "code": code_version(ROOT),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                   f"Python {platform.python_version()}, load average at the end "
                   f"{os.getloadavg()[0]:.1f}",
        "package": str(package), "docs": len(texts), "text_mb": text_mb,
        "workers": args.workers, "datasketch_cpu": args.cpu, "rounds": rounds,
        "median": {k: med(k) for k in ("index_s", "scan_s", "ours_s", "ours_cpu_s",
                                       "datasketch_s", "datasketch_cpu_s", "ratio")},
        "report_sha256": digests,
    }
    if base:
        result["base"] = {"path": str(base), "code": code_version(base)}
        result["median"].update({k: med(k) for k in (
            "base_index_s", "base_scan_s", "base_ours_s", "base_ours_cpu_s", "base_ratio",
            "now_over_base")})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print("| round | ours: index + scan | index | scan | ours: CPU | datasketch, 1 core "
          "| datasketch: CPU | ratio (wall) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rounds:
        print(f"| {row['round']} | {row['ours_s']:.2f} s | {row['index_s']:.2f} s | "
              f"{row['scan_s']:.2f} s | {row['ours_cpu_s']:.1f} s | {row['datasketch_s']:.2f} s "
              f"| {row['datasketch_cpu_s']:.1f} s | {row['ratio']:.2f}× |")
    m = result["median"]
    print(f"| **median** | **{m['ours_s']:.2f} s** | {m['index_s']:.2f} s | {m['scan_s']:.2f} s "
          f"| {m['ours_cpu_s']:.1f} s | {m['datasketch_s']:.2f} s | {m['datasketch_cpu_s']:.1f} s "
          f"| **{m['ratio']:.2f}×** |")
    if base:
        head = str(result["base"]["code"].get("git_head", "?"))[:7]
        print(f"\nbase `{head}`, the same rounds:\n\n| round | base: index + scan | index | "
              f"scan | base: CPU | ratio (wall) | ours / base |\n|---:|---:|---:|---:|---:|---:|---:|")
        for row in rounds:
            print(f"| {row['round']} | {row['base_ours_s']:.2f} s | {row['base_index_s']:.2f} s "
                  f"| {row['base_scan_s']:.2f} s | {row['base_ours_cpu_s']:.1f} s | "
                  f"{row['base_ratio']:.2f}× | {row['now_over_base']:.3f} |")
        print(f"| **median** | **{m['base_ours_s']:.2f} s** | {m['base_index_s']:.2f} s | "
              f"{m['base_scan_s']:.2f} s | {m['base_ours_cpu_s']:.1f} s | "
              f"**{m['base_ratio']:.2f}×** | **{m['now_over_base']:.3f}** |")
    print(f"\n{len(texts):,} documents, {text_mb:.1f} MB of text; ours with --workers "
          f"{args.workers}; datasketch {len(texts) / m['datasketch_s']:,.0f} docs/s on one CPU")


if __name__ == "__main__":
    main()
