"""How fast SQLite takes a batch's band rows, by rows per ``INSERT`` statement: the band rows
of an index (``--index``, e.g. a 1M pool's: 15.6 M rows) in (key, content) order, written
into a fresh ``WITHOUT ROWID`` table the way `index_store.BatchTransaction.add_bands` writes
them (no journal, the writer's page size and cache), the statement sizes alternating over
``--rounds``. Prints wall and CPU seconds per run.

Usage::

    python -m bench.band_insert --index /tmp/p1m.sqlite --per 50 200 500 1000 [--rounds 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from near_dedup_core.index_store import CACHE_SIZE, PAGE_SIZE

DDL = ('CREATE TABLE bands ("key" INTEGER NOT NULL, content INTEGER NOT NULL, '
       'PRIMARY KEY ("key", content)) WITHOUT ROWID')


def band_rows(index: Path) -> tuple[np.ndarray, np.ndarray]:
    """(keys, contents) of ``bands``, read in its primary key's (key, content) order."""
    chunks = []
    with sqlite3.connect(f"file:{index}?mode=ro", uri=True) as con:
        cur = con.execute("SELECT key, content FROM bands")
        while rows := cur.fetchmany(1 << 20):
            chunks.append(np.array(rows, dtype=np.int64))
    both = np.concatenate(chunks)
    return np.ascontiguousarray(both[:, 0]), np.ascontiguousarray(both[:, 1])


def write(path: Path, keys: np.ndarray, contents: np.ndarray, per: int) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    for pragma in (f"page_size = {PAGE_SIZE}", "journal_mode = OFF", "synchronous = OFF",
                   f"cache_size = {CACHE_SIZE}"):
        con.execute(f"PRAGMA {pragma}")
    con.execute(DDL)
    con.execute("BEGIN")
    many = "INSERT OR IGNORE INTO bands (key, content) VALUES " + ", ".join(["(?, ?)"] * per)
    full = len(keys) // per * per
    step = per << 14
    for i in range(0, full, step):
        end = min(i + step, full)
        flat = np.empty(2 * (end - i), dtype=np.int64)
        flat[0::2], flat[1::2] = keys[i:end], contents[i:end]
        con.executemany(many, flat.reshape(-1, 2 * per).tolist())
    con.executemany("INSERT OR IGNORE INTO bands (key, content) VALUES (?, ?)",
                    zip(keys[full:].tolist(), contents[full:].tolist()))
    con.execute("COMMIT")
    con.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.band_insert",
                                description=__doc__.splitlines()[0])
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--per", type=int, nargs="+", default=[50, 500])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    keys, contents = band_rows(args.index)
    print(f"{len(keys):,} band rows", flush=True)
    with tempfile.TemporaryDirectory(dir=args.index.parent) as tmp:
        for r in range(args.rounds):
            for per in (args.per if r % 2 == 0 else args.per[::-1]):
                path = Path(tmp) / f"bands-{per}.sqlite"
                path.unlink(missing_ok=True)
                wall, cpu = time.perf_counter(), time.process_time()
                write(path, keys, contents, per)
                print(f"round {r}, {per} rows per INSERT: {time.perf_counter() - wall:.2f} s "
                      f"wall, {time.process_time() - cpu:.2f} s CPU", flush=True)


if __name__ == "__main__":
    main()
