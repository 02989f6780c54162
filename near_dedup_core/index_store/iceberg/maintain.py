"""`index check`, `index compact` and `index expire` of an Iceberg index (docs/iceberg.md).

- check: the published state's data files are all present with the size and row count that
  the table's metadata records; every band row is in its key's bucket and every band file is
  sorted by key; then the same row invariants as on SQLite and PostgreSQL
  (`check.check_invariants`, run on the published rows loaded into an in-memory SQLite
  database). Data files under the tables' folders that no snapshot references (a killed
  writer's, a compaction's replaced files after expiry) are listed: they are never read.
- compact: in `compact` (size tiers), under the writer's lock that `writing` takes.
- expire: every snapshot but the published one dropped, and the data files that no snapshot
  references any more removed; refused while a scan holds the readers' lock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import utc_now
from near_dedup_core.index_store.check import check_invariants, check_meta
from near_dedup_core.index_store.iceberg import bloom, datafiles, directory, errors
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.bands import bucket_of
from near_dedup_core.index_store.iceberg.batch import (
    check_pointers,
    publish,
    restore_leftovers,
)
from near_dedup_core.index_store.iceberg.datafiles import local_path
from near_dedup_core.index_store.iceberg.keyed import buckets_of, keyed_files
from near_dedup_core.index_store.iceberg.lookup import hash_words
from near_dedup_core.index_store.iceberg.snapshot import Pinned, read_every_page
from near_dedup_core.index_store.invariants import BANDS_MERGED_THROUGH
from near_dedup_core.index_store.records import IndexCheck
from near_dedup_core.wording import count, duration


def _damaged(location: str, what: str) -> NearDedupError:
    return NearDedupError(f"index {location}: damaged ({what}); restore it from a backup")


def check_files(pinned: Pinned) -> int:
    """Every data file of the published state is present, with its recorded size and row
    count, and read in full, each page checked against its CRC32; band files hold only their
    bucket's keys, sorted, each row group's keys held by its Bloom filter (`bloom.unheld`),
    as the keyed tables' hashes by theirs.
    Returns how many files carry no page checksums (written by earlier versions: read in
    full, their pages unchecked)."""
    location = pinned.location
    buckets = None
    unchecked = 0
    for name in pinned.present:
        for f in pinned.data_files(name):
            path = shown(f.file_path)
            size = datafiles.file_size(f.file_path)
            if size is None:
                raise _damaged(location, f"data file {path} of table {name} is missing")
            if size != f.file_size_in_bytes:
                raise _damaged(location, f"data file {path} of table {name} has {size:,} "
                                         f"bytes, the table records {f.file_size_in_bytes:,}")
            try:
                meta = datafiles.parquet_file(f.file_path).metadata
            except (OSError, pa.ArrowException) as exc:
                raise _damaged(location, f"data file {path} of table {name} is not "
                                         f"Parquet ({exc})") from None
            if meta.num_rows != f.record_count:
                raise _damaged(location, f"data file {path} of table {name} has "
                                         f"{meta.num_rows:,} rows, the table records "
                                         f"{f.record_count:,}")
            unchecked += datafiles.CHECKSUMS_KEY not in (meta.metadata or {})
            read_every_page(location, f.file_path, name)
            if name == "bands":
                if buckets is None:
                    buckets = int(dict(pinned.rows("meta", ("key", "value"))).get(
                        it.BUCKETS_KEY, "0")) or 1
                fs, at = datafiles.filesystem(f.file_path)
                t = pq.read_table(at, filesystem=fs, columns=["bucket", "key"])
                keys = t.column("key").to_numpy()
                if (bucket_of(keys, buckets) != f.partition[0]).any() \
                        or (t.column("bucket").to_numpy() != f.partition[0]).any():
                    raise _damaged(location, f"band file {path} holds keys of another bucket")
                if len(keys) > 1 and (np.diff(keys) < 0).any():
                    raise _damaged(location, f"band file {path} is not sorted by key")
                _filters_hold(location, f.file_path, name, meta, "key", bloom.xxh64(keys))
            elif name in it.KEY_BYTES:
                key = it.SORTED_BY[name]
                fs, at = datafiles.filesystem(f.file_path)
                values = pq.read_table(at, filesystem=fs, columns=[key]).column(key)
                if pc.any(pc.not_equal(pc.binary_length(values), it.KEY_BYTES[name])).as_py():
                    raise _damaged(location, f"data file {path} of table {name} holds a {key} "
                                             f"of other than {it.KEY_BYTES[name]} bytes")
                _filters_hold(location, f.file_path, name, meta, key,
                              bloom.xxh64_bytes(values.to_pylist(), it.KEY_BYTES[name]))
    return unchecked


def _filters_hold(location: str, uri: str, name: str, meta: Any, column: str,
                  hashes: np.ndarray) -> None:
    """The Bloom filters of ``column`` in the data file ``uri`` of table ``name`` (``meta``,
    its footer) hold every value of their row groups (``hashes``, the column's values hashed
    in row order), else the index's one line for damage naming the file and the row group."""
    turned = bloom.unheld(uri, meta, meta.schema.to_arrow_schema().get_field_index(column),
                          hashes)
    if turned is not None:
        raise _damaged(location, f"data file {shown(uri)} of table {name}: the Bloom filter "
                                 f"of row group {turned} lacks values the row group holds")


def check_content_keys(pinned: Pinned) -> None:
    """``content_keys`` holds, when it covers the contents (`keyed.content_lookup`), exactly
    the contents' (content_id, id) pairs, each file sorted by ``content_id`` and holding only
    its bucket's: a lookup would otherwise miss a content the index holds."""
    location = pinned.location
    if pinned.total_records("content_keys") != pinned.total_records("contents"):
        return  # not yet built (an index of an earlier version): the lookups read contents
    for f in keyed_files(pinned, "content_keys"):
        keys = datafiles.parquet_file(f.path).read(columns=["content_id"]).column("content_id")
        if len(keys) and pc.any(pc.not_equal(pc.binary_length(keys), 16)).as_py():
            raise _damaged(location, f"content id file {shown(f.path)} holds a content id "
                                     f"of other than 16 bytes")
        words = hash_words(keys, 16)[:, 0].byteswap()
        if (buckets_of(words, f.bits) != f.bucket).any():
            raise _damaged(location, f"content id file {shown(f.path)} holds content ids of "
                                     f"another bucket")
        if len(keys) > 1 and not pc.all(pc.less(keys[:-1], keys[1:])).as_py():
            raise _damaged(location, f"content id file {shown(f.path)} is not sorted")
    ids = pinned.read("content_keys", ("content_id", "id"))
    rows = pinned.read("contents", ("content_id", "id"))
    ids = ids.sort_by("id")
    rows = rows.sort_by("id")
    if not (ids.column("id").equals(rows.column("id"))
            and ids.column("content_id").equals(rows.column("content_id"))):
        raise _damaged(location, "the content ids table does not hold the contents' "
                                 "(content_id, id) pairs")


def shown(uri: str) -> str:
    """A data file in messages: its local path, or its ``s3://`` URL."""
    return local_path(uri)


def referenced_files(pinned: Pinned) -> set[str]:
    """Every data file that any snapshot still kept references (as `shown`)."""
    out: set[str] = set()
    for name in (*pinned.present, it.COMMITS):
        table = pinned.tables[name]
        for snap in table.snapshots():
            for task in table.scan(snapshot_id=snap.snapshot_id).plan_files():
                out.add(shown(task.file.file_path))
    return out


def orphan_files(pinned: Pinned, before: float | None = None) -> list[datafiles.Stored]:
    """Data files under the tables' folders that no kept snapshot references; with
    ``before`` (epoch seconds), only those last modified before it (a writer on another
    machine may have written a file it has not committed yet)."""
    kept = referenced_files(pinned)
    found = []
    for name in (*pinned.present, it.COMMITS):
        data = f"{pinned.tables[name].location().rstrip('/')}/data"
        found += [f for f in datafiles.list_files(data) if shown(f.uri) not in kept
                  and (before is None or f.mtime < before)]
    return sorted(found, key=lambda f: f.uri)


_SQL_TYPES = {"LongType": "INTEGER", "IntegerType": "INTEGER", "BinaryType": "BLOB",
              "StringType": "TEXT"}


def _mirror(pinned: Pinned, values: dict[str, str]) -> sqlite3.Connection:
    """The published rows in an in-memory SQLite database with the SQLite index's table and
    column names (``bands`` without its bucket column, an empty ``bands_recent``)."""
    con = sqlite3.connect(":memory:")
    for name in it.DATA_TABLES:
        if name in it.ADDED_TABLES:  # no SQLite table: checked against the contents
            continue
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
        check_pointers(pinned)
        unchecked = check_files(pinned)
        check_content_keys(pinned)
        directory.check(pinned, location, {name: keyed_files(pinned, name)
                                           for name in directory.KEYED if name in pinned.present})
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
    note = f"; {count(pinned.state.n, 'commit')}"
    if unchecked:
        note += (f"; {count(unchecked, 'data file')} without page checksums (written by an "
                 f"earlier version): read in full, their pages not checked")
    if orphans:
        names = ", ".join(shown(f.uri) for f in orphans[:5])
        note += (f"; {count(len(orphans), 'orphan data file')}, never read (`index expire` removes "
                 f"them): {names}{', …' if len(orphans) > 5 else ''}")
    return result._replace(note=note)


@contextmanager
def writing(location: str) -> Iterator[Pinned]:
    """The published state of the index at ``location``, pinned under the writer's lock
    (tables a newer version added created first; a killed writer's leftovers restored)."""
    place = it.where(location)
    if place.folder is not None and not place.shared \
            and not (place.folder / it.CATALOG_FILE).is_file():
        raise NearDedupError(f"index {location}: not found")
    it.refuse_foreign_catalog(place)  # before the lock file is made
    with errors(location), it.writer_lock(place.lock_folder, location):
        pinned = Pinned(location)
        if it.add_missing_tables(pinned.catalog, pinned.tables):
            pinned = Pinned(location)
        yield Pinned(location) if restore_leftovers(pinned) else pinned


#: The retention of `index expire` with a shared catalog when none is given: a scan that
#: runs longer than this may lose the snapshots it pinned (docs/iceberg.md, "Expiry").
DEFAULT_RETENTION = 24 * 3600.0


def superseded_at(pinned: Pinned) -> dict[int, float]:
    """When each published state stopped being the newest (epoch seconds): commit n was
    superseded when the commit table's snapshot holding row n + 1 was made. States whose
    successor's snapshot was expired are left out (superseded long ago)."""
    commits = pinned.tables[it.COMMITS]
    published_at: dict[int, float] = {}
    for snap in sorted(commits.snapshots(), key=lambda s: s.timestamp_ms):
        ns = commits.scan(snapshot_id=snap.snapshot_id, selected_fields=("n",)).to_arrow()
        if ns.num_rows:
            newest = int(max(ns.column("n").to_pylist()))
            published_at.setdefault(newest, snap.timestamp_ms / 1000)
    return {n - 1: at for n, at in published_at.items()}


def kept_snapshots(pinned: Pinned, cutoff: float) -> dict[str, set[int]]:
    """The snapshots each table keeps under a retention that ends at ``cutoff`` (epoch
    seconds): the published state's; every snapshot of a state that was still the newest
    after ``cutoff`` (a scan may have pinned it since); every snapshot made after ``cutoff``
    (Iceberg's own rule; a writer's snapshots not published yet)."""
    keep: dict[str, set[int]] = {name: set() for name in (*pinned.present, it.COMMITS)}
    for name, sid in pinned.state.snapshots.items():
        if sid is not None:
            keep[name].add(sid)
    if pinned.state.commit_snapshot is not None:
        keep[it.COMMITS].add(pinned.state.commit_snapshot)
    recent = {n for n, at in superseded_at(pinned).items() if at > cutoff}
    if recent:
        rows = it.read(pinned.tables[it.COMMITS], pinned.state.commit_snapshot,
                       ("n", "tables"))
        for n, tables in zip(rows.column("n").to_pylist(), rows.column("tables").to_pylist(),
                             strict=True):
            if n in recent:
                for name, sid in orjson.loads(tables).items():
                    if sid is not None and name in keep:
                        keep[name].add(int(sid))
    for name in keep:
        for snap in pinned.tables[name].snapshots():
            if snap.timestamp_ms / 1000 > cutoff:
                keep[name].add(snap.snapshot_id)
    return keep


def expire(location: str, older_than: float | None = None) -> str:
    """Drop old snapshots and remove the data files that no kept snapshot references.

    Local form without ``older_than``: every snapshot but the published one, refused while
    a scan holds the readers' lock. With a retention (``older_than`` seconds; a shared
    catalog always has one, `DEFAULT_RETENTION` when none is given): `kept_snapshots`, and
    only unreferenced files older than the retention. With a shared catalog, an expiry that
    drops anything publishes a commit of the same state, so a writer that read the state
    before it is refused at its commit instead of publishing a snapshot just dropped."""
    place = it.where(location)
    if place.shared and older_than is None:
        older_than = DEFAULT_RETENTION
    with writing(location) as pinned, it.readers_lock(place.lock_folder, True, location):
        now = time.time()
        cutoff = None if older_than is None else now - older_than
        if cutoff is None:
            keep = {name: {sid} for name, sid in pinned.state.snapshots.items()}
            keep[it.COMMITS] = {pinned.state.commit_snapshot}
        else:
            keep = {name: set(ids) for name, ids in kept_snapshots(pinned, cutoff).items()}
        dropped = 0
        for name in (*pinned.present, it.COMMITS):
            table = pinned.tables[name]
            old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id not in keep[name]]
            if old:
                table.maintenance.expire_snapshots().by_ids(old).commit()
                dropped += len(old)
        if dropped and place.shared:
            publish(pinned, "expire", utc_now(), dict(pinned.state.snapshots))
        orphans = orphan_files(Pinned(location), cutoff)
        for found in orphans:
            datafiles.delete_file(found.uri)
    kept = "" if older_than is None else \
        f" (kept what was made or published in the last {duration(older_than)})"
    return (f"index {location}: expired {count(dropped, 'snapshot')}, removed "
            f"{count(len(orphans), 'unreferenced data file')}{kept}")
