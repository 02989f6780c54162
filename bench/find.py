"""`index find` of N query texts against an index, next to the scan of those N texts as a
pool against the same index, in alternating rounds of one run (`bench.measure.run`: wall and
CPU of the process tree under ``/usr/bin/time -v``).

The index holds ``pool-100k`` (batch 1) and a package of the N queries (batch 2: a scan's
inputs must be indexed): the first N records of ``day-100k`` (`bench.build_corpus`: mosaics
of real text and reprints of texts the history holds, so that queries have near copies in
the history). `index find --jsonl` asks about the same N texts as ``{"id", "text"}`` lines;
each query then finds itself too, as the scan finds its pool's own contents.

    .venv/bin/python -m bench.find --queries 2000 --rounds 2

At the issue's scale, on a copy of an index of ``pool-1m`` built beforehand (``--history``,
copied instead of indexing the pool again) and queries from ``day-1m``::

    .venv/bin/python -m bench.find --queries 10000 --rounds 4 --pool bench/out/pkg/pool-1m \
        --day bench/out/pkg/day-1m --history bench/out/find1m/pool-1m.sqlite \
        --work bench/out/find1m

With ``--a CHECKOUT`` (another checkout of this repository, the code before a change, say),
each round also runs `index find` with that code (its working directory and ``PYTHONPATH``),
the three commands in turns (A, this code's find, scan; reversed every other round); the
answers of both must be byte-identical (the run stops otherwise), and the result adds the
ratios of A's find to the scan and of this find to A's. Each round records the CPU of the
command's own process (``main_cpu_s``, as ``/usr/bin/time`` counts it: not its worker
pool's, whose forkserver it does not wait for) beside that of its process tree.

(``tests/test_find.py`` runs it on the sample packages, ``--pool`` and ``--day``.)"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

import orjson

from near_dedup_core.package import create_package

from bench.build_corpus import CREATED_AT, OUT, TOKENIZER, ensure, read_jsonl, write_jsonl
from bench.measure import code_version, copy_index, read_through, run, wall_clock

WORK = OUT / "find"


def _queries(day: Path, n: int) -> list[dict]:
    out: list[dict] = []
    for shard in sorted((day / "data").rglob("*.jsonl")):
        for record in read_jsonl(shard):
            if "text" not in record:  # a ref to an earlier package's sample
                continue
            out.append({"id": record["id"], "text": record["text"]})
            if len(out) == n:
                return out
    raise SystemExit(f"bench.find: {day} holds fewer than {n} records")


def _prepare(work: Path, n: int, workers: int, pool: Path | None, day: Path | None,
             history: Path | None = None) -> tuple[Path, Path, Path]:
    """The index (pool-100k, then the queries' package), the queries' package and JSONL;
    with ``history``, a copy of that index of the pool instead of indexing it."""
    if pool is None or day is None:
        pool, day = ensure("pool-100k", "day-100k")
    work.mkdir(parents=True, exist_ok=True)
    index = work / f"index-{n}.sqlite"
    lines = work / f"queries-{n}.jsonl"
    package = work / f"queries-{n}"
    if index.exists() and package.exists() and lines.exists():
        return index, package, lines
    for stale in (index, package, lines):
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    queries = _queries(day, n)
    write_jsonl(lines, queries)
    create_package(kind="cpt", package_id=f"queries-{n}", tokenizer=TOKENIZER,
                   splits=[("train", lines)], depends_on=[], parents=[],
                   created_at=CREATED_AT, output=package)
    cli = [sys.executable, "-m", "near_dedup_core", "--quiet", "--index", str(index)]
    if history is not None:
        copy_index(history, index)
    for inputs in (pool, package) if history is None else (package,):
        m = run([*cli, "index", "--inputs", str(inputs), "--workers", str(workers)],
                work / "index.log")
        if m.returncode:
            raise SystemExit(f"bench.find: index {inputs} failed, see {work / 'index.log'}")
    return index, package, lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.find",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pool", type=Path, help="the indexed history (default: pool-100k)")
    p.add_argument("--day", type=Path, help="where the queries come from (default: day-100k)")
    p.add_argument("--history", type=Path,
                   help="a SQLite index of --pool alone, copied instead of indexing the pool")
    p.add_argument("--work", type=Path, default=WORK, help="where to write (bench/out/find)")
    p.add_argument("--a", type=Path,
                   help="another checkout whose `index find` runs too, in turns (module doc)")
    args = p.parse_args(argv)
    work = args.work
    index, package, lines = _prepare(work, args.queries, args.workers, args.pool, args.day,
                                     args.history)
    cli = [sys.executable, "-m", "near_dedup_core", "--quiet", "--index", str(index)]
    workers = ["--workers", str(args.workers)]
    names = ("find_a", "find", "scan") if args.a is not None else ("find", "scan")
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    answers = work / "answers.jsonl"
    first: str | None = None  # the answers of the run's first find
    for k in range(args.rounds):
        order = names if k % 2 == 0 else names[::-1]
        for name in order:
            read_through(index, package, lines)
            if name.startswith("find"):
                code = (args.a if name == "find_a" else Path(__file__).parent.parent).resolve()
                m = run([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                         str(index.resolve()), "index", "find", "--jsonl",
                         str(lines.resolve()), "--json", *workers], work / f"{name}.log",
                        cwd=code, env={**os.environ, "PYTHONPATH": str(code)})
                first = first or m.stdout
                if m.returncode == 0 and m.stdout != first:
                    raise SystemExit(f"bench.find: the answers of {args.a} and of this code "
                                     f"differ")
                answers.write_text(m.stdout + "\n", encoding="utf-8")
            else:
                report = work / "report"
                shutil.rmtree(report, ignore_errors=True)
                m = run([*cli, "scan", "--inputs", str(package), "--output", str(report),
                         *workers], work / "scan.log")
            if m.returncode:
                raise SystemExit(f"bench.find: {name} exited {m.returncode}, see "
                                 f"{work / (name + '.log')}")
            rounds[name].append({"wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2),
                                 "main_cpu_s": round(m.user_s + m.sys_s, 2),
                                 "peak_tree_rss_mib": round(m.peak_tree_rss_mib)})
            print(f"round {k + 1} {name}: {rounds[name][-1]}", file=sys.stderr)
    found = [orjson.loads(line) for line in answers.read_text(encoding="utf-8").splitlines()
             if line]
    near = sum(1 for a in found for m in a["matches"] if m["kind"] == "near")
    with_history = sum(1 for a in found if any(
        s["batch"] == 1 for m in a["matches"] for s in m["sources"]))
    median = {name: {key: round(statistics.median(r[key] for r in rs), 2)
                     for key in ("wall_s", "cpu_s", "main_cpu_s")}
              for name, rs in rounds.items()}
    result = {"when": wall_clock(), **code_version(Path(".")), "queries": args.queries,
              "index": str(index),
              "workers": args.workers, "rounds": rounds, "median": median,
              "near_matches": near, "queries_with_a_history_match": with_history,
              "find_over_scan_wall": round(median["find"]["wall_s"] / median["scan"]["wall_s"], 3),
              "find_over_scan_cpu": round(median["find"]["cpu_s"] / median["scan"]["cpu_s"], 3)}
    if args.a is not None:
        result["a"] = str(args.a)
        for key in ("wall", "cpu"):
            a_find = median["find_a"][f"{key}_s"]
            result[f"find_a_over_scan_{key}"] = round(a_find / median["scan"][f"{key}_s"], 3)
            result[f"find_over_find_a_{key}"] = round(median["find"][f"{key}_s"] / a_find, 3)
    (work / "find.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
