"""A cumulative snapshot appended by two versions of the code, alternating, in one run.

The pool (``--pool``, default ``pool-1m``) is indexed once, by version B, into a base index;
each run copies it (the copy written to disk, `bench.measure.copy_index`) and appends the
cumulative snapshot (``--cumulative``, default ``cumulative-1m``: the pool again under new
sample ids, 5 % new content) with version A or B (the order flips every round), through the
CLI with ``--workers``, under ``/usr/bin/time -v`` with the process tree sampled
(`bench.measure`), its inputs read once right before it. The appended index must hold the
same rows for both versions (counts and sums of every table's ids, lines and positions; the
run stops otherwise); how much the index file grew is printed with each run.

Usage::

    python -m bench.cumulative_ab --a 0dca630 --b . [--rounds 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
from pathlib import Path

import orjson

from bench.build_corpus import ensure
from bench.e2e_ab import ROOT, checkout, cli
from bench.measure import code_version, copy_index, read_through, wall_clock

#: What must be the same after either version's append.
ROW_SUMS = (
    "SELECT COUNT(*), SUM(content), SUM(line), SUM(position), SUM(package) FROM sources",
    "SELECT COUNT(*), SUM(id), SUM(norm_chars), SUM(shingles), SUM(length(signature)) "
    "FROM contents",
    "SELECT COUNT(*), SUM(content), SUM(scope) FROM raw_texts",
    "SELECT COUNT(*), SUM(content), SUM(key % 1000003) FROM bands",
    "SELECT COUNT(*), SUM(content), SUM(key % 1000003) FROM bands_recent",
)


def row_sums(index: Path) -> list[list]:
    with sqlite3.connect(f"file:{index}?mode=ro", uri=True) as con:
        return [list(con.execute(sql).fetchone()) for sql in ROW_SUMS]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.cumulative_ab",
                                description=__doc__.splitlines()[0])
    p.add_argument("--pool", default="pool-1m")
    p.add_argument("--cumulative", default="cumulative-1m")
    p.add_argument("--a", required=True, help="git revision or checkout folder")
    p.add_argument("--b", required=True, help="git revision or checkout folder")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "cumulative-ab")
    args = p.parse_args(argv)
    pool, cumulative = (x.resolve() for x in ensure(args.pool, args.cumulative))
    args.out = args.out.resolve()  # each version's CLI runs in its own checkout
    args.out.mkdir(parents=True, exist_ok=True)
    versions = {"A": checkout(args.a, args.out), "B": checkout(args.b, args.out)}
    base = args.out / "base.sqlite"
    if not base.exists():
        cli(versions["B"], ["--index", str(base), "index", "--inputs", str(pool), "--workers",
                            str(args.workers)], args.out / "base.log")
    work = args.out / "work.sqlite"
    rows: list[dict] = []
    expected: list[list] | None = None
    for r in range(args.rounds):
        for name in (("A", "B") if r % 2 == 0 else ("B", "A")):
            copy_index(base, work)
            read_through(cumulative, work)
            m = cli(versions[name], ["--index", str(work), "index", "--inputs", str(cumulative),
                                     "--workers", str(args.workers)], args.out / f"{name}.log")
            sums = row_sums(work)
            if expected is None:
                expected = sums
            elif sums != expected:
                raise SystemExit(f"cumulative_ab: version {name} wrote other rows: {sums} "
                                 f"against {expected}")
            grown = work.stat().st_size - base.stat().st_size
            rows.append({"round": r, "version": name, "code": code_version(versions[name]),
                         "index_growth_bytes": grown, **m.as_dict()})
            print(f"[{wall_clock()}] round {r} {name}: wall {m.wall_s:.1f} s, CPU "
                  f"{m.cpu_s:.1f} s ({m.cpu_share:.2f} cores), index +{grown / 1e6:,.1f} MB, "
                  f"{m.box.note()}", flush=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{work}{suffix}").unlink(missing_ok=True)
    (args.out / "cumulative_ab.json").write_bytes(orjson.dumps(
        {"a": args.a, "b": args.b, "rows": rows, "row_sums": expected},
        option=orjson.OPT_INDENT_2))
    for name in ("A", "B"):
        wall = [x["wall_s"] for x in rows if x["version"] == name]
        cpu = [x["cpu_s"] for x in rows if x["version"] == name]
        print(f"{name}: wall {wall} (mean {statistics.mean(wall):.1f} s), CPU mean "
              f"{statistics.mean(cpu):.1f} s")


if __name__ == "__main__":
    main()
