"""`report explain` and `report diff` on a large report, through the CLI, under /usr/bin/time -v.

A synthetic CPT package of ``--records`` samples (pseudo-word prose, so that unrelated texts
share few character shingles) with 3 % exact copies and 5 % near copies (a few words
dropped or a number changed) is indexed and scanned twice: with the shipped config and with
threshold 0.95, giving two reports of the same pool. Measured:

- ``report explain`` of the *last* sample of the report (the worst case for the streaming
  passes over decisions/origins/relations) and of a near duplicate;
- ``report diff`` of the two reports (every near duplicate below 0.95 becomes newly kept);
- ``report verify`` of one report, as a reference for one full read of the files.

    .venv/bin/python -m bench.audit --records 1000000     # bench/out/audit-1m/audit.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

import orjson

from bench.measure import code_version, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def write_package(folder: Path, records: int, seed: int = 1) -> Path:
    """A one-shard CPT package of pseudo-word paragraphs with exact and near copies."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices(LETTERS, k=rng.randint(3, 9))) for _ in range(50_000)]
    domains = ["web", "news", "books", "code-docs"]
    data = folder / "data" / "train"
    data.mkdir(parents=True, exist_ok=True)
    shard = data / "part-00000.jsonl"
    texts: list[str] = []
    with open(shard, "wb") as fh:
        for i in range(records):
            roll = rng.random()
            if texts and roll < 0.03:
                text = rng.choice(texts)
            elif texts and roll < 0.08:
                words = rng.choice(texts).split(" ")
                if rng.random() < 0.5:
                    del words[rng.randrange(len(words))]
                else:
                    words[0] = str(rng.randint(1000, 9999))
                text = " ".join(words)
            else:
                text = (f"{rng.randint(1000, 9999)} "
                        + " ".join(rng.choices(vocab, k=rng.randint(50, 90))))
            if len(texts) < 20_000:
                texts.append(text)
            elif rng.random() < 0.02:
                texts[rng.randrange(len(texts))] = text
            fh.write(orjson.dumps({"id": f"s{i:08d}", "text": text,
                                   "domain": domains[i % 4], "source": {"row": i}}) + b"\n")
    raw = shard.read_bytes()
    manifest = {"format": "training-snapshot", "format_version": 2, "package_id": folder.name,
                "kind": "cpt", "created_at": "2026-11-25T00:00:00Z",
                "tokenizer": {"name": "bench-tok", "revision": "r1"},
                "lineage": {"parents": [], "depends_on": []},
                "files": [{"path": "data/train/part-00000.jsonl", "split": "train",
                           "records": records, "bytes": len(raw),
                           "sha256": hashlib.sha256(raw).hexdigest()}]}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return folder


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    label = f"{args.records // 1000}k" if args.records < 1_000_000 else \
        f"{args.records // 1_000_000}m"
    out = ROOT / "bench" / "out" / f"audit-{label}"
    out.mkdir(parents=True, exist_ok=True)
    pkg = out / "pool"
    if not (pkg / "manifest.json").exists():
        write_package(pkg, args.records)
    strict = out / "strict.json"
    strict.write_text(json.dumps({**json.loads(CONFIG.read_text()), "threshold": 0.95}))
    cli = [sys.executable, "-m", "near_dedup_core", "--quiet"]
    results: dict[str, dict] = {"code": code_version(ROOT), "started": wall_clock(),
                                "records": args.records}
    for name, config in (("base", CONFIG), ("strict", strict)):
        report = out / f"report-{name}"
        if not (report / "manifest.json").exists():
            idx = out / f"index-{name}.sqlite"
            for p in (idx, idx.with_name(idx.name + "-wal"), idx.with_name(idx.name + "-shm")):
                p.unlink(missing_ok=True)
            m = run([*cli, "--index", str(idx), "--config", str(config), "index", "--inputs",
                     str(pkg), "--workers", str(args.workers)], out / f"index-{name}.log")
            results[f"index_{name}"] = m.as_dict()
            m = run([*cli, "--index", str(idx), "--config", str(config), "scan", "--inputs",
                     str(pkg), "--output", str(report), "--workers", str(args.workers)],
                    out / f"scan-{name}.log")
            results[f"scan_{name}"] = m.as_dict()
    base = out / "report-base"
    last = orjson.loads((base / "decisions.jsonl").read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1])
    near = next(orjson.loads(line) for line in open(base / "decisions.jsonl", "rb")
                if b'"near_duplicate"' in line)
    for name, sample in (("explain_last", last), ("explain_near", near)):
        m = run([*cli, "report", "explain", str(base), sample["package_id"],
                 sample["sample_id"], "--json"], out / f"{name}.log")
        results[name] = {**m.as_dict(), "stdout": None,
                         "spans": len(orjson.loads(m.stdout)["diff"]) if m.stdout else None}
    m = run([*cli, "report", "diff", str(base), str(out / "report-strict"), "--json"],
            out / "diff.log")
    diff = orjson.loads(m.stdout) if m.stdout else {}
    results["diff"] = {**m.as_dict(), "stdout": None,
                       "newly_kept": len(diff.get("newly_kept", [])),
                       "newly_excluded": len(diff.get("newly_excluded", []))}
    results["verify"] = run([*cli, "report", "verify", str(base)], out / "verify.log").as_dict()
    (out / "audit.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    for key in ("index_base", "scan_base", "explain_last", "explain_near", "diff", "verify"):
        if key in results:
            r = results[key]
            print(f"{key:14} wall {r.get('wall_s', 0):7.1f} s  peak "
                  f"{r.get('peak_tree_rss_mib', 0):7.0f} MiB  exit {r.get('returncode')}")
    print(f"diff: newly kept {results['diff']['newly_kept']:,}, newly excluded "
          f"{results['diff']['newly_excluded']:,}")


if __name__ == "__main__":
    main()
