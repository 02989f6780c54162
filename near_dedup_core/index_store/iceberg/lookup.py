"""Rows of an Iceberg index's table found by a fixed-width hash column (`HashedRows`): the
content row of a ``content_id`` (an `index` writer's `IcebergBatch.known_contents`) on an
index whose ``content_keys`` do not yet hold every content (one of an earlier version, until
`index compact` builds them: `keyed.content_lookup`); the lookups laid out by hash are
`keyed.KeyedFiles`.

An `index` run asks once per block of 1,024 records, so one pass over the table per question
would read the whole history a thousand times for a pool of 10^6 records. The rows are
therefore read once (the key and value columns, row group by row group, files on threads)
into numpy arrays: the hash's bytes as 64-bit words (a ``content_id`` is two, a sha256 four)
and the rows' values, about 24 bytes a content where a Python dict of the same rows took about
230. The arrays are sorted by the hash's first eight bytes in runs of `RUN_ROWS` rows, each
run on its own (a run's sort stays in the processor's caches: one sort of 10^8 rows took 30 s
of CPU, its runs 11 s, docs/measurements/2026-12-04-scale.md). A lookup is vectorized: in
each run, a binary search of the first words, the other words compared for the hits."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from near_dedup_core.index_store.iceberg import datafiles
from near_dedup_core.index_store.texts import damaged

#: Rows sorted together (`sort_run`): about 24 MiB of a content's words and values.
RUN_ROWS = 1 << 20


def hash_words(values: pa.Array | pa.ChunkedArray, width: int) -> np.ndarray:
    """The ``width``-byte values of a binary array (no nulls) as ``(n, width // 8)`` uint64
    words (an owned copy)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        raise ValueError("a null hash")
    if len(values) and not pc.all(pc.equal(pc.binary_length(values), width)).as_py():
        raise ValueError(f"a hash of other than {width} bytes")
    buffers = values.buffers()
    wide = pa.types.is_large_binary(values.type)
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)[
        values.offset:values.offset + len(values) + 1]
    raw = np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0]:offsets[-1]] \
        if len(values) else np.zeros(0, np.uint8)
    return raw.copy().view(np.uint64).reshape(len(values), width // 8)


class HashedRows:
    """The rows of data files ``files`` (URI, row count as the manifests record it: one
    state of one table), looked up by their ``width``-byte ``key`` column; ``values`` are
    the int64 columns a lookup returns."""

    def __init__(self, label: str, files: list[tuple[str, int]], key: str, width: int,
                 values: tuple[str, ...], threads: int = 2) -> None:
        self.label = label
        self.width = width
        starts = np.concatenate(([0], np.cumsum([rows for _, rows in files],
                                                dtype=np.int64))).tolist()
        n = starts[-1]
        # the arrays are allocated once, at their final size, and each file's rows are read
        # into its slice of them: no per-file copies to concatenate
        words = [np.empty(n, np.uint64) for _ in range(width // 8)]
        self.values: dict[str, np.ndarray] = {name: np.empty(n, np.int64) for name in values}
        self.runs = [(at, min(at + RUN_ROWS, n)) for at in range(0, n, RUN_ROWS)]
        columns = [*words, *self.values.values()]
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            list(pool.map(lambda f: self._read(files[f][0], starts[f], starts[f + 1], key,
                                               words), range(len(files))))
            list(pool.map(lambda run: sort_run(columns, *run), self.runs))
        self.first = words[0]
        self.rest = words[1:]
        # the record batches' buffers go back to the system (Arrow's allocator keeps them)
        pa.default_memory_pool().release_unused()

    def _read(self, path: str, start: int, end: int, key: str, words: list[np.ndarray]
              ) -> None:
        at = start
        pf = datafiles.parquet_file(path)
        for group in range(pf.metadata.num_row_groups):
            batch = pf.read_row_group(group, columns=[key, *self.values],
                                      use_threads=False)
            rows = batch.num_rows
            if at + rows > end:
                break
            try:
                part = hash_words(batch.column(key), self.width)
            except ValueError as exc:
                raise damaged(self.label, f"data file {path}: {exc} in column {key}") from None
            for k, column in enumerate(words):
                column[at:at + rows] = part[:, k]
            for name, array in self.values.items():
                col = batch.column(name)
                if col.null_count:
                    raise damaged(self.label, f"data file {path}: a null in column {name}")
                array[at:at + rows] = col.to_numpy()
            at += rows
        if at != end:
            raise damaged(self.label, f"data file {path}: its rows are not the "
                                      f"{end - start:,} its manifest records")

    def __len__(self) -> int:
        return len(self.first)

    def find(self, keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``keys``, row) of each row whose hash is one of ``keys`` (rows as
        positions in `values`' arrays), in the order of ``keys``, a key's rows in the
        files' order."""
        none = np.zeros(0, np.int64)
        if not keys or not len(self.first):
            return none, none
        wanted = hash_words(pa.array(keys, pa.binary()), self.width)
        positions = np.arange(len(keys), dtype=np.int64)
        asked_parts, row_parts = [], []
        for start, end in self.runs:
            run = self.first[start:end]
            lo = np.searchsorted(run, wanted[:, 0], side="left")
            counts = np.searchsorted(run, wanted[:, 0], side="right") - lo
            if not counts.any():
                continue
            asked = np.repeat(positions, counts)
            # each hit's row: its run of equal first words' start plus its place in it
            within = np.arange(len(asked), dtype=np.int64) - np.repeat(
                np.cumsum(counts) - counts, counts)
            asked_parts.append(asked)
            row_parts.append(start + np.repeat(lo, counts) + within)
        if not asked_parts:
            return none, none
        asked, rows = np.concatenate(asked_parts), np.concatenate(row_parts)
        same = np.ones(len(rows), dtype=bool)
        for k, column in enumerate(self.rest, start=1):
            same &= column[rows] == wanted[asked, k]
        asked, rows = asked[same], rows[same]
        order = np.lexsort((rows, asked))
        return asked[order], rows[order]


def sort_run(columns: list[np.ndarray], start: int, end: int) -> None:
    """Rows ``start``..``end`` of ``columns`` put in the order of the first column's values
    there (stable: equal values keep the files' order), in place."""
    order = np.argsort(columns[0][start:end], kind="stable")
    for column in columns:
        column[start:end] = column[start:end][order]
