"""An index with N recorded takedowns, for `bench.scan_ab --b-index`: what the takedowns in
force add to a scan of one pool.

``prepare`` copies a SQLite index to a new file and records ``--count`` takedown requests in
it, one text each, in one writer transaction (the rows `takedown add` writes, without its
per-request transaction): ``--hits`` of the texts are the pool's own (every k-th record, so
that each takes its copies down), the others are pool texts with their words in reverse
order (the same lengths and characters, far below the threshold: candidates to look up, none
to take down). Then::

    python -m bench.takedowns prepare --index I.sqlite --pool POOL --count 1000 --hits 100 \\
        --out I-takedowns.sqlite
    python -m bench.scan_ab --index I.sqlite --b-index I-takedowns.sqlite --inputs POOL \\
        --a . --b . --rounds 3 --out bench/out/takedowns-ab

B/A is the cost of the 1,000 takedowns on the scan (the reports differ: B takes the hits
down).

``memory`` measures what matching the takedowns in force against an index's first N contents
allocates (``tracemalloc``, which counts numpy's arrays too): its peak, and what is still
held with the result; ``--rev`` compares the matching module of an earlier git revision,
alternating::

    python -m bench.takedowns memory --index I-takedowns.sqlite --contents 100000 --rev 7d9a4bf
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np

from near_dedup_core.compare import compared_text
from near_dedup_core.formats.takedown import TakedownAct, act_key
from near_dedup_core.fsutil import utc_now
from near_dedup_core.index_store import open_index
from near_dedup_core.package import open_packages, stream_records
from near_dedup_core.takedown.record import Text, acts_of, fingerprint, read_acts


def pool_texts(pool: Path, count: int, hits: int) -> list[Text]:
    """``hits`` pool texts and ``count - hits`` pool texts with their words reversed."""
    [pkg] = open_packages([pool])
    step = max(1, pkg.record_count // max(count, 1))
    texts = []
    for k, rec in enumerate(stream_records([pkg])):
        if k % step or rec.ref is not None:
            continue
        text = compared_text(pkg.kind, rec.data)
        n = len(texts)
        if n >= count:
            break
        texts.append(Text(f"{rec.package_id}/{rec.sample_id}" if n < hits else f"reversed-{n}",
                          text if n < hits else " ".join(reversed(text.split()))))
    if len(texts) < count:
        raise SystemExit(f"takedowns: the pool has fewer than {count} usable records")
    return texts


def prepare(index: Path, pool: Path, count: int, hits: int, out: Path) -> None:
    if out.exists():
        raise SystemExit(f"takedowns: {out} exists")
    shutil.copyfile(index, out)
    backend = open_index(out)
    _, config = read_acts(backend)
    texts = pool_texts(pool, count, hits)
    items = fingerprint(texts, config, keep_text=False)
    with backend.errors(), backend.batch(config, utc_now()) as batch:
        seq = len(acts_of(batch.meta(), backend.label))
        for k, item in enumerate(items):
            act = TakedownAct(seq=seq + k + 1, action="add", request_id=f"BENCH-{k:05d}",
                              at=utc_now(), by="bench", reason="benchmark", items=[item])
            batch.add_takedown(act_key(act.seq), act.to_json())
    print(f"takedowns: {out}: {count:,} takedowns recorded ({hits:,} of the pool's texts)")


def memory(index: Path, contents: int, rev: str | None, rounds: int) -> None:
    import near_dedup_core.takedown.match as current
    from near_dedup_core.history.find import index_config

    versions = {"this checkout": current}
    if rev is not None:
        source = subprocess.run(["git", "show", f"{rev}:near_dedup_core/takedown/match.py"],
                                check=True, capture_output=True, text=True).stdout
        folder = Path(tempfile.mkdtemp())
        (folder / "match_then.py").write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("match_then", folder / "match_then.py")
        assert spec is not None and spec.loader is not None
        then = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(then)
        versions = {rev: then, "this checkout": current}
    backend = open_index(index)
    with backend.snapshot() as snap:
        config = index_config(snap)
        columns = snap.content_columns(np.arange(1, contents + 1, dtype=np.int64))
        current.find_takedowns(snap, columns, config)  # the kernels loaded first
        for _ in range(rounds):
            for name, module in versions.items():
                gc.collect()
                tracemalloc.start()
                hits = module.find_takedowns(snap, columns, config)
                gc.collect()
                held, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                rows = 0 if hits is None else len(hits.content)
                print(f"{name}: peak {peak / 2**20:.1f} MiB, held with the result "
                      f"{held / 2**20:.1f} MiB, {rows:,} rows", file=sys.stderr)
                del hits


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.takedowns",
                                description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("prepare")
    pr.add_argument("--index", type=Path, required=True, help="a SQLite index of the pool")
    pr.add_argument("--pool", type=Path, required=True, help="the pool's package")
    pr.add_argument("--count", type=int, default=1000)
    pr.add_argument("--hits", type=int, default=100)
    pr.add_argument("--out", type=Path, required=True, help="the new index file")
    me = sub.add_parser("memory")
    me.add_argument("--index", type=Path, required=True, help="a SQLite index with takedowns")
    me.add_argument("--contents", type=int, default=100_000,
                    help="match its contents 1..N (a pool indexed first)")
    me.add_argument("--rev", help="also the matching module of this git revision")
    me.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    if args.command == "memory":
        memory(args.index, args.contents, args.rev, args.rounds)
    else:
        prepare(args.index, args.pool, args.count, args.hits, args.out)


if __name__ == "__main__":
    main()
