"""Signature throughput of near-dedup against datasketch and rensa, side by side in one process.

All methods get the identical input: the texts of the 20k set normalized once by
``near_dedup_core.normalize`` (NFKC, casefold, whitespace collapse), and the identical
character 5-gram shingles (the peers get the set of 5-code-point substrings; ours hashes the
same windows inside its kernel — the run checks that the shingle set sizes agree).

Methods:
- ``datasketch``: ``MinHash(num_perm=128)`` per document (the default: SHA-1 of each shingle,
  affine permutations mod 2^61-1), ``update_batch`` over the shingles' UTF-8 bytes.
- ``rensa``: ``RMinHash(num_perm=128, seed=1)`` per document, ``update(list of shingles)``.
- ``ours per doc``: ``MinHasher.signature(text)`` one document per call.
- ``ours batch``: ``MinHasher.signatures(texts)`` over the round's documents (how index and
  scan call it).

The peers' timings include building the shingle set in Python, because that is part of what
signing a text costs with them; the time of that step alone is reported too ("shingling").
Rounds are paired: every round takes a fresh slice of documents, runs every method on it in a
rotated order, and ratios are taken within the round; the table shows medians over rounds.
The process is pinned to one CPU (``os.sched_setaffinity``).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import orjson

from bench.build_corpus import SET20K, ensure, read_jsonl
from bench.measure import code_version

K = 5
NUM_PERM = 128


def shingles(text: str, k: int = K) -> set[str]:
    """The set of k-code-point windows (one shingle for a text shorter than k)."""
    if len(text) < k:
        return {text}
    return {text[i:i + k] for i in range(len(text) - k + 1)}


def run_datasketch(texts: list[str]) -> None:
    from datasketch import MinHash

    for t in texts:
        m = MinHash(num_perm=NUM_PERM)
        m.update_batch([s.encode("utf-8") for s in shingles(t)])
        m.digest()


def run_rensa(texts: list[str]) -> None:
    from rensa import RMinHash

    for t in texts:
        m = RMinHash(num_perm=NUM_PERM, seed=1)
        m.update(list(shingles(t)))
        m.digest()


def run_shingling(texts: list[str]) -> None:
    for t in texts:
        list(shingles(t))


def make_ours():
    from near_dedup_core.signature import MinHasher

    hasher = MinHasher(num_perm=NUM_PERM, seed=1, shingle_size=K)

    def per_doc(texts: list[str]) -> None:
        for t in texts:
            hasher.signature(t)

    def batch(texts: list[str]) -> None:
        hasher.signatures(texts)

    return hasher, per_doc, batch


def check_identical_shingles(hasher, texts: list[str]) -> int:
    """Number of documents whose hashed shingle set size differs from the string set size
    (0 expected: a 64-bit collision inside one document is ~never)."""
    _, sizes = hasher.signatures_and_sizes(texts)
    return sum(int(s) != len(shingles(t)) for s, t in zip(sizes.tolist(), texts, strict=True))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.peers", description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=SET20K)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--docs-per-round", type=int, default=1000)
    p.add_argument("--cpu", type=int, default=0, help="CPU to pin the process to")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("bench/out/peers.json"))
    args = p.parse_args(argv)

    if args.corpus == SET20K:
        ensure()
    os.sched_setaffinity(0, {args.cpu})
    from near_dedup_core.normalize import normalize

    raw = [r["text"] for r in read_jsonl(args.corpus)]
    t0 = time.perf_counter()
    texts = [normalize(t) for t in raw]
    norm_seconds = time.perf_counter() - t0
    raw_mb = sum(len(t.encode("utf-8", "surrogatepass")) for t in raw) / 1e6

    hasher, ours_doc, ours_batch = make_ours()
    methods = {
        "datasketch": run_datasketch,
        "rensa": run_rensa,
        "ours per doc": ours_doc,
        "ours batch": ours_batch,
        "shingling only (Python set of 5-grams)": run_shingling,
    }
    for fn in methods.values():  # warm-up: imports, JIT compilation
        fn(texts[:20])
    mismatched = check_identical_shingles(hasher, texts)

    rng = random.Random(args.seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    need = args.rounds * args.docs_per_round
    if need > len(order):
        raise SystemExit(f"peers: {need} documents needed, corpus has {len(order)}")
    names = list(methods)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    mb_per_round: list[float] = []
    docs_per_round = args.docs_per_round
    for r in range(args.rounds):
        chunk = [texts[i] for i in order[r * docs_per_round:(r + 1) * docs_per_round]]
        mb_per_round.append(sum(len(t.encode("utf-8", "surrogatepass")) for t in chunk) / 1e6)
        rotated = names[r % len(names):] + names[:r % len(names)]
        for name in rotated:
            t = time.perf_counter()
            methods[name](chunk)
            seconds[name].append(time.perf_counter() - t)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n.split(' (')[0]} {docs_per_round / seconds[n][-1]:,.0f} docs/s" for n in names),
            file=sys.stderr)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    rows = []
    for name in names:
        rows.append({
            "method": name,
            "docs_per_s": med([docs_per_round / s for s in seconds[name]]),
            "mb_per_s": med([mb / s for mb, s in zip(mb_per_round, seconds[name], strict=True)]),
            "x_datasketch": med([d / s for d, s in zip(seconds["datasketch"], seconds[name], strict=True)]),
            "x_rensa": med([q / s for q, s in zip(seconds["rensa"], seconds[name], strict=True)]),
            "round_seconds": seconds[name],
        })
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "code": code_version(Path(__file__).resolve().parent.parent),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                   f"Python {platform.python_version()}, pinned to CPU {args.cpu}",
        "corpus": str(args.corpus), "docs": len(texts), "rounds": args.rounds,
        "docs_per_round": docs_per_round,
        "normalize_mb_per_s": raw_mb / norm_seconds,
        "shingle_size_mismatches": mismatched,
        "versions": _versions(),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print("| method | docs/s | MB/s | × datasketch default | × rensa per doc |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['method']} | {row['docs_per_s']:,.0f} | {row['mb_per_s']:.2f} | "
              f"{row['x_datasketch']:.1f} | {row['x_rensa']:.2f} |")
    print(f"\n{len(texts):,} docs, {args.rounds} paired rounds × {docs_per_round} docs, one CPU; "
          f"normalization {result['normalize_mb_per_s']:.1f} MB/s (not included above); "
          f"shingle-set size mismatches ours vs Python: {mismatched}")


def _versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("datasketch", "rensa", "numpy", "numba")}


if __name__ == "__main__":
    main()
