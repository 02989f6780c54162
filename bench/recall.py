"""Recall and precision of `near-dedup scan` against exact ground truth on the 20k set.

1. Ground truth: every pair of the 20k set with exact Jaccard ≥ threshold on the product's
   hashed character-shingle sets (prefix-filter join, ``bench.groundtruth.all_pairs``), shown
   to agree with an unfiltered brute-force comparison on a seeded 3,000-document sample.
2. The CLI indexes the 20k package into a fresh index and scans it (``near-dedup index`` and
   ``near-dedup scan``, as a user runs them).
3. From the frozen report: recall of ground-truth pairs among the report's relations (kinds
   ``exact`` and ``near``; pairs the numeric/unit guard kept apart count as found and are
   reported separately), precision of the relations (recomputed exact Jaccard ≥ threshold,
   reported ``jaccard`` equal to the recomputation), and false exclusions (an excluded sample
   whose ``kept`` partner has exact J < threshold).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import orjson

from bench import groundtruth as gt
from bench.build_corpus import OUT, SET20K, ensure, make_package, read_jsonl
from bench.measure import code_version

ROOT = Path(__file__).resolve().parent.parent
#: The shipped config.
CONFIG = ROOT / "config" / "near-dedup.json"


def cli(args: list[str]) -> float:
    """Run ``python -m near_dedup_core ARGS``; return wall seconds (exit on failure)."""
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "near_dedup_core", *args], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"recall: near-dedup {' '.join(args)} failed ({proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1:]}")
    print(proc.stdout.strip(), file=sys.stderr)
    return time.monotonic() - t


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.recall", description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=SET20K)
    p.add_argument("--package", type=Path, default=OUT / "pkg" / "set20k")
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--workdir", type=Path, default=OUT / "recall")
    p.add_argument("--brute-sample", type=int, default=3000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args(argv)

    from near_dedup_core.config import load_config
    from near_dedup_core.normalize import normalize
    from near_dedup_core.signature import MinHasher

    if args.corpus == SET20K and args.package == OUT / "pkg" / "set20k":
        ensure("set20k")
    config = load_config(args.config)
    t_thr = config.threshold
    docs = list(read_jsonl(args.corpus))
    ids = [d["id"] for d in docs]
    pos = {sid: i for i, sid in enumerate(ids)}
    normalized = [normalize(d["text"]) for d in docs]
    hasher = MinHasher(config.num_perm, config.seed, config.shingle_size)
    flat, offsets = gt.flatten(hasher.shingle_sets(normalized))

    t0 = time.monotonic()
    left, right, jac, candidates = gt.all_pairs(flat, offsets, t_thr)
    gt_seconds = time.monotonic() - t0
    truth = set(zip(left.tolist(), right.tolist(), strict=True))
    print(f"ground truth: {len(truth):,} pairs with J ≥ {t_thr} "
          f"({candidates:,} prefix-filter candidates, {gt_seconds:.0f} s)", file=sys.stderr)

    rng = random.Random(args.seed)
    sample = sorted(rng.sample(range(len(docs)), min(args.brute_sample, len(docs))))
    sflat, soffsets = gt.flatten([flat[offsets[i]:offsets[i + 1]] for i in sample])
    t0 = time.monotonic()
    bl, br, _ = gt.brute_force(sflat, soffsets, t_thr)
    brute_seconds = time.monotonic() - t0
    brute = {(sample[a], sample[b]) for a, b in zip(bl.tolist(), br.tolist(), strict=True)}
    in_sample = set(sample)
    truth_sample = {(a, b) for a, b in truth if a in in_sample and b in in_sample}
    agree = brute == truth_sample
    print(f"brute force on {len(sample):,} docs: {len(brute):,} pairs, prefix filter "
          f"{len(truth_sample):,}, identical: {agree} ({brute_seconds:.0f} s)", file=sys.stderr)

    if not args.package.exists():
        make_package(iter(docs), "set20k", args.package, OUT / "work", 10_000)
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    index, report = args.workdir / "index.sqlite", args.workdir / "report"
    common = ["--quiet", "--index", str(index), "--config", str(args.config)]
    index_s = cli([*common, "index", "--inputs", str(args.package), "--workers", str(args.workers)])
    scan_s = cli([*common, "scan", "--inputs", str(args.package), "--output", str(report),
                  "--workers", str(args.workers)])

    decisions = {d["sample_id"]: d for d in read_jsonl(report / "decisions.jsonl")}
    relations = list(read_jsonl(report / "relations.jsonl"))
    cid = [decisions[sid]["content_id"] for sid in ids]

    def exact_j(i: int, j: int) -> float:
        return float(gt.jaccard_pairs(flat, offsets, np.array([i]), np.array([j]))[0])

    # Relations between two pool samples, as unordered document pairs and content pairs.
    found_docs: dict[tuple[int, int], dict] = {}
    found_contents: set[tuple[str, str]] = set()
    history = mismatched_j = below = 0
    kinds: Counter = Counter()
    blocked: Counter = Counter()
    for rel in relations:
        if rel["history_only"]:
            history += 1
            continue
        i, j = pos[rel["sample"]["sample_id"]], pos[rel["match"]["sample_id"]]
        pair = (min(i, j), max(i, j))
        found_docs[pair] = rel
        found_contents.add(tuple(sorted((cid[i], cid[j]))))
        kinds[rel["kind"]] += 1
        if rel["blocked_by"]:
            blocked[rel["blocked_by"]] += 1
        recomputed = exact_j(i, j)
        if recomputed < t_thr:
            below += 1
        if abs(recomputed - rel["jaccard"]) > 1e-9:
            mismatched_j += 1

    exact_truth = {pr for pr in truth if cid[pr[0]] == cid[pr[1]]}
    near_truth = truth - exact_truth
    near_content_truth = {tuple(sorted((cid[a], cid[b]))) for a, b in near_truth}
    # A sample pair is found when the report relates the two contents (or they are one content):
    # a content repeated in several samples is related once, not once per copy.
    found_pairs = {pr for pr in truth if cid[pr[0]] == cid[pr[1]]
                   or tuple(sorted((cid[pr[0]], cid[pr[1]]))) in found_contents}
    missed = sorted(truth - found_pairs)
    missed_contents = near_content_truth - found_contents
    blocked_contents = {tuple(sorted((cid[i], cid[j]))) for (i, j), rel in found_docs.items()
                        if rel["blocked_by"]}
    truth_blocked = sum(1 for a, b in near_truth
                        if tuple(sorted((cid[a], cid[b]))) in blocked_contents)

    false_exclusions = []
    reasons: Counter = Counter()
    for sid in ids:
        d = decisions[sid]
        reasons[d["reason"]] += 1
        if d["decision"] != "exclude":
            continue
        i, k = pos[sid], pos[d["kept"]["sample_id"]]
        if cid[i] != cid[k] and exact_j(i, k) < t_thr:
            false_exclusions.append((sid, d["kept"]["sample_id"]))
    in_pair = len({i for pr in truth for i in pr})

    result = {
        "date": time.strftime("%Y-%m-%d"), "code": code_version(ROOT),
        "corpus": str(args.corpus), "docs": len(docs), "threshold": t_thr,
        "config": config.model_dump(mode="json"),
        "ground_truth_pairs": len(truth), "ground_truth_exact_pairs": len(exact_truth),
        "ground_truth_near_pairs": len(near_truth),
        "ground_truth_near_content_pairs": len(near_content_truth),
        "docs_in_a_pair": in_pair, "prefix_filter_candidates": candidates,
        "ground_truth_seconds": gt_seconds,
        "brute_force_sample": len(sample), "brute_force_pairs": len(brute),
        "brute_force_agrees": agree, "brute_force_seconds": brute_seconds,
        "index_seconds": index_s, "scan_seconds": scan_s, "workers": args.workers,
        "relations_pool": sum(kinds.values()), "relations_by_kind": dict(kinds),
        "relations_history_only": history, "relations_blocked": dict(blocked),
        "ground_truth_pairs_guard_blocked": truth_blocked,
        "recall_pairs": len(found_pairs) / len(truth),
        "recall_near_content_pairs": (1 - len(missed_contents) / len(near_content_truth))
        if near_content_truth else 1.0,
        "missed_pairs": len(missed),
        "missed_examples": [{"a": ids[a], "b": ids[b], "jaccard": exact_j(a, b)}
                            for a, b in missed[:20]],
        "precision": 1 - below / max(sum(kinds.values()), 1),
        "relations_below_threshold": below, "relations_jaccard_mismatch": mismatched_j,
        "decisions_by_reason": dict(reasons),
        "excluded": sum(1 for d in decisions.values() if d["decision"] == "exclude"),
        "false_exclusions": len(false_exclusions),
        "false_exclusion_examples": false_exclusions[:20],
    }
    out = args.workdir / "recall.json"
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print("| measure | value |\n|---|---:|")
    rows = [
        ("docs (14,000 real + 6,000 reprints)", f"{len(docs):,}"),
        (f"ground-truth pairs J ≥ {t_thr} (exact content / near)",
         f"{len(truth):,} ({len(exact_truth):,} / {len(near_truth):,})"),
        ("docs in a ground-truth pair", f"{in_pair:,}"),
        ("prefix filter = brute force on the 3k sample",
         f"{agree} ({len(brute):,} pairs)"),
        ("recall of ground-truth pairs (relations or same content)",
         f"{result['recall_pairs']:.5f} ({len(missed):,} missed)"),
        ("recall of near content pairs", f"{result['recall_near_content_pairs']:.5f}"),
        ("ground-truth pairs kept apart by the numeric/unit guard", f"{truth_blocked:,}"),
        ("relations in the pool (exact / near)",
         f"{sum(kinds.values()):,} ({kinds['exact']:,} / {kinds['near']:,})"),
        ("precision of relations (recomputed J ≥ threshold)", f"{result['precision']:.5f}"),
        ("relations whose reported jaccard ≠ recomputation", f"{mismatched_j:,}"),
        ("excluded samples", f"{result['excluded']:,}"),
        ("false exclusions (kept partner J < threshold)", f"{len(false_exclusions):,}"),
        (f"index / scan wall, {args.workers} workers", f"{index_s:.1f} s / {scan_s:.1f} s"),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")
    print(f"\ndecisions by reason: {dict(sorted(reasons.items()))}; details in {out}")


if __name__ == "__main__":
    main()
