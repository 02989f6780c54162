"""Tables an `index` looks rows up in by a fixed-width hash (docs/iceberg.md, "Lookups"): the
``content_keys`` table (``content_id`` -> content row id) and ``raw_texts`` (raw text sha256
-> scope, content). Each data file is sorted by the hash and belongs to one hash bucket: the
hash's first ``bits`` bits (its first eight bytes read big-endian), ``bits`` and ``bucket``
the file's identity partition (a ``raw_texts`` file, which has no such columns, is bucket 0
of 0 bits: every hash). Since buckets are prefixes, a file of ``bits`` holds one contiguous
range of hashes, and files of different bit counts can sit side by side in one state: a
batch writes its rows at the bit count its own size asks for (`bits_for`), and
`index compact` rewrites a table at the bit count the whole table asks for. The bucket count
grows with the index; nobody chooses it.

A lookup (`KeyedFiles.find`) reads, in each file of the buckets its keys fall into, only the
row groups (`KEYED_GROUP_ROWS` rows) whose hash range (the files' Parquet statistics) holds
one of its keys and whose Bloom filter (`bloom`) may hold it: the rows read are at most
(keys × rows of a row group), whatever the history holds, and most new keys read none.
Each file's row groups' key ranges and the places of their filters come from the index's
key directory (`directory`), read once per lookup object (a file it does not describe: from
the file's footer, at its first probe), so a file is opened only for a key its filters pass;
the files whose row groups are read again stay open between lookups within a bounded memory
(`KeyedFiles`)."""

from __future__ import annotations

import math
import resource
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from near_dedup_core.index_store.iceberg import bloom, datafiles, directory
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.directory import Groups
from near_dedup_core.index_store.iceberg.lookup import HashedRows, hash_words
from near_dedup_core.index_store.texts import damaged

#: Rows a bucket of a compacted keyed table holds at most (the bit count is the smallest
#: that keeps every bucket at or under it): about 8 MiB of ``content_keys`` rows.
BUCKET_ROWS = 1 << 18
#: Rows per row group of a keyed file: a lookup reads at most this many rows per key.
KEYED_GROUP_ROWS = it.ROW_GROUP_ROWS["content_keys"]
#: Bytes of a ``content_id`` (`compare.content_id`).
CONTENT_ID_BYTES = 16
#: Threads that read a content-id lookup's files (local folder).
LOOKUP_THREADS = 2


def bits_for(rows: int) -> int:
    """The bucket bits for ``rows`` rows: the fewest that keep a bucket within
    `BUCKET_ROWS` (0 bits: one bucket)."""
    return bits_for_rows(rows, BUCKET_ROWS)


def prefixes(keys: list[bytes]) -> np.ndarray:
    """The first eight bytes of each key as a big-endian uint64."""
    raw = b"".join(k[:8] for k in keys)
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def buckets_of(prefix: np.ndarray, bits: int) -> np.ndarray:
    """The bucket of each hash prefix under ``bits`` bits."""
    if bits == 0:
        return np.zeros(len(prefix), dtype=np.int64)
    return (prefix >> np.uint64(64 - bits)).astype(np.int64)


class KeyedFile(NamedTuple):
    """A data file of a keyed table: its URI, row count, bucket bits and bucket."""

    path: str
    rows: int
    bits: int
    bucket: int


def keyed_files(pinned: Any, table: str, data: list[Any] | None = None) -> list[KeyedFile]:
    """The data files of ``table`` at ``pinned``'s state (``data``: its pyiceberg
    ``DataFile``s, when already planned) with their partitions (a table without a ``bits``
    column: every file is bucket 0 of 0 bits)."""
    spec = pinned.tables[table].spec()
    names = [f.name for f in spec.fields]
    out = []
    for f in pinned.data_files(table) if data is None else data:
        if "bits" in names:
            values = dict(zip(names, f.partition, strict=True))
            bits, bucket = int(values["bits"]), int(values["bucket"])
        else:
            bits, bucket = 0, 0
        out.append(KeyedFile(f.file_path, int(f.record_count), bits, bucket))
    return out


#: Parquet column chunks whose footers a lookup keeps in memory with their open files: about
#: 32 MiB (each chunk about 1 KiB as pyarrow holds it; a ``content_keys`` file of 192 row
#: groups of 4 columns about 0.7 MiB, so 49 of the 512 files of a 10^8-content history). The
#: files past it are opened again by each lookup that reads their row groups, about 1 ms
#: each; at 10^8, 26 lookups of 1,900 ids (3 % of them the index's own) and a 50,000-record
#: day's `index` cost the same CPU as with every file kept, and 150–280 MiB less
#: (docs/measurements/2026-12-07-tiers.md).
FOOTER_CHUNKS = 1 << 15


def open_files_kept() -> int:
    """The data files a lookup keeps open: a quarter of the process's limit of open files,
    between 16 and 4,096."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 4096 if soft == resource.RLIM_INFINITY else max(16, min(4096, soft // 4))


class KeyedFiles:
    """Rows of a keyed table's files ``files``, looked up by their ``width``-byte ``key``
    column; ``values`` are the int64 columns a lookup returns.

    Of each file it keeps the key range of every row group (``width`` bytes twice a row
    group) and where the row group's Bloom filter lies, as the index's directory gives them
    (``known``: `directory.read`) or, for a file it does not describe, as the file's footer
    does at its first probe: a lookup reads the filters of the row groups its keys fall into
    (`_passing`) and opens the file only for a key one of them passes. The files opened so,
    footer and all, it keeps open between lookups from
    their second opening on, up to `FOOTER_CHUNKS` column chunks and `open_files_kept`
    files, the first opened first; the others are opened for each lookup that reads them
    and closed after it: the memory a lookup holds is bounded whatever the history, and a
    day that asks once holds none."""

    def __init__(self, label: str, files: list[KeyedFile], key: str, width: int,
                 values: tuple[str, ...], threads: int = 2,
                 known: dict[str, Groups] | None = None) -> None:
        self.label = label
        self.files = files
        self.key = key
        self.width = width
        self.values = values
        self.threads = max(1, threads)
        #: each file's row groups' key ranges and where their Bloom filters lie: those the
        #: index's directory gives (``known``, `directory.read`), and those of each file
        #: probed without, from its footer
        self._ranges: dict[str, Groups] = dict(known or {})
        #: the files opened at least once, those kept open between lookups, and their
        #: footers' column chunks
        self._opened: set[str] = set()
        self._open: dict[str, Any] = {}
        self._open_chunks = 0
        self._open_lock = threading.Lock()
        self._keep_open = open_files_kept()
        #: rows and row groups of the key column read so far, and row groups of the values
        #: (what a lookup costs: bench/, tests)
        self.rows_read = 0
        self.groups_read = 0
        self.value_groups_read = 0
        #: row groups whose Bloom filter was read (the others had none, or no key in range)
        self.filters_read = 0

    def find(self, keys: list[bytes]) -> dict[bytes, list[tuple[int, ...]]]:
        """Each of ``keys`` that a row holds -> the rows' ``values``, in the files' order."""
        if not keys or not self.files:
            return {}
        if any(len(k) != self.width for k in keys):
            raise ValueError(f"a key of other than {self.width} bytes")
        wanted = sorted(set(keys))
        prefix = prefixes(wanted)
        # a bucket is a prefix's first bits, so the sorted keys' buckets are sorted: each
        # file's keys are one slice of them, found by bisection
        of_bits = {bits: buckets_of(prefix, bits) for bits in {f.bits for f in self.files}}
        # each key hashed once for the Bloom filters of every file it is asked of
        hashes = bloom.xxh64_bytes(wanted, self.width)
        work = []
        for f in self.files:
            lo, hi = np.searchsorted(of_bits[f.bits], [f.bucket, f.bucket + 1]).tolist()
            if hi > lo:
                work.append((f, wanted[lo:hi], hashes[lo:hi]))
        out: dict[bytes, list[tuple[int, ...]]] = {}
        if self.threads > 1 and len(work) > 1:
            with ThreadPoolExecutor(max_workers=self.threads) as pool:
                parts = list(pool.map(lambda w: self._probe(*w), work))
        else:
            parts = [self._probe(*w) for w in work]
        for part in parts:
            for k, row in part:
                out.setdefault(k, []).append(row)
        return out

    @property
    def files_kept(self) -> int:
        """The files kept open between lookups now (bench/)."""
        return len(self._open)

    def _reader(self, path: str) -> Any:
        """The file ``path`` opened (its pages checked): one kept open, or opened now and,
        from its second opening on (its first probe, then a lookup reading its row groups),
        kept if there is room (`FOOTER_CHUNKS`, `open_files_kept`): a day whose lookups are
        one call keeps no footer."""
        with self._open_lock:
            pf = self._open.get(path)
            again = path in self._opened
            self._opened.add(path)
        if pf is not None:
            return pf
        pf = datafiles.parquet_file(path)
        meta = pf.metadata
        chunks = meta.num_row_groups * meta.num_columns
        with self._open_lock:
            if (again and len(self._open) < self._keep_open
                    and self._open_chunks + chunks <= FOOTER_CHUNKS):
                self._open[path] = pf
                self._open_chunks += chunks
        return pf

    def _passing(self, path: str, hashes: np.ndarray, at: np.ndarray, offsets: np.ndarray,
                 lengths: np.ndarray) -> list[int]:
        """The row groups that may hold one of the keys of ``hashes`` (`bloom.xxh64_bytes`;
        ``at``: each key's row group by the key ranges, -1 for none): those without a Bloom
        filter, and those whose filter holds one of their keys (`bloom`; most of a day's keys
        are new contents, which the filters turn away, so their row groups, and the file's
        footer, need not be read)."""
        groups = np.unique(at[at >= 0]).tolist()
        where = {g: (int(offsets[g]), int(lengths[g])) for g in groups if offsets[g] >= 0}
        if not where:
            return groups
        filters = bloom.read_filters(path, where)
        self.filters_read += len(where)
        return [g for g in groups if g not in filters
                or bool(bloom.may_hold(filters[g], hashes[at == g]).any())]

    def _key_ranges(self, path: str, pf: Any) -> Groups:
        """The row groups of the file ``path`` (``pf``) as its footer gives them
        (`directory.footer_groups`), once per file."""
        found = self._ranges.get(path)
        if found is None:
            found = self._ranges[path] = directory.footer_groups(self.label, path, pf, self.key,
                                                                 self.width)
        return found

    def _probe(self, f: KeyedFile, keys: list[bytes], hashes: np.ndarray
               ) -> list[tuple[bytes, tuple[int, ...]]]:
        known = self._ranges.get(f.path)
        pf = None
        if known is None:
            pf = self._reader(f.path)
            known = self._key_ranges(f.path, pf)
        mins, maxs, offsets, lengths, _ = known
        asked = np.array(keys, f"S{self.width + 1}")
        # a file is sorted by its key: the one row group whose range can hold a key
        at = np.searchsorted(mins, asked, "right") - 1
        inside = at >= 0
        inside[inside] &= asked[inside] <= maxs[at[inside]]
        groups = self._passing(f.path, hashes, np.where(inside, at, -1), offsets, lengths)
        if not groups:
            return []
        if pf is None:
            pf = self._reader(f.path)
        # the key column first, then the values of the row groups that hold a hit alone (a
        # day's keys are mostly new: most row groups read hold none)
        column = pf.read_row_groups(groups, columns=[self.key], use_threads=False).column(self.key)
        self.rows_read += len(column)
        self.groups_read += len(groups)
        hits = np.flatnonzero(pc.is_in(column, value_set=pa.array(keys, column.type))
                              .to_numpy(zero_copy_only=False))
        if not len(hits):
            return []
        t, held = datafiles.read_rows(pf, groups, hits, list(self.values))
        self.value_groups_read += held
        for name in self.values:
            if t.column(name).null_count:
                raise damaged(self.label, f"data file {datafiles.local_path(f.path)}: a null in "
                                          f"column {name}")
        found = column.take(pa.array(hits)).to_pylist()
        values = [t.column(name).to_pylist() for name in self.values]
        return [(bytes(k), row) for k, row in zip(found, zip(*values, strict=True),
                                                   strict=True)]


def keyed_lookup(pinned: Any, table: str, key: str, width: int, values: tuple[str, ...],
                 threads: int) -> KeyedFiles:
    """The lookup of the keyed table ``table`` at ``pinned``'s state, its files' row groups
    from the index's directory where it describes them (`directory.read`)."""
    files = keyed_files(pinned, table)
    return KeyedFiles(pinned.location, files, key, width, values, threads,
                      directory.read(pinned, table, files))


def content_lookup(pinned: Any) -> HashedRows | KeyedFiles:
    """What a content-id lookup asks (`IcebergBatch.known_contents`,
    `IcebergSnapshot.content_rows`): the ``content_keys`` files probed per bucket
    (`KeyedFiles`) when they hold every content of the state; else (an index of an earlier
    version, until `index compact` builds its ``content_keys``) the contents' ``content_id``
    column read whole (`lookup.HashedRows`)."""
    threads = it.io_threads(pinned.location, LOOKUP_THREADS)
    if pinned.total_records("content_keys") == pinned.total_records("contents"):
        return keyed_lookup(pinned, "content_keys", "content_id", CONTENT_ID_BYTES, ("id",),
                            threads)
    files = [(f.file_path, f.record_count) for f in pinned.data_files("contents")]
    return HashedRows(pinned.location, files, "content_id", CONTENT_ID_BYTES, ("id",),
                      threads)


def content_rows(lookup: HashedRows | KeyedFiles, content_ids: list[bytes]) -> dict[bytes, int]:
    """The row id of each of ``content_ids`` that ``lookup`` (`content_lookup`) holds."""
    if isinstance(lookup, KeyedFiles):
        return {k: rows[0][0] for k, rows in lookup.find(content_ids).items()}
    asked, rows = lookup.find(content_ids)
    ids = lookup.values["id"][rows]
    return {content_ids[a]: i for a, i in zip(asked.tolist(), ids.tolist(), strict=True)}


class KeyedWriter:
    """A batch's rows of a keyed table, gathered as they come and written at its commit
    (`close`): sorted by the key, one file per bucket at the bit count the batch's size asks
    for (`bits_for`), in the layout of `keyed_options`."""

    def __init__(self, table: Any, name: str, prefix: str, key: str,
                 values: tuple[str, ...]) -> None:
        self.table = table
        self.name = name
        self.prefix = prefix
        self.key = key
        self.value_names = values
        #: the rows so far, in Arrow form (about 24 bytes a content id)
        self.parts: list[pa.Table] = []
        self.paths: list[str] = []

    def add(self, rows: list[tuple]) -> None:
        """Rows (key, *values)."""
        if rows:
            columns = list(zip(*rows, strict=True))
            self.parts.append(pa.table(
                {self.key: pa.array(columns[0], pa.binary()),
                 **{n: pa.array(c, pa.int64())
                    for n, c in zip(self.value_names, columns[1:], strict=True)}}))

    def close(self) -> list[str]:
        """Every file written so far (none for no rows): the rows gathered since the last
        `close` written as files of their own; more rows may follow (a checkpoint)."""
        if self.parts:
            rows = pa.concat_tables(self.parts)
            self.parts = []
            self.paths += write_keyed_files(self.table, self.name,
                                            f"{self.prefix}-{uuid.uuid4().hex[:8]}", self.key,
                                            rows, bits_for(rows.num_rows))
        return list(self.paths)

    def discard(self) -> None:
        self.parts = []
        for path in self.paths:
            self.table.io.delete(path)
        self.paths = []


def keyed_options(name: str) -> dict[str, Any]:
    """The Parquet layout of a keyed file: small row groups, no codec (hashes), the sort
    order declared, the hash column written plain, not through a dictionary (its values are
    distinct, so a dictionary only adds to them, and a row group of plain hashes reads in
    about four fifths of the time), and a Bloom filter of each row group's hashes, which a
    lookup reads before the row group (docs/iceberg.md, "Lookups")."""
    columns = [c for c, _ in it.COLUMNS[name]]
    return {"compression": "none", "row_group_size": it.ROW_GROUP_ROWS[name],
            "sorting_columns": [pq.SortingColumn(columns.index(it.SORTED_BY[name]))],
            "use_dictionary": [c for c in columns if c != it.SORTED_BY[name]],
            "bloom_filter_options": {it.SORTED_BY[name]: {"ndv": it.ROW_GROUP_ROWS[name],
                                                          "fpp": 0.001}},
            **datafiles.CHECKED_WRITES}


def write_keyed_files(table: Any, name: str, prefix: str, key: str, rows: pa.Table,
                      bits: int) -> list[str]:
    """``rows`` (the key column and the values) of the keyed table ``name`` sorted by key,
    as one file per bucket of ``bits`` bits under ``table``'s data folder, written through
    its FileIO; their URIs."""
    rows = rows.take(pc.sort_indices(rows, sort_keys=[(key, "ascending")]))
    column = rows.column(key).combine_chunks()
    if pc.any(pc.not_equal(pc.binary_length(column), it.KEY_BYTES[name])).as_py():
        raise ValueError(f"a {key} of other than {it.KEY_BYTES[name]} bytes")
    bucket = buckets_of(prefixes_of(column, it.KEY_BYTES[name]), bits)
    edges = np.flatnonzero(np.diff(bucket)) + 1
    starts, ends = [0, *edges.tolist()], [*edges.tolist(), len(bucket)]
    schema = datafiles.with_checksum_mark(pa.schema([pa.field(f.name, f.type)
                                              for f in it.arrow_schema(name)]))
    data = table.location().rstrip("/") + "/data"
    paths = []
    for start, end in zip(starts, ends, strict=True):
        b = int(bucket[start])
        part = rows.slice(start, end - start)
        arrays = []
        for c in schema.names:
            if c == "bits":
                arrays.append(pa.array(np.full(end - start, bits), schema.field(c).type))
            elif c == "bucket":
                arrays.append(pa.array(np.full(end - start, b), schema.field(c).type))
            else:
                arrays.append(part.column(c).cast(schema.field(c).type))
        path = f"{data}/bits={bits}/bucket={b}/{prefix}-{bits:02d}-{b:06d}.parquet"
        with table.io.new_output(path).create(overwrite=True) as out:
            pq.write_table(pa.Table.from_arrays(arrays, schema=schema), out,
                           **keyed_options(name))
        paths.append(path)
    return paths


def prefixes_of(column: pa.Array, width: int) -> np.ndarray:
    """The first eight bytes of each ``width``-byte value of a binary array as big-endian
    uint64."""
    return hash_words(column, width)[:, 0].byteswap()


class RangeReader:
    """Rows of a keyed table's files read one hash range at a time (`rows`), for a rewrite
    that holds one range's rows, not the table's: in each file only the row groups whose
    hash range (its Parquet statistics) meets the asked range are read; each file's footer
    is read once."""

    def __init__(self, key: str, width: int, columns: list[str]) -> None:
        self.key = key
        self.width = width
        self.columns = columns
        self._files: dict[str, tuple[Any, np.ndarray, np.ndarray]] = {}
        #: the most rows one `rows` call held (tests, bench)
        self.most_rows = 0

    def _file(self, path: str) -> tuple[Any, np.ndarray, np.ndarray]:
        found = self._files.get(path)
        if found is None:
            pf = datafiles.parquet_file(path)
            meta = pf.metadata
            column = pf.schema_arrow.get_field_index(self.key)
            lows, highs = [], []
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(column).statistics
                if stats is None or not stats.has_min_max:
                    lows.append(0)
                    highs.append((1 << 64) - 1)
                else:
                    lows.append(int.from_bytes(bytes(stats.min)[:8].ljust(8, b"\0"), "big"))
                    highs.append(int.from_bytes(bytes(stats.max)[:8].ljust(8, b"\xff"), "big"))
            found = self._files[path] = (pf, np.array(lows, np.uint64), np.array(highs, np.uint64))
        return found

    def rows(self, paths: list[str], lo: int, hi: int) -> pa.Table | None:
        """The rows of ``paths`` whose hash prefix (first eight bytes, big-endian) is in
        ``lo`` .. ``hi - 1`` (``hi`` up to 2^64), or None."""
        parts = []
        for path in paths:
            pf, lows, highs = self._file(path)
            meets = highs >= np.uint64(lo)
            if hi < 1 << 64:
                meets &= lows < np.uint64(hi)
            groups = np.flatnonzero(meets).tolist()
            if not groups:
                continue
            t = pf.read_row_groups(groups, columns=self.columns, use_threads=False)
            prefix = prefixes_of(t.column(self.key).combine_chunks(), self.width)
            keep = prefix >= np.uint64(lo)
            if hi < 1 << 64:
                keep &= prefix < np.uint64(hi)
            parts.append(t.filter(pa.array(keep)))
        if not parts:
            return None
        out = pa.concat_tables(parts)
        self.most_rows = max(self.most_rows, out.num_rows)
        return out


def bucket_range(bucket: int, bits: int) -> tuple[int, int]:
    """The hash prefixes (lo, hi: ``lo`` .. ``hi - 1``) of ``bucket`` under ``bits`` bits."""
    return bucket << (64 - bits), (bucket + 1) << (64 - bits)


def relayout(table: Any, name: str, prefix: str, key: str, files: list[KeyedFile],
             bits: int) -> list[str]:
    """The rows of the keyed table ``name``'s ``files`` (of any bit counts) rewritten as one
    file per bucket of ``bits`` bits, one bucket at a time (`RangeReader`): a bucket's rows
    are those of the files of its own bucket or of a finer one, and the row groups of the
    coarser files that meet its range. Holds one bucket's rows. The new files' URIs."""
    reader = RangeReader(key, it.KEY_BYTES[name], [c for c, _ in it.COLUMNS[name]
                                                   if c not in ("bits", "bucket")])
    of: dict[int, list[str]] = {}
    for f in files:
        if f.bits >= bits:
            of.setdefault(f.bucket >> (f.bits - bits), []).append(f.path)
        else:
            first = f.bucket << (bits - f.bits)
            for b in range(first, first + (1 << (bits - f.bits))):
                of.setdefault(b, []).append(f.path)
    written: list[str] = []
    for b in sorted(of):
        rows = reader.rows(of[b], *bucket_range(b, bits))
        if rows is not None and rows.num_rows:
            written += write_keyed_files(table, name, prefix, key, rows, bits)
    return written


#: Rows of ``raw_texts`` that `merge_sorted` holds at most (about 56 MiB).
MERGE_ROWS = 1 << 20


def merge_sorted(table: Any, name: str, prefix: str, key: str, files: list[KeyedFile],
                 rows: int) -> str:
    """The keyed table ``name``'s ``files`` (each sorted by ``key``) merged into one sorted
    file in the keyed layout, one hash range of about `MERGE_ROWS` rows at a time: holds one
    range's rows. The new file's URI."""
    columns = [c for c, _ in it.COLUMNS[name]]
    reader = RangeReader(key, it.KEY_BYTES[name], columns)
    bits = bits_for_rows(rows, MERGE_ROWS)
    schema = datafiles.with_checksum_mark(pa.schema([pa.field(f.name, f.type)
                                                     for f in it.arrow_schema(name)]))
    options = keyed_options(name)
    group_rows = options.pop("row_group_size")
    path = f"{table.location().rstrip('/')}/data/{prefix}-{name}.parquet"
    paths = [f.path for f in files]
    with table.io.new_output(path).create(overwrite=True) as out, \
            pq.ParquetWriter(out, schema, **options) as writer:
        for b in range(1 << bits):
            part = reader.rows(paths, *bucket_range(b, bits))
            if part is not None and part.num_rows:
                part = part.take(pc.sort_indices(part, sort_keys=[(key, "ascending")]))
                writer.write_table(part.select(schema.names).cast(schema),
                                   row_group_size=group_rows)
    return path


def bits_for_rows(rows: int, most: int) -> int:
    """The fewest bits that split ``rows`` uniform hashes into parts of at most ``most``."""
    return max(0, math.ceil(math.log2(rows / most))) if rows > most else 0
