"""`index check`, `index compact` and `index expire` of an Iceberg index (docs/iceberg.md).

- check: the published state's data files are all present with the size and row count that
  the table's metadata records; every band row is in its key's bucket and every band file is
  sorted by key; then the same row invariants as on SQLite and PostgreSQL
  (`check.check_invariants`, run on the published rows loaded into an in-memory SQLite
  database). Data files under the tables' folders that no snapshot references (a killed
  writer's, a compaction's replaced files after expiry) are listed: they are never read.
- compact: each bucket's band files rewritten into one file sorted by key, as a new commit.
- expire: every snapshot but the published one dropped, and the data files that no snapshot
  references any more removed; refused while a scan holds the readers' lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import utc_now
from near_dedup_core.index_store.check import IndexCheck, check_invariants, check_meta
from near_dedup_core.index_store.iceberg import errors
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.batch import publish, restore_leftovers
from near_dedup_core.index_store.iceberg.snapshot import Pinned, bucket_of, local_path
from near_dedup_core.index_store.invariants import BANDS_MERGED_THROUGH


def _damaged(location: str, what: str) -> NearDedupError:
    return NearDedupError(f"index {location}: damaged ({what}); restore it from a backup")


def check_files(pinned: Pinned) -> None:
    """Every data file of the published state is present, with its recorded size and row
    count; band files hold only their bucket's keys, sorted."""
    location = pinned.location
    buckets = None
    for name in it.DATA_TABLES:
        for f in pinned.data_files(name):
            path = Path(local_path(f.file_path))
            if not path.is_file():
                raise _damaged(location, f"data file {path} of table {name} is missing")
            size = path.stat().st_size
            if size != f.file_size_in_bytes:
                raise _damaged(location, f"data file {path} of table {name} has {size:,} "
                                         f"bytes, the table records {f.file_size_in_bytes:,}")
            try:
                meta = pq.read_metadata(path)
            except (OSError, pa.ArrowException) as exc:
                raise _damaged(location, f"data file {path} of table {name} is not "
                                         f"Parquet ({exc})") from None
            if meta.num_rows != f.record_count:
                raise _damaged(location, f"data file {path} of table {name} has "
                                         f"{meta.num_rows:,} rows, the table records "
                                         f"{f.record_count:,}")
            if name == "bands":
                if buckets is None:
                    buckets = int(dict(pinned.rows("meta", ("key", "value"))).get(
                        it.BUCKETS_KEY, "0")) or 1
                t = pq.read_table(path, columns=["bucket", "key"])
                keys = t.column("key").to_numpy()
                if (bucket_of(keys, buckets) != f.partition[0]).any() \
                        or (t.column("bucket").to_numpy() != f.partition[0]).any():
                    raise _damaged(location, f"band file {path} holds keys of another bucket")
                if len(keys) > 1 and (np.diff(keys) < 0).any():
                    raise _damaged(location, f"band file {path} is not sorted by key")


def referenced_files(pinned: Pinned) -> set[str]:
    """The local paths of every data file that any snapshot still kept references."""
    out: set[str] = set()
    for name in (*it.DATA_TABLES, it.COMMITS):
        table = pinned.tables[name]
        for snap in table.snapshots():
            for task in table.scan(snapshot_id=snap.snapshot_id).plan_files():
                out.add(local_path(task.file.file_path))
    return out


def orphan_files(pinned: Pinned) -> list[Path]:
    """Data files under the tables' folders that no kept snapshot references."""
    kept = referenced_files(pinned)
    found = []
    for name in (*it.DATA_TABLES, it.COMMITS):
        data = Path(local_path(pinned.tables[name].location())) / "data"
        if data.is_dir():
            found += [p for p in data.rglob("*.parquet") if str(p) not in kept]
    return sorted(found)


_SQL_TYPES = {"LongType": "INTEGER", "IntegerType": "INTEGER", "BinaryType": "BLOB",
              "StringType": "TEXT"}


def _mirror(pinned: Pinned, values: dict[str, str]) -> sqlite3.Connection:
    """The published rows in an in-memory SQLite database with the SQLite index's table and
    column names (``bands`` without its bucket column, an empty ``bands_recent``)."""
    con = sqlite3.connect(":memory:")
    for name in it.DATA_TABLES:
        columns = [(c, k) for c, k in it.COLUMNS[name] if not (name == "bands" and c == "bucket")]
        con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {_SQL_TYPES[k.__name__]}' for c, k in columns)})")
        if name == "meta":
            rows = [(k, v) for k, v in values.items()]
        else:
            t = pinned.read(name, tuple(c for c, _ in columns))
            rows = list(zip(*(t.column(c).to_pylist() for c, _ in columns), strict=True))
        if rows:
            con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(columns))})", rows)
    con.execute("CREATE TABLE bands_recent (key INTEGER, content INTEGER)")
    con.execute("CREATE INDEX ix_sources_content ON sources (content)")
    con.execute("CREATE INDEX ix_contents_id ON contents (id)")
    return con


def check_iceberg(location: str) -> IndexCheck:
    """`index check` of the Iceberg index at ``location`` (module doc); raises the one line
    of the first problem."""
    with errors(location):
        pinned = Pinned(location, expected=False)
        if pinned.state.n == 0:
            raise NearDedupError(f"index {location}: no batch committed yet; not a near-dedup "
                                 f"index to check")
        check_files(pinned)
        values = dict(pinned.rows("meta", ("key", "value")))
        ids = pinned.read("contents", ("id",)).column("id").to_numpy()
        values[BANDS_MERGED_THROUGH] = str(int(ids.max()) if len(ids) else 0)
        config = check_meta(location, values)
        if not values.get(it.BUCKETS_KEY, "").isdigit():
            raise NearDedupError(f"index {location}: meta lacks {it.BUCKETS_KEY}; restore it "
                                 f"from a backup")
        con = _mirror(pinned, values)
        try:
            result = check_invariants(location, con, config, con.execute)
        finally:
            con.close()
        orphans = orphan_files(pinned)
    note = f"; {pinned.state.n:,} commits"
    if orphans:
        shown = ", ".join(str(p) for p in orphans[:5])
        note += (f"; {len(orphans):,} orphan data files, never read (`index expire` removes "
                 f"them): {shown}{', …' if len(orphans) > 5 else ''}")
    return result._replace(note=note)


@contextmanager
def _writing(location: str) -> Iterator[Pinned]:
    folder = it.folder_of(location)
    if not (folder / it.CATALOG_FILE).is_file():
        raise NearDedupError(f"index {location}: not found")
    with errors(location), it.writer_lock(folder, location):
        pinned = Pinned(location)
        restore_leftovers(pinned)
        yield Pinned(location)


def compact(location: str) -> str:
    """Rewrite the band files of every bucket that has more than one into one file sorted by
    (key, content), published as a new commit; a one-line summary."""
    with _writing(location) as pinned:
        files: dict[int, int] = {}
        for f in pinned.data_files("bands"):
            files[int(f.partition[0])] = files.get(int(f.partition[0]), 0) + 1
        small = sorted(b for b, n in files.items() if n > 1)
        if not small:
            return f"index {location}: nothing to compact ({len(files):,} buckets, one file each)"
        table = pinned.tables["bands"]
        rows = pinned.read("bands", ("bucket", "key", "content"), it.one_of("bucket", small))
        order = np.lexsort((rows.column("content").to_numpy(), rows.column("key").to_numpy(),
                            rows.column("bucket").to_numpy()))
        rows = rows.take(pa.array(order)).cast(it.arrow_schema("bands"))
        table.overwrite(rows, overwrite_filter=it.one_of("bucket", small))
        current = table.current_snapshot()
        assert current is not None
        snapshots = dict(pinned.state.snapshots)
        snapshots["bands"] = current.snapshot_id
        publish(pinned, "compact", utc_now(), snapshots)
        before = sum(files[b] for b in small)
        return (f"index {location}: compacted {before:,} band files of {len(small):,} buckets "
                f"into {len(small):,} (commit {pinned.state.n + 1:,})")


def expire(location: str) -> str:
    """Drop every snapshot but the published one of each table and remove the data files that
    no kept snapshot references; refused while a scan reads the index."""
    folder = it.folder_of(location)
    with _writing(location) as pinned, it.readers_lock(folder, True, location):
        dropped = 0
        keep = {**pinned.state.snapshots, it.COMMITS: pinned.state.commit_snapshot}
        for name in (*it.DATA_TABLES, it.COMMITS):
            table = pinned.tables[name]
            old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != keep[name]]
            if old:
                table.maintenance.expire_snapshots().by_ids(old).commit()
                dropped += len(old)
        orphans = orphan_files(Pinned(location))
        for path in orphans:
            path.unlink()
    return (f"index {location}: expired {dropped:,} snapshots, removed {len(orphans):,} "
            f"unreferenced data files")
