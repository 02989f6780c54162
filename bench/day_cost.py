"""What a small day's `index` costs against a large Iceberg history, against the same day on an
empty index, in one run (docs/benchmarks.md, "a small day against 10^7 contents").

Two Iceberg indexes get the same base package (``--base`` records); the second then gets
``--contents`` generated contents (`bench.scale_history append`: the index's own layout,
``content_keys`` included). Each index then indexes a first day (a warm-up: an `index` reads
in full the data files published since the batch before, which for the history index is the
generated batch), and then, in turns, each measured day: CPU seconds of the process tree, wall
and the tree's peak RSS (`bench.measure`), the load average beside each. The days are
``--day-records`` records each: half of them texts new to the index, half texts of the base
package again (repeats, which the lookups find). Written to ``OUT/result.json``.

::

    python -m bench.day_cost --contents 10000000 --out bench/out/day-cost
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


def index(name: str, location: str, pkg: Path, out: Path, workers: int) -> dict:
    before = load()
    m = run([sys.executable, "-m", "near_dedup_core", "--quiet", "--config", str(CONFIG),
             "--index", location, "index", "--inputs", str(pkg), "--workers", str(workers)],
            out / f"{name}.log")
    if m.returncode:
        raise SystemExit(f"{name} failed: {m.stderr_tail}")
    return {"wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2),
            "peak_tree_rss_mib": round(m.peak_tree_rss_mib), "load_before": before,
            "load_after": load()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.day_cost", allow_abbrev=False)
    ap.add_argument("--contents", type=int, required=True, help="generated history contents")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--base", type=int, default=6000)
    ap.add_argument("--day-records", type=int, default=4000)
    ap.add_argument("--days", type=int, default=2, help="measured days (rounds)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    from bench.scale_history import append

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    p = paragraphs()
    base = package(out, "base", list(range(args.base)), p)
    start = args.base
    days = []
    for d in range(args.days + 1):
        new = list(range(start, start + args.day_records // 2))
        again = list(range(d * 97, d * 97 + args.day_records - len(new)))
        days.append(package(out, f"day-{d}", new + again, p))
        start += len(new)
    result: dict = {"contents": args.contents, "base": args.base,
                    "day_records": args.day_records, "runs": []}
    indexes = {"empty": f"iceberg://{out / 'empty'}", "history": f"iceberg://{out / 'history'}"}
    for name, location in indexes.items():
        shutil.rmtree(out / name, ignore_errors=True)
        result[f"{name}_base"] = index(f"{name}-base", location, base, out, args.workers)
    t = time.perf_counter()
    result["append"] = append(indexes["history"], args.contents)
    result["append_s"] = round(time.perf_counter() - t, 1)
    for name, location in indexes.items():
        result[f"{name}_warm"] = index(f"{name}-day-0", location, days[0], out, args.workers)
    for d in range(1, args.days + 1):
        for name, location in indexes.items():
            r = index(f"{name}-day-{d}", location, days[d], out, args.workers)
            result["runs"].append({"day": d, "index": name, **r})
            (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
            print(name, d, r, flush=True)
    for key in ("cpu_s", "peak_tree_rss_mib", "wall_s"):
        e = [r[key] for r in result["runs"] if r["index"] == "empty"]
        h = [r[key] for r in result["runs"] if r["index"] == "history"]
        result[f"ratio_{key}"] = [round(b / a, 3) for a, b in zip(e, h, strict=True)]
    (out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps({k: v for k, v in result.items() if k.startswith("ratio")}).decode())


if __name__ == "__main__":
    main()
