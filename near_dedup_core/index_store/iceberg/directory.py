"""The row-group directory of the keyed tables (table ``key_directory``, docs/iceberg.md,
"Lookups"): one row per row group of each ``content_keys`` and ``raw_texts`` data file, with
its row count, the lowest and highest key its Parquet statistics record and where its Bloom
filter lies, all read from the file's footer when the file was published.

A lookup (`keyed.KeyedFiles`) needs, of each file its keys fall into, which row group each key
would lie in and that row group's filter. Without the directory it reads each file's footer for
them: at 10^8 contents the 512 ``content_keys`` files' footers, about 2.4 ms each (the
footer's Thrift and 192 row groups walked in Python), whatever the day's size. With it, a
lookup reads one small table (about 40 bytes a row group), reads the filters of the row groups
its keys fall into and opens a file only where a filter passes a key: a day of new contents
opens almost none.

Who writes it: each batch, the rows of the keyed files it adds, in its own commit; `index
compact`, the rows of every keyed file of the state it publishes, in one file
(`compacted_rows`): the files it wrote, and those that have no rows yet (an index of an
earlier version, whose first compaction builds the whole directory). A file without rows
here is read through its footer, as before. A row that contradicts its file is damage:
a lookup checks each file's row counts against its manifest, `index check` every row
against its file's footer (`check`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from near_dedup_core.index_store.iceberg import bloom, datafiles
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.texts import damaged

TABLE = "key_directory"
#: The keyed tables the directory describes, with the column each is keyed by.
KEYED = {"content_keys": "content_id", "raw_texts": "text_sha256"}
#: Data files of the directory past which `index compact` rewrites it as one (a batch adds
#: one; a lookup reads them all).
MOST_FILES = 8


class Groups(NamedTuple):
    """The row groups of one keyed file: the lowest and highest key of each (``width + 1``
    bytes: a row group without statistics holds every key), where its Bloom filter of the key
    lies (offset and length, -1 for none), and its rows."""

    lowest: np.ndarray
    highest: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    rows: np.ndarray


def footer_groups(label: str, path: str, pf: Any, key: str, width: int) -> Groups:
    """The `Groups` of the open Parquet file ``pf`` (``path``), from its footer."""
    meta = pf.metadata
    # (the Arrow schema: each call of ``meta.schema`` left about 170 KB of the process's heap
    # behind, 85 MB over the 512 files of a 10^8 history)
    column = pf.schema_arrow.get_field_index(key)
    if column < 0:
        raise damaged(label, f"data file {datafiles.local_path(path)}: no column {key}")
    n = meta.num_row_groups
    lows, highs = [], []
    offsets = np.full(n, -1, np.int64)
    lengths = np.full(n, -1, np.int64)
    rows = np.zeros(n, np.int64)
    for g in range(n):
        group = meta.row_group(g)
        rows[g] = group.num_rows
        chunk = group.column(column)
        stats = chunk.statistics
        if stats is None or not stats.has_min_max:
            lows.append(b"")
            highs.append(b"\xff" * (width + 1))
        else:
            lows.append(bytes(stats.min))
            highs.append(bytes(stats.max))
        offsets[g], lengths[g] = bloom.place(chunk) or (-1, -1)
    return Groups(np.array(lows, f"S{width + 1}"), np.array(highs, f"S{width + 1}"), offsets,
                  lengths, rows)


def rows_of(label: str, files: list[tuple[str, str]]) -> pa.Table:
    """The directory's rows of ``files`` (table name, URI), read from their footers, sorted
    as the table is (by file, then row group)."""
    parts = []
    for name, path in sorted(files, key=lambda f: f[1]):
        g = footer_groups(label, path, datafiles.parquet_file(path), KEYED[name],
                          it.KEY_BYTES[name])
        n = len(g.rows)
        parts.append(pa.table({
            "keyed": pa.array([name] * n, pa.string()), "file": pa.array([path] * n, pa.string()),
            "row_group": pa.array(np.arange(n, dtype=np.int64)), "rows": pa.array(g.rows),
            "lowest": pa.array(g.lowest.tolist(), pa.binary()),
            "highest": pa.array(g.highest.tolist(), pa.binary()),
            "filter_offset": pa.array(g.offsets), "filter_length": pa.array(g.lengths)}))
    schema = pa.schema([pa.field(f.name, f.type) for f in it.arrow_schema(TABLE)])
    return pa.concat_tables(parts).select(schema.names).cast(schema) if parts \
        else schema.empty_table()


def read(pinned: Any, name: str, files: list[Any]) -> dict[str, Groups]:
    """The `Groups` of those of ``files`` (`keyed.KeyedFile`s of the keyed table ``name``)
    that the directory of the pinned state describes, by URI; a file whose rows are not its
    manifest's row count, in row groups 0, 1, …, is damage."""
    if TABLE not in pinned.present or pinned.state.snapshots.get(TABLE) is None or not files:
        return {}
    t = pinned.read(TABLE, ("keyed", "file", "row_group", "rows", "lowest", "highest",
                            "filter_offset", "filter_length"))
    t = t.filter(pc.equal(t.column("keyed"), name))
    if not t.num_rows:
        return {}
    t = t.take(pc.sort_indices(t, sort_keys=[("file", "ascending"), ("row_group", "ascending")]))
    width = it.KEY_BYTES[name]
    column = t.column("file").combine_chunks()
    changed = pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))
    edges = [0, *(np.flatnonzero(changed.to_numpy(zero_copy_only=False)) + 1).tolist(),
             len(column)]
    wanted = {f.path: f for f in files}
    group, rows, offsets, lengths = (t.column(c).to_numpy() for c in (
        "row_group", "rows", "filter_offset", "filter_length"))
    lowest, highest = (_fixed(t.column(c).combine_chunks(), width) for c in ("lowest", "highest"))
    out: dict[str, Groups] = {}
    for start, end in zip(edges, edges[1:], strict=False):
        f = wanted.get(column[start].as_py())
        if f is None:  # a file of another state
            continue
        if not np.array_equal(group[start:end], np.arange(end - start)) \
                or int(rows[start:end].sum()) != f.rows:
            raise damaged(pinned.location, f"the key directory's row groups of data file "
                                           f"{datafiles.local_path(f.path)} are not the file's")
        out[f.path] = Groups(lowest[start:end], highest[start:end], offsets[start:end],
                             lengths[start:end], rows[start:end])
    return out


def _fixed(values: pa.Array, width: int) -> np.ndarray:
    """Binary ``values`` as ``width + 1``-byte strings (the form `footer_groups` gives): at
    once from the buffer when every value is ``width`` bytes (a key range's statistics),
    else one by one."""
    n = len(values)
    if n and not values.null_count \
            and pc.all(pc.equal(pc.binary_length(values), width)).as_py():
        buffers = values.buffers()
        wide = pa.types.is_large_binary(values.type)
        at = np.frombuffer(buffers[1], np.int64 if wide else np.int32)[values.offset]
        raw = np.frombuffer(buffers[2], np.uint8, count=n * width, offset=int(at))
        out = np.zeros((n, width + 1), np.uint8)
        out[:, :width] = raw.reshape(n, width)
        return out.view(f"S{width + 1}").reshape(n)
    return np.array(values.to_pylist(), f"S{width + 1}")


def compacted_rows(pinned: Any, snapshots: dict[str, int | None]) -> pa.Table | None:
    """The directory's rows for the keyed files of the state that ``snapshots`` (the tables'
    snapshot ids a compaction publishes) records, as one table, or None when the pinned
    directory already describes exactly those files in at most `MOST_FILES` files: the rows
    of files it keeps, the others' read from their footers."""
    if TABLE not in pinned.present:
        return None
    now: dict[str, str] = {}
    for name in KEYED:
        sid = snapshots.get(name)
        if name in pinned.tables and sid is not None:
            table = pinned.tables[name]
            now.update((task.file.file_path, name)
                       for task in table.scan(snapshot_id=sid).plan_files())
    held = pinned.read(TABLE)
    described = set(held.column("file").to_pylist())
    if described == set(now) and len(pinned.data_files(TABLE)) <= MOST_FILES:
        return None
    kept = held.filter(pc.is_in(held.column("file"), pa.array(list(now), pa.string())))
    new = rows_of(pinned.location, [(name, path) for path, name in now.items()
                                    if path not in described])
    rows = pa.concat_tables([kept, new.cast(kept.schema)])
    return rows.take(pc.sort_indices(rows, sort_keys=[("file", "ascending"),
                                                      ("row_group", "ascending")]))


def check(pinned: Any, label: str, files: dict[str, list[Any]]) -> None:
    """Every row of the pinned directory names one of the keyed data files of the state
    (``files``: table name -> its `keyed.KeyedFile`s) and says of its row group what the
    file's footer says; the damage line of the first that does not."""
    if TABLE not in pinned.present or pinned.state.snapshots.get(TABLE) is None:
        return
    held = pinned.read(TABLE, ("file",))
    stray = sorted(set(held.column("file").to_pylist()) - {f.path for fs in files.values()
                                                            for f in fs})
    if stray:
        raise damaged(label, f"the key directory names data file "
                             f"{datafiles.local_path(stray[0])}, which the index does not hold")
    for name, mine in files.items():
        for path, g in read(pinned, name, mine).items():
            f = footer_groups(label, path, datafiles.parquet_file(path), KEYED[name],
                              it.KEY_BYTES[name])
            if not all(np.array_equal(a, b) for a, b in zip(g, f, strict=True)):
                raise damaged(label, f"the key directory's row groups of data file "
                                     f"{datafiles.local_path(path)} are not the file's")
