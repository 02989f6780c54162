"""How many LSH candidates each document of a corpus gets with the product's banding.

Signatures and band keys are the product's own (``MinHasher.signatures``, ``band_keys`` with
the config's bands × rows); a document's candidates are the other documents sharing at least
one band key. The distribution tells what ``max_candidates`` a corpus needs: a scan stops with
exit 2 as soon as one sample has more candidates than the limit.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench.build_corpus import SET20K, ensure, family, read_jsonl

ROOT = Path(__file__).resolve().parent.parent


def candidate_counts(keys: np.ndarray) -> np.ndarray:
    """Distinct other documents sharing a band key, per document ((n, bands) int64 keys)."""
    n, bands = keys.shape
    flat = keys.ravel()
    order = np.argsort(flat, kind="stable")
    docs = order // bands
    sorted_keys = flat[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    ends = np.r_[starts[1:], sorted_keys.shape[0]]
    neighbours: list[set[int]] = [set() for _ in range(n)]
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e - s > 1:
            group = docs[s:e].tolist()
            for d in group:
                neighbours[d].update(group)
    return np.array([max(len(x) - 1, 0) for x in neighbours], dtype=np.int64)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.candidates",
                                description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=SET20K)
    p.add_argument("--config", type=Path, default=ROOT / "config" / "near-dedup.json")
    args = p.parse_args(argv)
    if args.corpus == SET20K:
        ensure()
    from near_dedup_core.config import load_config
    from near_dedup_core.normalize import normalize
    from near_dedup_core.signature import MinHasher, band_keys

    config = load_config(args.config)
    docs = list(read_jsonl(args.corpus))
    t0 = time.monotonic()
    hasher = MinHasher(config.num_perm, config.seed, config.shingle_size)
    sigs = hasher.signatures([normalize(d["text"]) for d in docs])
    counts = candidate_counts(band_keys(sigs, config.bands, config.rows))
    pct = np.percentile(counts, [50, 90, 99, 99.9, 100])
    over = counts > config.max_candidates
    print(f"{len(docs):,} docs, {config.bands}×{config.rows} bands: candidates per doc mean "
          f"{counts.mean():.0f}, median {pct[0]:.0f}, p90 {pct[1]:.0f}, p99 {pct[2]:.0f}, "
          f"p99.9 {pct[3]:.0f}, max {pct[4]:.0f}; {int(over.sum()):,} docs over max_candidates "
          f"{config.max_candidates:,} ({time.monotonic() - t0:.0f} s)")
    if over.any():
        fams = Counter(family(docs[i]) if "reprint_of" not in docs[i]["source"] else "reprint"
                       for i in np.flatnonzero(over).tolist())
        print("over the limit, by template family: " + ", ".join(
            f"{name} {n:,}" for name, n in fams.most_common(5)))


if __name__ == "__main__":
    main()
