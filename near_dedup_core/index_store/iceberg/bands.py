"""The band table of an Iceberg index: its layout (one file per band-key bucket per
chunk, sorted by key, `write_band_files`), the history join's task on one bucket
(`bucket_hits`), and how many buckets the table has as it grows (`buckets_for`;
docs/iceberg.md, "Buckets grow with the index").

A key's bucket is its 64 bits as unsigned modulo the bucket count (`bucket_of`). The count
only ever doubles (or grows by a power of two), so a key of bucket ``b`` at ``B`` buckets
lands in one of ``b``, ``b + B``, ``b + 2B``, … at the grown count: `index compact`
re-partitions the table one old bucket at a time."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io import load_file_io
from pyiceberg.types import LongType

from near_dedup_core.index_store.iceberg import bloom, datafiles
from near_dedup_core.index_store.iceberg import tables as it

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile

#: The band rows a bucket holds at most before `index compact` doubles the bucket count
#: (docs/iceberg.md, "Buckets grow with the index"): at 10^8 contents it gives 4,096 buckets
#: (3.9·10^5 rows each), the count whose join cost least a row there
#: (docs/measurements/2026-12-04-scale.md, "The bucket count at 10^8").
BUCKET_ROWS = 1 << 19


def buckets_for(rows: int, current: int) -> int:
    """The band-key bucket count for ``rows`` band rows of an index at ``current`` buckets:
    ``current`` doubled until a bucket holds at most `BUCKET_ROWS` rows on average, at most
    `tables.MAX_BUCKETS`; never fewer than ``current``."""
    count = current
    while rows > count * BUCKET_ROWS and count * 2 <= it.MAX_BUCKETS:
        count *= 2
    return count


#: A band data file's columns (no Iceberg field ids: ``add_files`` maps columns by name).
_BAND_SCHEMA = pa.schema([pa.field(f.name, f.type) for f in it.arrow_schema("bands")])


class BandSpec(NamedTuple):
    """What a band task needs to write its files: the band table's data folder (a URI), the
    table's FileIO properties, the batch's file-name prefix, the index's bucket count."""

    data: str
    io_properties: dict[str, str]
    prefix: str
    buckets: int


class BandFile(NamedTuple):
    """A band data file a task wrote: its URI, bucket and row count."""

    path: str
    bucket: int
    rows: int


#: How a band data file is written (docs/measurements/2026-12-04-scale.md, "The per-bucket
#: join"): the keys sorted, so DELTA_BINARY_PACKED stores their gaps (about 43 bits a key at 10^8 contents) and the
#: content ids as their differences, near the values' entropy, so no codec (it would cost
#: decoding time for little); the constant ``bucket`` dictionary-encoded; row groups of 65,536
#: rows (a probe skips those whose key range holds none of its keys); a Bloom filter of each
#: row group's keys (`bloom`: a join task skips the row groups whose filter holds none of its
#: keys), which pyarrow sizes for the row group's distinct keys (a power of two of bytes:
#: 16 bits a key in a full row group of distinct keys at this ``fpp``; +22 % of a file's
#: bytes, docs/measurements/2026-12-07-join-reach.md); the sort order declared, so a join
#: task takes it as given (`bucket_hits`).
BAND_FILE_OPTIONS: dict[str, Any] = {
    "compression": "none",
    "use_dictionary": ["bucket"],
    "column_encoding": {"key": "DELTA_BINARY_PACKED", "content": "DELTA_BINARY_PACKED"},
    "row_group_size": it.ROW_GROUP_ROWS["bands"],
    "sorting_columns": [pq.SortingColumn(1), pq.SortingColumn(2)],
    "bloom_filter_options": {"key": {"ndv": it.ROW_GROUP_ROWS["bands"], "fpp": 0.001}},
    **datafiles.CHECKED_WRITES,
}


def write_band_files(spec: BandSpec, keys: np.ndarray, contents: np.ndarray) -> list[BandFile]:
    """The band rows (``keys[i]``, ``contents[i]``) as one Parquet file per bucket under the
    band table's data folder (``bucket=<b>/<prefix>-<unique>-<b>.parquet``), each sorted by
    (key, content) in the layout of `BAND_FILE_OPTIONS`; written through the table's FileIO.
    Runs in a task of the index's executor (or in the writer's own process)."""
    if not len(keys):
        return []
    buckets = bucket_of(keys, spec.buckets)
    order = np.lexsort((contents, keys, buckets))
    keys, contents, buckets = keys[order], contents[order], buckets[order]
    del order
    cuts = np.flatnonzero(np.diff(buckets)) + 1
    starts = np.concatenate(([0], cuts)).tolist()
    ends = np.concatenate((cuts, [len(buckets)])).tolist()
    io = load_file_io(spec.io_properties, spec.data)
    unique = uuid.uuid4().hex[:12]
    written = []
    for start, end in zip(starts, ends, strict=True):
        bucket = int(buckets[start])
        part = pa.Table.from_arrays(
            [
                pa.array(buckets[start:end]),
                pa.array(keys[start:end]),
                pa.array(contents[start:end]),
            ],
            schema=datafiles.with_checksum_mark(_BAND_SCHEMA),
        )
        path = f"{spec.data}/bucket={bucket}/{spec.prefix}-{unique}-{bucket:05d}.parquet"
        with io.new_output(path).create(overwrite=True) as out:
            pq.write_table(part, out, **BAND_FILE_OPTIONS)
        written.append(BandFile(path, bucket, end - start))
    return written


def bucket_hits(
    paths: list[str], probes: np.ndarray, skip: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """One bucket's history join: the (key, content) rows of its data files ``paths`` whose
    key is one of ``probes`` (sorted) and whose content is neither in ``skip`` (sorted) nor
    in ``lo``..``hi``, in the files' row order (`file_hits`)."""
    keys_out, contents_out = [], []
    if len(probes):
        hashes = bloom.xxh64(probes)
        for path in paths:
            keys, contents = file_hits(path, probes, hashes)
            keep = (contents < lo) | (contents > hi)
            if len(skip):
                at = np.minimum(np.searchsorted(skip, contents), len(skip) - 1)
                keep &= skip[at] != contents
            keys_out.append(keys[keep])
            contents_out.append(contents[keep])
    if not keys_out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return (
        np.concatenate(keys_out).astype(np.int64),
        np.concatenate(contents_out).astype(np.int64),
    )


def file_hits(path: str, probes: np.ndarray, hashes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The (key, content) rows of the band data file ``path`` whose key is one of ``probes``
    (sorted; ``hashes``, their `bloom.xxh64`), in row order. Read on this thread (a join's
    tasks run in parallel): the ``key`` column of the row groups whose key range (their
    statistics) holds a probe and whose Bloom filter, when they have one, holds one of those
    probes (`bloom`); each probe looked up in those keys when they are sorted (the writer's
    files declare it, `BAND_FILE_OPTIONS`; others are checked), else each key among the
    probes; then the ``content`` column of the row groups that hold a hit, alone."""
    none = np.zeros(0, np.int64)
    pf = datafiles.parquet_file(path)
    meta = pf.metadata
    at = pf.schema_arrow.get_field_index("key")
    n = meta.num_row_groups
    stats = [meta.row_group(g).column(at).statistics for g in range(n)]
    known = np.array([s is not None and s.has_min_max for s in stats], dtype=bool)
    mins = np.array([s.min if k else 0 for s, k in zip(stats, known, strict=True)], np.int64)
    maxs = np.array([s.max if k else 0 for s, k in zip(stats, known, strict=True)], np.int64)
    first = np.where(known, np.searchsorted(probes, mins), 0)
    last = np.where(known, np.searchsorted(probes, maxs, "right"), len(probes))
    groups = np.flatnonzero(last > first).tolist()
    filters = bloom.row_group_filters(path, meta, at, groups)
    groups = [g for g in groups if g not in filters
              or bloom.may_hold(filters[g], hashes[first[g] : last[g]]).any()]
    if not groups:
        return none, none
    keys = pf.read_row_groups(groups, columns=["key"], use_threads=False).column("key").to_numpy()
    if sorted_by_key(meta, groups, at, known, mins, maxs) or bool(np.all(keys[1:] >= keys[:-1])):
        first = np.searchsorted(keys, probes)
        count = np.searchsorted(keys, probes, "right") - first
        found = count > 0
        found[1:] &= probes[1:] != probes[:-1]  # a probe asked twice: its rows once
        first, count = first[found], count[found]
        # each found probe's rows, one range after another: ascending, each row once
        rows = np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    else:
        place = np.searchsorted(probes, keys)
        place[place == len(probes)] = 0
        rows = np.flatnonzero(probes[place] == keys)
    if not len(rows):
        return none, none
    contents, _ = datafiles.read_rows(pf, groups, rows, ["content"])
    return keys[rows], contents.column("content").to_numpy()


def files_by_bucket(files: Iterable[DataFile], content: int, own: tuple[int, int]
                    ) -> dict[int, list[str]]:
    """The paths of the band data files ``files`` (manifest entries) by bucket, sorted, less
    each file whose every content lies in ``own`` (first, last): `bucket_hits` keeps none of
    its rows, and the lowest and highest content its manifest entry records (field id
    ``content``) say so without opening it. A scan of a batch its index holds skips so the
    batch's own files, one per bucket it touched."""
    first, last = own
    out: dict[int, list[str]] = {}
    for f in files:
        lo = (f.lower_bounds or {}).get(content)
        hi = (f.upper_bounds or {}).get(content)
        if (lo is not None and hi is not None and first <= int(from_bytes(LongType(), lo))
                and int(from_bytes(LongType(), hi)) <= last):
            continue
        out.setdefault(int(f.partition[0]), []).append(f.file_path)
    return {b: sorted(paths) for b, paths in out.items()}


def bucket_probes(keys: np.ndarray, buckets: int, files: dict[int, list[str]]
                  ) -> list[tuple[list[str], np.ndarray]]:
    """(data file paths, sorted probe keys) of each bucket of ``buckets`` that holds both
    probe ``keys`` and ``files``, in bucket order: one join task each (`bucket_hits`)."""
    of = bucket_of(keys, buckets)
    order = np.argsort(of, kind="stable")
    bounds = np.searchsorted(of[order], np.arange(buckets + 1))
    return [(files[b], np.sort(keys[order[bounds[b]:bounds[b + 1]]]))
            for b in range(buckets) if b in files and bounds[b + 1] > bounds[b]]


def sorted_by_key(
    meta: Any, groups: list[int], at: int, known: np.ndarray, mins: np.ndarray, maxs: np.ndarray
) -> bool:
    """Whether the rows of row groups ``groups`` are in key order as the file's metadata
    says: each row group declares its rows sorted by the key column (index ``at``) first,
    and the row groups' key ranges follow one another."""
    for g in groups:
        order = meta.row_group(g).sorting_columns
        if not order or order[0].column_index != at or order[0].descending:
            return False
    chosen = np.asarray(groups)
    return bool(known[chosen].all() and np.all(maxs[chosen][:-1] <= mins[chosen][1:]))


def bucket_of(keys: np.ndarray, buckets: int) -> np.ndarray:
    """The band-key bucket of each key: the key's 64 bits as unsigned, modulo ``buckets``."""
    return (np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64) % np.uint64(buckets)).astype(
        np.int32
    )
