"""What the second try of a killed day costs (docs/iceberg.md, "A killed day resumes"): a day
appended to an Iceberg index whole, against the same day killed (SIGKILL) after ``--kill-at``
of its blocks and run again with the same inputs, in the same run.

Two local Iceberg indexes get the history package (untimed). Then, in turns: the day's
`index` on the first, measured whole (the full try); the day's `index` on the second,
killed once it has applied ``round(kill_at × blocks)`` blocks (`progress.pause_point`
``index-block-<n>``; its time to the kill is measured too), then run again and measured (the
second try). With ``--before CHECKOUT`` (a folder holding an older ``near_dedup_core``) a
third index takes the day by that code as well, to show what keeping the workers' results
costs a try that is never killed. Both published states must hold the same rows (the
batches' times aside); the second try's summary must say how many blocks it took from the
first. Printed and written to ``--out``/result.json: each try's wall and CPU seconds (of its
process tree), peak memory, the second/full ratios, the work files' size.

    python -m bench.resume --history bench/out/hist-20k --day bench/out/day-20k \\
        --out bench/out/resume
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from bench.measure import code_version, read_through, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"


def cli(index: str, workers: int, pkg: Path) -> list[str]:
    return [sys.executable, "-m", "near_dedup_core", "--quiet", "--config", str(CONFIG),
            "--index", index, "index", "--inputs", str(pkg), "--workers", str(workers)]


def env_for(code: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code), **extra}


def blocks_of(pkg: Path) -> int:
    """The blocks `index` cuts the package into (`ingest.batch.BLOCK_LINES`)."""
    from near_dedup_core.ingest.batch import BLOCK_LINES
    from near_dedup_core.package import LineBlock, open_packages, read_blocks
    from near_dedup_core.storage import parse_location

    pkgs = open_packages([parse_location(pkg)])
    return sum(isinstance(e, LineBlock) for e in read_blocks(pkgs, block_lines=BLOCK_LINES))


def killed(command: list[str], block: int, flag: Path, log: Path) -> float:
    """Run ``command`` until it has applied ``block`` blocks, then SIGKILL its process
    group; the wall seconds until the kill."""
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(command, env=env_for(ROOT, NEAR_DEDUP_PAUSE=f"index-block-"
                                                     f"{block}:{flag}"),
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
        while not flag.exists():
            if proc.poll() is not None:
                raise SystemExit(f"the killed try ended on its own: {log.read_text()[-500:]}")
            time.sleep(0.05)
        wall = time.monotonic() - start
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    flag.unlink()
    return wall


def published_rows(index: str) -> dict:
    from near_dedup_core.index_store.iceberg import tables as it
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    pinned = Pinned(index)
    out = {}
    for name in (t for t in it.DATA_TABLES if t not in it.LAYOUT_TABLES):
        columns = tuple(c for c, _ in it.COLUMNS[name] if c != "created_at")
        out[name] = sorted(r for r in pinned.rows(name, columns) if r[0] != "created_at")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=Path, required=True, help="the package indexed first")
    ap.add_argument("--day", type=Path, required=True, help="the day's package")
    ap.add_argument("--out", type=Path, required=True, help="a folder for indexes and logs")
    ap.add_argument("--kill-at", type=float, default=0.9, help="share of the day's blocks")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--before", type=Path, help="a checkout of older code, for the overhead")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    names = ["full", "killed"] + (["before"] if args.before else [])
    index = {n: f"iceberg://{out / n}" for n in names}
    for n in names:
        base = run(cli(index[n], args.workers, args.history), out / f"{n}-history.log")
        if base.returncode:
            raise SystemExit(f"history into {n}: {base.stderr_tail}")

    blocks = blocks_of(args.day)
    at = max(1, min(blocks - 1, round(args.kill_at * blocks)))
    result: dict = {"started": wall_clock(), "code": code_version(ROOT), "blocks": blocks,
                    "killed_at_block": at, "workers": args.workers}
    read_through(args.day)
    full = run(cli(index["full"], args.workers, args.day), out / "full.log")
    if full.returncode:
        raise SystemExit(f"full try: {full.stderr_tail}")
    read_through(args.day)
    result["killed_wall_s"] = killed(cli(index["killed"], args.workers, args.day), at,
                                     out / "paused", out / "killed.log")
    kept = list((out / "killed").rglob("*.work"))
    result["work_files"] = {"count": len(kept), "bytes": sum(p.stat().st_size for p in kept)}
    read_through(args.day)
    second = run(cli(index["killed"], args.workers, args.day), out / "second.log")
    if second.returncode:
        raise SystemExit(f"second try: {second.stderr_tail}")
    said = re.search(r"resumed: ([\d,]+) of ([\d,]+) blocks", second.stdout)
    if said is None or int(said.group(1).replace(",", "")) != at:
        raise SystemExit(f"the second try did not resume from {at} blocks: {second.stdout}")
    if published_rows(index["killed"]) != published_rows(index["full"]):
        raise SystemExit("the resumed index differs from the one never killed")
    result["identical"] = True
    result["full"], result["second"] = full.as_dict(), second.as_dict()
    result["second_over_full"] = {"wall": round(second.wall_s / full.wall_s, 3),
                                  "cpu": round(second.cpu_s / full.cpu_s, 3)}
    if args.before:
        read_through(args.day)
        before = run(cli(index["before"], args.workers, args.day), out / "before.log",
                     env=env_for(args.before.resolve()))
        if before.returncode:
            raise SystemExit(f"before: {before.stderr_tail}")
        result["before"] = before.as_dict()
        result["full_over_before"] = {"wall": round(full.wall_s / before.wall_s, 3),
                                      "cpu": round(full.cpu_s / before.cpu_s, 3)}
    (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    for name in ("full", "second", "before"):
        if name in result:
            m = result[name]
            print(f"{name:7s} wall {m['wall_s']:7.2f} s  cpu {max(m['user_s'] + m['sys_s'], m['tree_cpu_s']):7.2f} s  "
                  f"peak {m['peak_tree_rss_mib']:7.0f} MiB")
    print(f"killed after {at} of {blocks} blocks ({result['killed_wall_s']:.1f} s); work files "
          f"{result['work_files']['bytes'] / 2**20:.1f} MiB")
    print(f"second / full: wall {result['second_over_full']['wall']}, "
          f"cpu {result['second_over_full']['cpu']}")
    if "full_over_before" in result:
        print(f"full (keeping work files) / before: wall {result['full_over_before']['wall']}, "
              f"cpu {result['full_over_before']['cpu']}")


if __name__ == "__main__":
    main()
