"""What a small day's `index` costs against a large Iceberg history, against the same day on an
empty index, in one run (docs/benchmarks.md, "a small day against 10^7 contents").

Two Iceberg indexes get the same base package (``--base`` records); the second then gets
``--contents`` generated contents (`bench.scale_history append`: the index's own layout,
``content_keys`` included). Each index then indexes a first day (a warm-up: an `index` reads
in full the data files published since the batch before, which for the history index is the
generated batch), and then, in turns, each measured day: CPU seconds of the process tree, wall
and the tree's peak RSS (`bench.measure`), the load average beside each. The days are
``--day-records`` records each: half of them texts new to the index, half texts of the base
package again (repeats, which the lookups find). Written to ``OUT/result.json`` (with
``--first-day N``, ``OUT/result-N.json``; ``--code CHECKOUT`` runs another checkout's code).

With ``--pair NAME EMPTY HISTORY`` (repeatable) the indexes already exist (say the two of a
`bench.scale_history run`, whose history took 25 minutes and 50 GB at 10^8): each pair gets
the base package and the warm-up day once, then every pair takes each measured day in turns.
``--contents N --prepare-only`` makes a new pair (``own``) under OUT and stops after its
warm-up, for a later ``--pair own iceberg://OUT/empty iceberg://OUT/history`` beside another.
``--same-state`` puts each index back to its state after each measured run (its catalog file
copied back), and every round indexes the same day (``--first-day``'s) again: the same
inputs on the same states, ``--days`` rounds in turns.

::

    python -m bench.day_cost --contents 10000000 --out bench/out/day-cost
    NEAR_DEDUP_ICEBERG_BUCKETS=1024 python -m bench.day_cost --contents 10000000 \
        --out bench/out/day-cost8 --prepare-only
    python -m bench.day_cost --out bench/out/day-cost8 \
        --pair 1e8 iceberg://$PWD/bench/out/scale8/empty iceberg://$PWD/bench/out/scale8/history \
        --pair own iceberg://$PWD/bench/out/day-cost8/empty \
        iceberg://$PWD/bench/out/day-cost8/history --days 2
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import orjson

from bench.measure import run

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"


def paragraphs(min_chars: int = 300) -> list[str]:
    """Distinct long paragraphs of the stdlib's docstrings (as the tests' corpus)."""
    seen: dict[str, None] = {}
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in [tree, *(n for n in tree.body
                             if isinstance(n, (ast.FunctionDef, ast.ClassDef)))]:
            for para in (ast.get_docstring(node) or "").split("\n\n"):
                para = " ".join(para.split())
                if len(para) >= min_chars:
                    seen.setdefault(para)
    return list(seen)


def text(p: list[str], i: int) -> str:
    n = len(p)
    return f"{p[i % n]} {p[(i + i // n + 1) % n]} {p[(i * 7 + 3) % n]} (no. {i})"


def package(out: Path, name: str, ids: list[int], p: list[str]) -> Path:
    folder = out / "pkg" / name
    if (folder / "manifest.json").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    src = out / "pkg" / f"{name}.jsonl"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(b"".join(orjson.dumps({"id": f"{name}-{k}", "text": text(p, i)}) + b"\n"
                             for k, i in enumerate(ids)))
    subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet", "snapshot", "create",
                    "--kind", "cpt", "--package-id", name, "--tokenizer", "qwen2-tok@r3",
                    "--split", f"train={src}", "--output", str(folder)], check=True)
    return folder


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def index(name: str, location: str, pkg: Path, out: Path, workers: int,
          code: Path | None = None) -> dict:
    """``pkg`` indexed into ``location``, measured; by ``code``'s ``near_dedup_core`` (a
    checkout, ``--code``), else this one's."""
    before = load()
    env = None if code is None else {**os.environ, "PYTHONPATH": str(code)}
    m = run([sys.executable, "-m", "near_dedup_core", "--quiet", "--config", str(CONFIG),
             "--index", location, "index", "--inputs", str(pkg), "--workers", str(workers)],
            out / f"{name}.log", env=env)
    if m.returncode:
        raise SystemExit(f"{name} failed: {m.stderr_tail}")
    return {"wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2),
            "peak_tree_rss_mib": round(m.peak_tree_rss_mib), "load_before": before,
            "load_after": load()}


def prepare(out: Path, pairs: dict[str, dict[str, str]], base: Path, day0: Path,
            workers: int, code: Path | None = None) -> dict:
    """Each pair (empty, history) given the base package, then the warm-up day, once: a pair
    already prepared under ``out`` (``prepared-NAME.json``) is left as it is. What the
    preparations measured, by pair."""
    done = {}
    for pair, indexes in pairs.items():
        marker = out / f"prepared-{pair}.json"
        if marker.is_file():
            done[pair] = orjson.loads(marker.read_bytes())
            continue
        runs: dict = {}
        for step, pkg in (("base", base), ("warm", day0)):
            for name, location in indexes.items():
                runs[f"{name}_{step}"] = index(f"{pair}-{name}-{pkg.name}", location, pkg,
                                               out, workers, code)
                print(pair, name, step, runs[f"{name}_{step}"], flush=True)
        marker.write_bytes(orjson.dumps({"indexes": indexes, **runs},
                                        option=orjson.OPT_INDENT_2))
        done[pair] = runs
    return done


def on_the_same_state(location: str, measured):
    """``measured()`` run on an index whose state is put back after it: the local index's
    catalog file copied back, so that the next run appends to the same published state (the
    run's data files stay, unreferenced, until `index expire`). Its result."""
    catalog = Path(location.removeprefix("iceberg://")) / "catalog.db"
    if not catalog.is_file():
        raise SystemExit(f"--same-state needs a local index (iceberg:///folder): {location}")
    kept = catalog.with_name("catalog.db.same-state")
    shutil.copy2(catalog, kept)
    try:
        return measured()
    finally:
        shutil.copy2(kept, catalog)
        kept.unlink()


def ratios(runs: list[dict]) -> dict[str, list[float]]:
    out = {}
    for key in ("cpu_s", "peak_tree_rss_mib", "wall_s"):
        e = [r[key] for r in runs if r["index"] == "empty"]
        h = [r[key] for r in runs if r["index"] == "history"]
        out[f"ratio_{key}"] = [round(b / a, 3) for a, b in zip(e, h, strict=True)]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.day_cost", allow_abbrev=False)
    ap.add_argument("--contents", type=int, help="generated history contents (a new pair "
                    "of indexes under --out)")
    ap.add_argument("--pair", nargs=3, action="append", metavar=("NAME", "EMPTY", "HISTORY"),
                    help="an existing pair of Iceberg indexes (iceberg:///…), an empty index "
                         "and a history, instead of --contents; repeated, the pairs take "
                         "each day in turns")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--base", type=int, default=6000)
    ap.add_argument("--day-records", type=int, default=4000)
    ap.add_argument("--days", type=int, default=2, help="measured days (rounds)")
    ap.add_argument("--first-day", type=int, default=1,
                    help="the first measured day's number (a pair measured before has "
                         "indexed days 1 .. N already: give N + 1)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--code", type=Path,
                    help="a checkout (say the commit before, `git worktree add`) whose "
                         "near_dedup_core the measured runs use, for a before/after of the "
                         "same pair on alternate days")
    ap.add_argument("--same-state", action="store_true",
                    help="every measured day appended to the state each index was in before "
                         "the first (its catalog file copied back after each run; local "
                         "indexes): the same inputs on the same states, in turns")
    ap.add_argument("--prepare-only", action="store_true",
                    help="stop once every pair holds the base package and the warm-up day "
                         "(with --contents: `--pair own iceberg://OUT/empty "
                         "iceberg://OUT/history` measures the days later)")
    args = ap.parse_args(argv)
    if (args.contents is None) == (args.pair is None):
        ap.error("give --contents or --pair")
    code = None if args.code is None else args.code.resolve()
    # written as the days go: ``result.json``, or ``result-N.json`` from day N > 1
    written = "result.json" if args.first_day == 1 else f"result-{args.first_day}.json"
    from bench.scale_history import append

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    p = paragraphs()
    base = package(out, "base", list(range(args.base)), p)
    start = args.base
    days = []
    for d in range(args.first_day + args.days):
        new = list(range(start, start + args.day_records // 2))
        again = list(range(d * 97, d * 97 + args.day_records - len(new)))
        if d == 0 or d >= args.first_day:
            days.append(package(out, f"day-{d}", new + again, p))
        start += len(new)
    result: dict = {"code": str(code or ROOT), "contents": args.contents, "base": args.base,
                    "day_records": args.day_records, "runs": []}
    if args.pair is None:
        indexes = {"empty": f"iceberg://{out / 'empty'}",
                   "history": f"iceberg://{out / 'history'}"}
        for name, location in indexes.items():
            shutil.rmtree(out / name, ignore_errors=True)
            result[f"{name}_base"] = index(f"{name}-base", location, base, out, args.workers,
                                           code)
        t = time.perf_counter()
        result["append"] = append(indexes["history"], args.contents)
        result["append_s"] = round(time.perf_counter() - t, 1)
        for name, location in indexes.items():
            result[f"{name}_warm"] = index(f"{name}-day-0", location, days[0], out,
                                           args.workers, code)
        pairs = {"own": indexes}
        # prepared: `--pair own iceberg://OUT/empty iceberg://OUT/history` measures more days
        (out / "prepared-own.json").write_bytes(orjson.dumps(
            {"indexes": indexes, **{k: v for k, v in result.items() if k != "runs"}},
            option=orjson.OPT_INDENT_2))
        if args.prepare_only:
            print(orjson.dumps(result).decode())
            return
    else:
        # an existing pair gets the base package (the days repeat half of its texts) and
        # the warm-up day first, once
        pairs = {name: {"empty": empty, "history": history}
                 for name, empty, history in args.pair}
        result["pairs"] = pairs
        result["prepared"] = prepare(out, pairs, base, days[0], args.workers, code)
        if args.prepare_only:
            print(orjson.dumps(result["prepared"]).decode())
            return
    for at, d in enumerate(range(args.first_day, args.first_day + args.days), start=1):
        for pair, indexes in pairs.items():
            # in turns: the empty index first on odd days, the history first on even ones
            for name, location in sorted(indexes.items(), reverse=d % 2 == 0):
                tag = name if args.pair is None else f"{pair}-{name}"
                def measured(tag=tag, location=location, at=at, d=d):
                    # on the same states, every round the same day (the first measured one)
                    day = days[1] if args.same_state else days[at]
                    return index(f"{tag}-day-{d}", location, day, out, args.workers, code)

                r = on_the_same_state(location, measured) if args.same_state else measured()
                result["runs"].append({"day": d, "index": name,
                                       **({} if args.pair is None else {"pair": pair}), **r})
                (out / written).write_bytes(orjson.dumps(result,
                                                               option=orjson.OPT_INDENT_2))
                print(tag, d, r, flush=True)
    if args.pair is None:
        result.update(ratios(result["runs"]))
    else:
        result["ratios"] = {pair: ratios([r for r in result["runs"] if r["pair"] == pair])
                            for pair in pairs}
    (out / written).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps({k: v for k, v in result.items() if k.startswith("ratio")}).decode())


if __name__ == "__main__":
    main()
