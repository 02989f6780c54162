"""How fast SQLite takes a batch's band rows, by rows per ``INSERT`` statement (``--per``)
and per call of the driver (``--call-rows``): the band rows of an index (``--index``, e.g. a
1M pool's: 15.6 M rows) in (key, content) order, written into a fresh ``WITHOUT ROWID`` band
table by `index_store.BatchTransaction.add_bands` itself (a staged file: no journal, the
writer's page size and cache), the settings alternating over ``--rounds``. Prints wall and
CPU seconds per run.

Usage::

    python -m bench.band_insert --index /tmp/p1m.sqlite --per 50 200 500 1000 [--rounds 3]
    python -m bench.band_insert --index /tmp/p1m.sqlite --call-rows 8000 8192000
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from near_dedup_core.index_store import batch as db
from near_dedup_core.index_store.schema import bands_recent
from near_dedup_core.index_store.sqlite_write import open_writable


def band_rows(index: Path) -> tuple[np.ndarray, np.ndarray]:
    """(keys, contents) of ``bands``, read in its primary key's (key, content) order."""
    chunks = []
    with sqlite3.connect(f"file:{index}?mode=ro", uri=True) as con:
        cur = con.execute("SELECT key, content FROM bands")
        while rows := cur.fetchmany(1 << 20):
            chunks.append(np.array(rows, dtype=np.int64))
    both = np.concatenate(chunks)
    return np.ascontiguousarray(both[:, 0]), np.ascontiguousarray(both[:, 1])


def write(path: Path, keys: np.ndarray, contents: np.ndarray, per: int, call_rows: int
          ) -> None:
    """The rows through `BatchTransaction.add_bands` itself, ``per`` rows per statement and
    ``call_rows`` per call, into a staged file (as a first batch writes it)."""
    db.BAND_ROWS_PER_INSERT = per  # read by BatchTransaction and add_bands when they run
    db.BAND_ROWS_PER_CALL = call_rows
    engine = open_writable(path, staged=True)
    try:
        with engine.begin() as conn:
            bands_recent.create(conn)
            db.BatchTransaction(conn).add_bands("bands_recent", keys, contents)
    finally:
        engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.band_insert",
                                description=__doc__.splitlines()[0])
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--per", type=int, nargs="+", default=[db.BAND_ROWS_PER_INSERT])
    p.add_argument("--call-rows", type=int, nargs="+", default=[db.BAND_ROWS_PER_CALL])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    keys, contents = band_rows(args.index)
    print(f"{len(keys):,} band rows", flush=True)
    with tempfile.TemporaryDirectory(dir=args.index.parent) as tmp:
        for r in range(args.rounds):
            settings = [(per, call) for per in args.per for call in args.call_rows]
            for per, call in (settings if r % 2 == 0 else settings[::-1]):
                path = Path(tmp) / f"bands-{per}-{call}.sqlite"
                path.unlink(missing_ok=True)
                wall, cpu = time.perf_counter(), time.process_time()
                write(path, keys, contents, per, call)
                print(f"round {r}, {per} rows per INSERT, {call:,} per call: "
                      f"{time.perf_counter() - wall:.2f} s wall, "
                      f"{time.process_time() - cpu:.2f} s CPU", flush=True)
                path.unlink()


if __name__ == "__main__":
    main()
