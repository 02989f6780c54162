"""Contamination at scale: recall on planted eval items, and speed next to the dedup scan.

For a pool package P (``pool-100k`` by default, from ``bench.build_corpus``):

1. **items** — ``--items`` eval items of 50–600 characters cut at word boundaries from
   held-out real text: docstring paragraphs of installed third-party packages (numpy,
   SQLAlchemy, pydantic, dagster, …), which the corpus does not hold; written as a CPT eval
   package.
2. **plants** — ``--planted`` of the items are planted into real documents with
   re-publication edits (a few characters changed, words upper-cased, whitespace changed,
   surrounding text), keeping exact containment in 0.80–1.00; the hosts form a package
   ``plants`` added to the pool. Recall on plants = planted pairs reported / planted pairs.
3. **cross-check** — for ``--truth-items`` items (half of them planted), every pair of the
   whole pool at or above the threshold, found by the same exact verification with *every*
   shingle as an anchor (no filter); the real run must report exactly these pairs.
4. **speed** — through the CLI under ``/usr/bin/time -v``, one at a time: ``index`` of
   P + plants into a fresh index, then ``--rounds`` rounds of ``contamination`` of all items
   against P + plants and the dedup ``scan`` of that pool, alternated so that each round's
   ratio contamination / scan is measured under the same load of a shared machine (the load
   average is recorded with each step). With ``--baseline DIR`` (a checkout of other code),
   each round also runs that code's ``contamination`` on the same inputs: the before/after
   ratio, and whether the two reports are the same bytes.

Outputs under ``bench/out/contamination-<pool>-<items>/`` (``contamination.json`` holds the
figures); the report of the last round is the one recall is measured on.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import orjson

from near_dedup_core import contamination as ct
from near_dedup_core.config import load_config
from near_dedup_core.fsutil import sha256_file
from near_dedup_core.normalize import normalize
from near_dedup_core.package import create_package, open_packages
from near_dedup_core.signature import MinHasher

from bench.build_corpus import CREATED_AT, OUT, REAL, TOKENIZER, ensure, read_jsonl, write_jsonl
from bench.measure import code_version, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
#: Third-party packages whose docstrings are the eval items (not part of the corpus).
HELD_OUT_PACKAGES = ("numpy", "sqlalchemy", "pydantic", "dagster", "pandas", "numba")


def held_out_paragraphs(wanted: int) -> list[str]:
    """Docstring paragraphs (≥ 80 characters, whitespace collapsed, distinct) of installed
    third-party packages, in file order: real text that the corpus (CPython's own
    docstrings, man pages, copyright and package metadata files) does not hold."""
    root = Path(sysconfig.get_paths()["purelib"])
    seen: dict[str, None] = {}
    for package in HELD_OUT_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                    for para in (ast.get_docstring(node) or "").split("\n\n"):
                        para = " ".join(para.split())
                        if len(para) >= 80:
                            seen.setdefault(para)
            if len(seen) >= wanted:
                return list(seen)
    return list(seen)


def _segment(rng: random.Random, text: str) -> str | None:
    words = list(re.finditer(r"\S+", text))
    if len(words) < 12:
        return None
    target = rng.randint(50, 600)
    start = rng.randrange(len(words))
    end = start
    while end + 1 < len(words) and words[end + 1].end() - words[start].start() <= target:
        end += 1
    piece = text[words[start].start():words[end].end()]
    return piece if len(normalize(piece)) >= 50 else None


def _edit(rng: random.Random, item: str, n_chars: int) -> str:
    chars = list(item)
    letters = [i for i, c in enumerate(chars) if c.isalpha()]
    for i in rng.sample(letters, min(n_chars, len(letters))):
        chars[i] = rng.choice("xqzjkvw")
    words = "".join(chars).split()
    words = [w.upper() if rng.random() < 0.1 else w for w in words]
    return "".join(w + rng.choice([" ", " ", "  ", "\n"]) for w in words).strip()


def build_inputs(out: Path, n_items: int, n_planted: int, seed: int, threshold: float
                 ) -> tuple[Path, Path, list[tuple[str, str]]]:
    """The eval package, the plants package and the planted (item id, host id) pairs."""
    rng = random.Random(seed)
    paragraphs = held_out_paragraphs(4 * n_items)
    items = []
    for i in rng.sample(range(len(paragraphs)), len(paragraphs)):
        piece = _segment(rng, paragraphs[i])
        if piece is not None:
            items.append(piece)
        if len(items) == n_items:
            break
    real = [d["text"] for d in read_jsonl(REAL)]
    hosts = [i for i in rng.sample(range(len(real)), len(real))
             if 1_000 <= len(real[i]) <= 20_000]
    hasher = MinHasher(1, 1, 5)
    plants, pairs = [], []
    for n in range(n_planted):
        item = items[n]
        host = real[hosts[n]]
        item_set = hasher.shingle_sets([normalize(item)])[0]
        for edits in (rng.randint(0, max(1, len(item) // 40)), 1, 0):
            piece = _edit(rng, item, edits)
            if ct.containment(item_set, hasher.shingle_sets([normalize(piece)])[0]) >= threshold:
                break
        cuts = [m.start() for m in re.finditer(r"\n\n|\. ", host)] or [len(host)]
        at = rng.choice(cuts)
        plants.append({"id": f"host-{n:05d}", "text": host[:at] + "\n" + piece + "\n" + host[at:],
                       "domain": "planted"})
        pairs.append((f"item-{n:05d}", f"host-{n:05d}"))
    src = out / "src"
    write_jsonl(src / "items.jsonl", ({"id": f"item-{n:05d}", "text": t}
                                     for n, t in enumerate(items)))
    write_jsonl(src / "plants.jsonl", plants)
    evals = create_package(kind="cpt", package_id=f"evals-{n_items}", tokenizer="eval-tok@1",
                           splits=[("test", src / "items.jsonl")], depends_on=[], parents=[],
                           created_at=CREATED_AT, output=out / "evals").path
    plant_pkg = create_package(kind="cpt", package_id="plants", tokenizer=TOKENIZER,
                               splits=[("train", src / "plants.jsonl")], depends_on=[],
                               parents=[], created_at=CREATED_AT, output=out / "plants").path
    return evals, plant_pkg, pairs


def ground_truth(evals: Path, pool: list[Path], first: int, n_items: int, workers: int,
                 config_path: Path = CONFIG) -> tuple[set[tuple], set[str]]:
    """Every (item, package, sample) of items ``first`` … ``first + n_items − 1`` at or above
    the threshold (every shingle an anchor, exact verification), and those items' ids."""
    config = load_config(config_path)
    pkgs = open_packages(pool)
    items, _, _ = ct.read_items(open_packages([evals]), pkgs[0].kind, config, False)
    items = items[first:first + n_items]
    state, _ = ct.build_state(items, config, exhaustive=True)
    pairs, _, _ = ct.run.probe_pool(pkgs, state, config, workers, True)
    return ({(items[p.item].ref.sample_id, p.sample.package_id, p.sample.sample_id)
             for p in pairs}, {it.ref.sample_id for it in items})


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.contamination", description=__doc__)
    p.add_argument("--pool", default="pool-100k")
    p.add_argument("--items", type=int, default=2_000)
    p.add_argument("--planted", type=int, default=1_000)
    p.add_argument("--truth-items", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--skip-scan", action="store_true", help="contamination only")
    p.add_argument("--from-index", action="store_true",
                   help="each round also runs contamination --index (the pool's texts read "
                        "from the index the scan uses), whose report must be the same bytes")
    p.add_argument("--max-pool-records", type=int, default=None,
                   help="run with the repository's config but this pool limit (the 1M pool "
                        "plus the planted documents is over the default 1,000,000)")
    p.add_argument("--rounds", type=int, default=1,
                   help="contamination and scan alternated this many times (one index)")
    p.add_argument("--baseline", type=lambda v: Path(v).resolve(), default=None,
                   help="a checkout of other code (git worktree add DIR COMMIT): each round "
                        "also runs its contamination, and the reports are compared")
    args = p.parse_args(argv)
    pool = ensure(args.pool)[0].resolve()
    out = (OUT / f"contamination-{args.pool}-{args.items}").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config_path = CONFIG
    if args.max_pool_records is not None:  # the repository's config with another pool limit
        config_path = out / "config.json"
        raw = orjson.loads(CONFIG.read_bytes())
        config_path.write_bytes(orjson.dumps({**raw, "max_pool_records": args.max_pool_records}))
    threshold = load_config(config_path).contamination_threshold
    t0 = time.monotonic()
    evals, plants, planted = build_inputs(out, args.items, args.planted, args.seed, threshold)
    print(f"[{wall_clock()}] inputs built in {time.monotonic() - t0:.0f} s", flush=True)
    figures: dict = {"pool": args.pool, "items": args.items, "planted": args.planted,
                     "workers": args.workers, "code": code_version(ROOT), "steps": {},
                     "rounds": []}
    if args.baseline is not None:
        figures["baseline_code"] = code_version(args.baseline)
    config = ["--config", str(config_path)]
    report = out / "report"
    index = out / "index.sqlite"

    def contamination(output: Path) -> list[str]:
        return ["contamination", "--evals", str(evals), "--inputs", str(pool), str(plants),
                "--output", str(output), "--workers", str(args.workers)]

    def step(name: str, cli: list[str], baseline: Path | None = None) -> dict:
        cmd = [sys.executable, "-m", "near_dedup_core", *cli]
        # `python -m` puts the working directory first on sys.path: the baseline runs in its
        # own folder (every path given is absolute)
        env = None if baseline is None else {**os.environ, "PYTHONPATH": str(baseline)}
        print(f"[{wall_clock()}] {name}: {' '.join(cmd[1:])}", flush=True)
        load = os.getloadavg()[0]
        m = run(cmd, out / "logs" / f"{name}.log", cwd=baseline or ROOT, env=env)
        print(f"[{wall_clock()}] {name}: exit {m.returncode}, wall {m.wall_s:.1f} s, CPU "
              f"{m.cpu_s:.1f} s, peak RSS {m.max_rss_process_mib:,.0f} MiB/process, "
              f"{m.peak_tree_rss_mib:,.0f} MiB/tree, load {load:.1f}; {m.stdout[-300:]}",
              flush=True)
        if m.returncode != 0:
            raise SystemExit(f"bench.contamination: {name} failed: {m.stderr_tail}")
        return {**m.as_dict(), "load_before": load, "load_after": os.getloadavg()[0]}

    if not args.skip_scan:
        figures["steps"]["index"] = step("index", ["--index", str(index), *config, "index",
                                                   "--inputs", str(pool), str(plants),
                                                   "--workers", str(args.workers)])
    for r in range(args.rounds):
        shutil.rmtree(report, ignore_errors=True)
        row = {"contamination": step(f"contamination-{r}", [*config, *contamination(report)])}
        if args.baseline is not None:
            before = out / "report-baseline"
            shutil.rmtree(before, ignore_errors=True)
            row["baseline"] = step(f"baseline-{r}", [*config, *contamination(before)],
                                   args.baseline)
            row["baseline_same_report"] = all(
                sha256_file(report / f) == sha256_file(before / f) for f in ct.FILES)
            row["contamination_over_baseline"] = {
                k: row["contamination"][k] / row["baseline"][k] for k in ("wall_s", "cpu_s")}
        if args.from_index and not args.skip_scan:
            indexed = out / "report-from-index"
            shutil.rmtree(indexed, ignore_errors=True)
            row["from_index"] = step(f"contamination-index-{r}",
                                     ["--index", str(index), *config, *contamination(indexed)])
            row["from_index_same_report"] = all(
                sha256_file(report / f) == sha256_file(indexed / f) for f in (*ct.FILES,
                                                                               "manifest.json"))
        if not args.skip_scan:
            shutil.rmtree(out / "scan-report", ignore_errors=True)
            row["scan"] = step(f"scan-{r}", ["--index", str(index), *config, "scan", "--inputs",
                                             str(pool), str(plants), "--output",
                                             str(out / "scan-report"),
                                             "--workers", str(args.workers)])
            row["contamination_over_scan"] = {
                k: row["contamination"][k] / row["scan"][k] for k in ("wall_s", "cpu_s")}
            if "from_index" in row:
                row["from_index_over_scan"] = {
                    k: row["from_index"][k] / row["scan"][k] for k in ("wall_s", "cpu_s")}
        figures["rounds"].append(row)
        print(f"[{wall_clock()}] round {r}: " + ", ".join(
            f"{key} wall {v['wall_s']:.2f}, CPU {v['cpu_s']:.2f}" for key, v in row.items()
            if key.endswith(("_over_scan", "_over_baseline"))), flush=True)
    figures["steps"]["contamination"] = figures["rounds"][-1]["contamination"]
    if not args.skip_scan:
        figures["steps"]["scan"] = figures["rounds"][-1]["scan"]

    lines = [orjson.loads(x) for x in (report / "contamination.jsonl").read_bytes().splitlines()]
    reported = {(r["eval"]["sample_id"], r["training"]["package_id"], r["training"]["sample_id"])
                for r in lines}
    found = sum(1 for item, host in planted if (item, "plants", host) in reported)
    manifest = orjson.loads((report / "manifest.json").read_bytes())
    figures["report"] = {"counts": manifest["counts"], "candidates": manifest["candidates"]}
    figures["recall_planted"] = {"planted": len(planted), "found": found,
                                 "recall": found / len(planted)}
    containments = np.asarray([r["containment"] for r in lines
                               if r["training"]["package_id"] == "plants"])
    if len(containments):
        figures["planted_containment_quantiles"] = {
            f"q{q:g}": float(np.quantile(containments, q)) for q in (0.0, 0.1, 0.5, 1.0)}
    if args.truth_items:
        t0 = time.monotonic()
        # half of them planted, half only naturally present (or absent)
        first = max(0, args.planted - args.truth_items // 2)
        truth, wanted = ground_truth(evals, [pool, plants], first, args.truth_items,
                                     args.workers, config_path)
        mine = {k for k in reported if k[0] in wanted}
        figures["recall_truth"] = {"items": args.truth_items, "true_pairs": len(truth),
                                   "reported": len(mine), "found": len(truth & mine),
                                   "extra": len(mine - truth),
                                   "recall": len(truth & mine) / len(truth) if truth else 1.0,
                                   "seconds": round(time.monotonic() - t0, 1)}
    (out / "contamination.json").write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    print(orjson.dumps({k: v for k, v in figures.items() if k != "steps"},
                       option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
