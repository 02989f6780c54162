"""The CPU of `contamination` by the code before and the code now, on the same eval items
and pool, in alternating rounds of one run (bench only).

The items and pool are those ``bench.contamination_quality --speed`` wrote
(``bench/out/contamination-quality/speed/evals`` and ``…/pool``), or any two packages given.
Each round runs ``near-dedup contamination --workers 1`` (the probe inline: the command's
whole work is in one process, so its CPU time is the whole cost) by the code in ``--before``
(a folder holding an older ``near_dedup_core``) and by this checkout, in turns, the order
alternating from round to round; each run under `bench.measure.run`. Both runs of a round
must write the same ``contamination.jsonl``, ``set_aside.jsonl`` and ``summary.json``
bytes. With ``--scan``, ``index`` and ``scan`` of the pool (by this checkout, 1 worker) are
measured after the rounds (the scan twice), for the ratio to the scan. Before the rounds,
each side runs once untimed, so that its compiled kernels are in numba's cache (``--no-warm``:
they are already). With ``--index`` (an index holding the pool), the command reads the
pool's texts there (``contamination --index``), as for a pool of a million records. Printed
and written to ``--out``/result.json.

    python -m bench.contamination_ab --before /tmp/before --rounds 2 --scan \\
        --out bench/out/contamination-ab
    python -m bench.contamination_ab --before /tmp/before --pool bench/out/pkg/pool-1m \\
        --index bench/out/c1m/pool-1m.sqlite --no-warm --rounds 2 --out bench/out/ab-1m
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

import orjson

from bench.contamination_quality import WORK
from bench.measure import run

ROOT = Path(__file__).resolve().parent.parent
SAME = ("contamination.jsonl", "set_aside.jsonl", "summary.json")


def env_for(code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code)}


def contamination(evals: Path, pool: Path, out: Path, index: Path | None = None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "near_dedup_core",
        "--quiet",
        *(["--index", str(index)] if index is not None else []),
        "contamination",
        "--evals",
        str(evals),
        "--inputs",
        str(pool),
        "--output",
        str(out),
        "--workers",
        "1",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--before", type=Path, required=True, help="a checkout of older code")
    ap.add_argument("--now", type=Path, default=ROOT, help="the code now (this checkout)")
    ap.add_argument("--evals", type=Path, default=WORK / "speed" / "evals")
    ap.add_argument("--pool", type=Path, default=WORK / "pool")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scan", action="store_true", help="also index and scan the pool once")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--index", type=Path, default=None,
                    help="an index holding the pool: contamination --index reads its texts there")
    ap.add_argument("--no-warm", action="store_true",
                    help="no untimed run first (both sides' kernels are in numba's cache)")
    args = ap.parse_args(argv)
    for path in (args.evals, args.pool):
        if not (path / "manifest.json").exists():
            raise SystemExit(
                f"contamination_ab: {path} is no package (run "
                "python -m bench.contamination_quality --speed first)"
            )
    if not (args.before / "near_dedup_core").is_dir():
        raise SystemExit(f"contamination_ab: {args.before} holds no near_dedup_core")
    args.evals, args.pool, args.out = (p.resolve() for p in (args.evals, args.pool, args.out))
    index = args.index.resolve() if args.index is not None else None
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    sides = {"before": args.before.resolve(), "now": args.now.resolve()}
    runs: dict[str, list[dict]] = {"before": [], "now": []}
    for side, code in () if args.no_warm else sides.items():  # untimed: kernels cached
        warm = run(
            contamination(args.evals, args.pool, args.out / f"warm-{side}", index),
            args.out / f"warm-{side}.log",
            env=env_for(code),
            cwd=code,
        )
        if warm.returncode != 0:
            raise SystemExit(
                f"contamination_ab: {side} exited {warm.returncode}: {warm.stderr_tail}"
            )
    for r in range(args.rounds):
        order = ("before", "now") if r % 2 == 0 else ("now", "before")
        for side in order:
            report = args.out / f"{side}-{r}"
            m = run(
                contamination(args.evals, args.pool, report, index),
                args.out / f"{side}-{r}.log",
                env=env_for(sides[side]),
                cwd=sides[side],
            )
            if m.returncode != 0:
                raise SystemExit(f"contamination_ab: {side} exited {m.returncode}: {m.stderr_tail}")
            runs[side].append(
                {
                    "round": r,
                    "cpu_s": round(m.cpu_s, 2),
                    "wall_s": round(m.wall_s, 2),
                    "peak_tree_rss_mib": round(m.peak_tree_rss_mib),
                    "load": [round(x, 1) for x in os.getloadavg()],
                }
            )
            print(f"round {r} {side}: {runs[side][-1]}", file=sys.stderr)
        for name in SAME:
            a = (args.out / f"before-{r}" / name).read_bytes()
            b = (args.out / f"now-{r}" / name).read_bytes()
            if a != b:
                raise SystemExit(f"contamination_ab: round {r}: {name} differs")
    result: dict = {
        "before": str(args.before),
        "now": str(args.now),
        "evals": str(args.evals),
        "pool": str(args.pool),
        "runs": runs,
        "reports_identical": True,
    }
    median = {s: statistics.median(x["cpu_s"] for x in runs[s]) for s in runs}
    result["cpu_now_over_before"] = round(median["now"] / median["before"], 3)
    if args.scan:
        index = args.out / "index.sqlite"
        cli = [sys.executable, "-m", "near_dedup_core", "--index", str(index), "--quiet"]
        steps = {
            "index": [*cli, "index", "--inputs", str(args.pool), "--workers", "1"],
            "scan": [
                *cli,
                "scan",
                "--inputs",
                str(args.pool),
                "--output",
                str(args.out / "scan"),
                "--workers",
                "1",
            ],
        }
        for name, command in [*steps.items(), ("scan", steps["scan"])]:
            shutil.rmtree(args.out / "scan", ignore_errors=True)
            m = run(command, args.out / f"{name}.log", env=env_for(sides["now"]), cwd=sides["now"])
            result.setdefault(name, []).append(
                {"cpu_s": round(m.cpu_s, 2), "wall_s": round(m.wall_s, 2)}
            )
            print(f"{name}: {result[name][-1]}", file=sys.stderr)
        scan = min(x["cpu_s"] for x in result["scan"])
        result["cpu_now_over_scan"] = round(median["now"] / scan, 2)
    (args.out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
