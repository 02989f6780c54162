"""The speed half of `bench.contamination_quality` (``--speed``): ``--speed-items`` eval items
of mixed lengths against the Debian-documentation pool that the quality run built, the
``contamination`` command next to ``index`` and ``scan`` of the same pool, each through the
CLI under ``/usr/bin/time -v`` (`bench.measure.run`), one at a time.

Items: the sentences of the held-out fifth of ``/usr/share/doc`` (as the quality run cuts
them), then, when those run out, the sentences of the man pages (``/usr/share/man``, the
troff requests dropped), each a cpt record; every length as it comes (from 3 words up).
With ``--speed-absent``, items whose words the pool already holds as one run are left out
(as in the quality run): Debian's documents repeat many sentences, and without it about half
the items are leaked and the run's time is that of reporting them."""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import orjson

from near_dedup_core.package import create_package

from bench.build_corpus import CREATED_AT, write_jsonl
from bench.contamination_quality import (
    WORK,
    WordIndex,
    bucket_of,
    doc_files,
    held_out,
    sentences,
)
from bench.measure import run

_TROFF = re.compile(r"\\f[BIRP]|\\[-&(][a-z]{0,2}|\\\*\(..|\\.")


def man_texts(limit: int) -> list[str]:
    out = []
    for path in sorted(Path("/usr/share/man/man1").glob("*.gz"))[:limit]:
        try:
            raw = gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        lines = [_TROFF.sub("", x) for x in raw.splitlines() if not x.startswith((".", "'"))]
        out.append("\n".join(lines))
    return out


def speed(args: argparse.Namespace) -> None:
    pool = WORK / "pool"
    if not (pool / "manifest.json").exists():
        raise SystemExit("run python -m bench.contamination_quality first (it builds the pool)")
    out = WORK / "speed"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    items = sentences([text for name, text in doc_files() if held_out(name)])
    if len(items) < args.speed_items:
        items += sentences(man_texts(20_000))
    items = list(dict.fromkeys(items))
    if args.speed_absent:  # as the quality run: no item the pool already holds
        docs = [orjson.loads(line)["text"]
                for line in (WORK / "src" / "pool.jsonl").read_bytes().splitlines()]
        index = WordIndex(docs)
        items = [s for s in items if not index.holds(s)]
    items = items[:args.speed_items]
    mix = Counter(bucket_of(len(s.split())) for s in items)
    write_jsonl(out / "items.jsonl", ({"id": f"s{i}", "text": s} for i, s in enumerate(items)))
    evals = create_package(kind="cpt", package_id="speed-evals", tokenizer="eval-tok@1",
                           splits=[("test", out / "items.jsonl")], depends_on=[], parents=[],
                           created_at=CREATED_AT, output=out / "evals").path
    cli = [sys.executable, "-m", "near_dedup_core"]
    workers = str(args.workers)
    steps = {
        "index": [*cli, "--index", str(out / "index.sqlite"), "--quiet", "index", "--inputs",
                  str(pool), "--workers", workers],
        "scan": [*cli, "--index", str(out / "index.sqlite"), "--quiet", "scan", "--inputs",
                 str(pool), "--output", str(out / "scan"), "--workers", workers],
        "contamination": [*cli, "--quiet", "contamination", "--evals", str(evals), "--inputs",
                          str(pool), "--output", str(out / "contamination"), "--workers",
                          workers],
    }
    figures = {}
    for name, command in steps.items():
        m = run(command, out / f"{name}.log")
        figures[name] = {"wall_s": round(m.wall_s, 1), "cpu_s": round(m.cpu_s, 1),
                         "peak_tree_rss_mib": round(m.peak_tree_rss_mib),
                         "exit": m.returncode}
        print(f"{name}: {figures[name]}", file=sys.stderr)
    pool_records = orjson.loads((pool / "manifest.json").read_bytes())
    result = {"items": len(items), "items_by_words": dict(mix), "workers": args.workers,
              "items_absent_from_pool": args.speed_absent,
              "pool": str(pool), "pool_bytes": sum(f["bytes"] for f in pool_records["files"]),
              "pool_records": sum(f["records"] for f in pool_records["files"]),
              "steps": figures,
              "contamination_over_scan": round(figures["contamination"]["wall_s"] /
                                               figures["scan"]["wall_s"], 2)}
    (WORK / "speed.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
