"""End-to-end `near-dedup index` + `scan` at scale, through the CLI, under /usr/bin/time -v.

For a pool package P (100k or 1M records from ``bench.build_corpus scale``):

1. **pool** — for each ``--workers`` value: index P into a fresh index, scan P; wall, CPU, CPU
   share and peak memory of each command; the report's jsonl files must be byte-identical
   whatever the number of workers.
2. **day N+1** (``--day``) — append a next-day package (5 % new content) to a fresh copy of
   P's index, and to an empty index, in turns for ``--pair-rounds`` rounds: the cost should
   follow the new content, not the index size.
3. **history** (``--history-pool``, a pool a tenth of P's size) — scan it against an index that
   holds only itself, and against a copy of P's index it was appended to (history 10× its
   size), in turns for ``--pair-rounds`` rounds; the decisions must be the same every round.

4. **cumulative** (``--cumulative``) — append the seed's cumulative snapshot (the pool again
   under new sample ids, 5 % of its records replaced by new content) to a copy of P's index:
   only the new texts should cost anything.
5. **size** — index bytes on disk per input text byte (UTF-8 bytes of the records' ``text``).

A pair's ratio (2, 3) is that of its two medians: the box is shared, and one run of each side
measures the minute as much as the code.

Commands run one at a time: the box has two cores and each command is meant to use both.
Each reads its packages and its index once right before it (`bench.measure.read_through`):
the box reclaims idle page cache on its own.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import orjson

from near_dedup_core.fsutil import sha256_file

from bench.build_corpus import OUT, ensure
from bench.measure import (
    BoxStalls,
    Measurement,
    code_version,
    copy_index,
    read_through,
    run,
    wall_clock,
)

ROOT = Path(__file__).resolve().parent.parent
#: The shipped config.
CONFIG = ROOT / "config" / "near-dedup.json"
REPORT_FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")
#: Presets: pool, next-day package (5 % of the pool, new content), history pool (a tenth).
SCALES = {
    "100k": ("pool-100k", "day-100k", "pool-10k", "cumulative-100k"),
    "1m": ("pool-1m", "day-1m", "pool-100k", "cumulative-1m"),
}


def text_bytes(package: Path) -> tuple[int, int]:
    """(records, UTF-8 bytes of the ``text`` fields) of a CPT package's data files."""
    records = total = 0
    for path in sorted((package / "data").rglob("*.jsonl")):
        with open(path, "rb") as fh:
            for line in fh:
                rec = orjson.loads(line)
                records += 1
                total += len(rec.get("text", "").encode("utf-8", "surrogatepass"))
    return records, total


def index_bytes(index: Path) -> int:
    return sum(p.stat().st_size for p in (index, index.with_name(index.name + "-wal"))
               if p.exists())


class Runner:
    def __init__(self, out: Path, config: Path) -> None:
        self.out = out
        self.config = config
        self.steps: list[dict] = []

    def cli(self, name: str, index: Path, args: list[str]) -> Measurement:
        cmd = [sys.executable, "-m", "near_dedup_core", "--index", str(index),
               "--config", str(self.config), *args]
        print(f"[{wall_clock()}] {name}: {' '.join(cmd[1:])}", flush=True)
        read_through(*_inputs(args), *([index] if index.exists() else []))
        m = run(cmd, self.out / "logs" / f"{name}.log", cwd=ROOT)
        row = {"step": name, **m.as_dict()}
        self.steps.append(row)
        print(f"[{wall_clock()}] {name}: exit {m.returncode}, wall {m.wall_s:.1f} s, "
              f"CPU {m.cpu_s:.1f} s ({m.cpu_share:.2f} cores), peak RSS {m.max_rss_process_mib:,.0f} "
              f"MiB/process, {m.peak_tree_rss_mib:,.0f} MiB/tree, {m.box.note()}; "
              f"{m.stdout[-300:]}", flush=True)
        if m.returncode != 0:
            self.save({"failed_step": name})
            raise SystemExit(f"e2e: step {name} failed with exit {m.returncode}: "
                             f"{m.stderr_tail}")
        return m

    def save(self, extra: dict) -> None:
        data = {"date": time.strftime("%Y-%m-%d"), "steps": self.steps, **extra}
        (self.out / "e2e.json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def median_wall(runs: list[Measurement]) -> float:
    return statistics.median(m.wall_s for m in runs)


def remove_index(index: Path) -> None:
    """An index file and its -wal and -shm, where present."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)


def _inputs(args: list[str]) -> list[Path]:
    """The packages after ``--inputs`` in a command's arguments."""
    if "--inputs" not in args:
        return []
    rest = args[args.index("--inputs") + 1:]
    return [Path(a) for a in rest[:next((i for i, a in enumerate(rest) if a.startswith("--")),
                                        len(rest))]]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.e2e", description=__doc__.splitlines()[0])
    p.add_argument("--scale", choices=sorted(SCALES),
                   help="preset: builds the packages if missing, sets pool/day/history/out")
    p.add_argument("--pool", type=Path)
    p.add_argument("--day", type=Path)
    p.add_argument("--history-pool", type=Path)
    p.add_argument("--cumulative", type=Path)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 1])
    p.add_argument("--pair-rounds", type=int, default=3,
                   help="rounds of the day and history pairs (each round runs both sides, "
                        "in turns; the ratios are of the medians)")
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.scale:
        pool, day, history, cumulative = ensure(*SCALES[args.scale])
        args.pool, args.day, args.history_pool, args.cumulative = pool, day, history, cumulative
        args.out = args.out or OUT / f"e2e-{args.scale}"
    if args.pool is None or args.out is None:
        p.error("give --scale, or --pool and --out")

    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    r = Runner(args.out, args.config)
    result: dict = {"pool": str(args.pool), "config": str(args.config),
                    "workers": args.workers, "code": code_version(ROOT)}
    records, pool_bytes = text_bytes(args.pool)
    result.update(pool_records=records, pool_text_bytes=pool_bytes)

    # 1. index + scan of the pool, per worker count.
    digests: dict[int, dict[str, str]] = {}
    main_index = None
    for w in args.workers:
        d = args.out / f"w{w}"
        d.mkdir()
        index = d / "index.sqlite"
        mi = r.cli(f"pool-index-w{w}", index, ["index", "--inputs", str(args.pool),
                                               "--workers", str(w)])
        ms = r.cli(f"pool-scan-w{w}", index, ["scan", "--inputs", str(args.pool), "--output",
                                              str(d / "report"), "--workers", str(w)])
        digests[w] = {f: sha256_file(d / "report" / f) for f in REPORT_FILES}
        manifest = orjson.loads((d / "report" / "manifest.json").read_bytes())
        result[f"w{w}"] = {
            "index_wall_s": mi.wall_s, "scan_wall_s": ms.wall_s,
            "total_wall_s": mi.wall_s + ms.wall_s, "total_cpu_s": mi.cpu_s + ms.cpu_s,
            "box_stalls": asdict(mi.box + ms.box),
            "peak_tree_rss_mib": max(mi.peak_tree_rss_mib, ms.peak_tree_rss_mib),
            "max_rss_process_mib": max(mi.max_rss_process_mib, ms.max_rss_process_mib),
            "index_bytes": index_bytes(index), "counts": manifest.get("counts"),
            "report_sha256": digests[w],
        }
        main_index = main_index or index
        r.save(result)
    result["reports_identical_across_workers"] = len({tuple(sorted(v.items()))
                                                      for v in digests.values()}) == 1
    result["index_bytes_per_text_byte"] = index_bytes(main_index) / pool_bytes
    w = args.workers[0]
    r.save(result)

    # 2. Day N+1: append to the pool's index vs to an empty index, alternating.
    if args.day:
        day_records, day_bytes = text_bytes(args.day)
        d = args.out / "day"
        d.mkdir()
        grown, empty = d / "index-grown.sqlite", d / "index-empty.sqlite"
        day_args = ["index", "--inputs", str(args.day), "--workers", str(w)]
        runs: dict[str, list[Measurement]] = {"pool": [], "empty": []}
        for k in range(args.pair_rounds):
            for side in ("pool", "empty") if k % 2 == 0 else ("empty", "pool"):
                if side == "pool":
                    copy_index(main_index, grown)
                    runs[side].append(r.cli(f"day-append-to-pool-index-{k}", grown, day_args))
                else:
                    remove_index(empty)
                    runs[side].append(r.cli(f"day-append-to-empty-index-{k}", empty, day_args))
        mg, me = median_wall(runs["pool"]), median_wall(runs["empty"])
        result["day"] = {"records": day_records, "text_bytes": day_bytes,
                         "append_to_pool_index_wall_s": mg,
                         "append_to_empty_index_wall_s": me,
                         "append_to_pool_index_runs_s": [m.wall_s for m in runs["pool"]],
                         "append_to_empty_index_runs_s": [m.wall_s for m in runs["empty"]],
                         "ratio": mg / me,
                         "pool_index_wall_s_per_record": result[f"w{w}"]["index_wall_s"] / records,
                         "day_wall_s_per_record": mg / day_records,
                         "index_growth_bytes": index_bytes(grown) - index_bytes(main_index)}
        remove_index(grown)
        r.save(result)

    # 3. History 10× the pool vs empty history: the two scans alternate.
    if args.history_pool:
        h_records, h_bytes = text_bytes(args.history_pool)
        d = args.out / "history"
        d.mkdir()
        alone = d / "index-alone.sqlite"
        r.cli("hist-index-alone", alone, ["index", "--inputs", str(args.history_pool),
                                          "--workers", str(w)])
        big = d / "index-with-history.sqlite"
        copy_index(main_index, big)
        r.cli("hist-index-onto-pool-index", big, ["index", "--inputs", str(args.history_pool),
                                                  "--workers", str(w)])
        scans: dict[str, list[Measurement]] = {"alone": [], "history": []}
        reports: dict[str, set[str]] = {"alone": set(), "history": set()}
        for k in range(args.pair_rounds):
            for side in ("alone", "history") if k % 2 == 0 else ("history", "alone"):
                report = d / f"report-{side}"
                if report.exists():
                    shutil.rmtree(report)
                step = "hist-scan-empty-history" if side == "alone" else "hist-scan-with-history"
                scans[side].append(r.cli(f"{step}-{k}", alone if side == "alone" else big,
                                         ["scan", "--inputs", str(args.history_pool), "--output",
                                          str(report), "--workers", str(w)]))
                reports[side].add(sha256_file(report / "decisions.jsonl"))
        if any(len(v) != 1 for v in reports.values()):
            raise SystemExit("e2e: a history scan's decisions differ between rounds")
        m0, m1 = median_wall(scans["alone"]), median_wall(scans["history"])
        man1 = orjson.loads((d / "report-history" / "manifest.json").read_bytes())
        result["history"] = {"pool_records": h_records, "history_records": records,
                             "scan_empty_history_wall_s": m0,
                             "scan_with_history_wall_s": m1,
                             "scan_empty_history_runs_s": [m.wall_s for m in scans["alone"]],
                             "scan_with_history_runs_s": [m.wall_s for m in scans["history"]],
                             "ratio": m1 / m0,
                             "counts_with_history": man1.get("counts")}
        remove_index(big)
        r.save(result)

    # 4. The cumulative snapshot onto the pool's index.
    if args.cumulative:
        d = args.out / "cumulative"
        d.mkdir()
        grown = d / "index-grown.sqlite"
        copy_index(main_index, grown)
        mc = r.cli("cumulative-append", grown, ["index", "--inputs", str(args.cumulative),
                                               "--workers", str(w)])
        result["cumulative"] = {"records": text_bytes(args.cumulative)[0],
                                "append_wall_s": mc.wall_s, "cpu_s": mc.cpu_s,
                                "summary": mc.stdout.strip()}
        grown.unlink()
        r.save(result)

    r.save(result)
    print_table(result)


def print_table(result: dict) -> None:
    print(f"\npool {result['pool']}: {result['pool_records']:,} records, "
          f"{result['pool_text_bytes'] / 1e6:,.0f} MB text")
    print("| workers | index wall | scan wall | index+scan wall | CPU | peak RSS (tree / largest "
          "process) | excluded |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for w in result["workers"]:
        x = result[f"w{w}"]
        excl = (x.get("counts") or {}).get("exclude")
        print(f"| {w} | {x['index_wall_s']:.1f} s | {x['scan_wall_s']:.1f} s | "
              f"{x['total_wall_s']:.1f} s | {x['total_cpu_s']:.1f} s | "
              f"{x['peak_tree_rss_mib']:,.0f} / {x['max_rss_process_mib']:,.0f} MiB | "
              f"{excl if excl is None else format(excl, ',')} |")
    for w in result["workers"]:
        print(f"{w} worker(s), index + scan: "
              f"{BoxStalls(**result[f'w{w}']['box_stalls']).note()}")
    print(f"\nreport jsonl byte-identical across workers {result['workers']}: "
          f"{result['reports_identical_across_workers']}; index size per input text byte: "
          f"{result['index_bytes_per_text_byte']:.3f}")
    if "day" in result:
        d = result["day"]
        print(f"day N+1 ({d['records']:,} records): append to pool index {d['append_to_pool_index_wall_s']:.1f} s, "
              f"to empty index {d['append_to_empty_index_wall_s']:.1f} s (ratio {d['ratio']:.2f}); "
              f"{1e3 * d['day_wall_s_per_record']:.2f} ms/record vs "
              f"{1e3 * d['pool_index_wall_s_per_record']:.2f} ms/record for the pool")
    if "history" in result:
        h = result["history"]
        print(f"history: scan of {h['pool_records']:,} records with {h['history_records']:,} "
              f"in history {h['scan_with_history_wall_s']:.1f} s vs empty history "
              f"{h['scan_empty_history_wall_s']:.1f} s (ratio {h['ratio']:.2f})")
    if "cumulative" in result:
        c = result["cumulative"]
        print(f"cumulative snapshot ({c['records']:,} records) onto the pool index: "
              f"{c['append_wall_s']:.1f} s, CPU {c['cpu_s']:.1f} s; {c['summary']}")


if __name__ == "__main__":
    main()
