"""The row-group directory of the keyed tables (table ``key_directory``, docs/iceberg.md,
"Lookups"): one row per ``content_keys`` and ``raw_texts`` data file, with the row count of
each of its row groups, the lowest and highest key their Parquet statistics record and where
their Bloom filters lie, all read from the file's footer when the file was published (each an
array packed into one binary value: `Groups`).

A lookup (`keyed.KeyedFiles`) needs, of each file its keys fall into, which row group each key
would lie in and that row group's filter. Without the directory it reads each file's footer for
them: at 10^8 contents the 512 ``content_keys`` files' footers, about 2.4 ms each (the
footer's Thrift and 192 row groups walked in Python), whatever the day's size. With it, a
lookup reads one small table (about 60 bytes a row group, one row a file), reads the filters
of the row groups its keys fall into and opens a file only where a filter passes a key: a day
of new contents opens almost none.

Who writes it: each batch, the rows of the keyed files it adds, in its own commit; `index
compact`, the rows of every keyed file of the state it publishes (`compacted_rows`): the
files it wrote, and those that have no row yet (an index of an earlier version, whose first
compaction builds the whole directory). Each data file of the directory holds one keyed
table's rows (`by_table`), so a lookup reads its own table's alone. A file without a row here
is read through its footer, as before. A row that contradicts its file is damage: a lookup
checks each row's row counts against the file's manifest, `index check` every row against
its file's footer (`check`)."""

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
#: Data files of the directory past which `index compact` rewrites it (a batch adds one per
#: keyed table; a lookup reads those of its table).
MOST_FILES = 16
#: The columns of a file's row, after ``keyed`` and ``file``: its row-group count, then the
#: arrays of `Groups`, packed (`pack`).
PACKED = ("rows", "lowest", "highest", "filter_offsets", "filter_lengths")


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


def pack(g: Groups) -> dict[str, bytes]:
    """The arrays of ``g`` as the directory's binary values: the integers little-endian int64,
    the keys ``width + 1`` bytes each."""
    return {"rows": g.rows.astype("<i8").tobytes(), "lowest": g.lowest.tobytes(),
            "highest": g.highest.tobytes(), "filter_offsets": g.offsets.astype("<i8").tobytes(),
            "filter_lengths": g.lengths.astype("<i8").tobytes()}


def unpack(row: dict[str, Any], groups: int | None, width: int) -> Groups | None:
    """The `Groups` of a file's row (`pack`), or None when a value is missing or an array is
    not ``groups`` long."""
    keys = f"S{width + 1}"
    if groups is None or not all(isinstance(v, bytes) for v in row.values()):
        return None
    values: dict[str, bytes] = row
    if any(len(values[c]) != groups * 8 for c in ("rows", "filter_offsets", "filter_lengths")) \
            or any(len(values[c]) != groups * (width + 1) for c in ("lowest", "highest")):
        return None
    return Groups(np.frombuffer(values["lowest"], keys), np.frombuffer(values["highest"], keys),
                  np.frombuffer(values["filter_offsets"], "<i8").astype(np.int64),
                  np.frombuffer(values["filter_lengths"], "<i8").astype(np.int64),
                  np.frombuffer(values["rows"], "<i8").astype(np.int64))


def _schema() -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in it.arrow_schema(TABLE)])


def rows_of(label: str, files: list[tuple[str, str]]) -> pa.Table:
    """The directory's rows of ``files`` (table name, URI), read from their footers, sorted
    by file."""
    rows: dict[str, list[Any]] = {c: [] for c in ("keyed", "file", "row_groups", *PACKED)}
    for name, path in sorted(files, key=lambda f: f[1]):
        g = footer_groups(label, path, datafiles.parquet_file(path), KEYED[name],
                          it.KEY_BYTES[name])
        for column, value in (("keyed", name), ("file", path), ("row_groups", len(g.rows)),
                              *pack(g).items()):
            rows[column].append(value)
    return pa.table(rows, schema=_schema())


def read(pinned: Any, name: str, files: list[Any]) -> dict[str, Groups]:
    """The `Groups` of those of ``files`` (`keyed.KeyedFile`s of the keyed table ``name``)
    that the directory of the pinned state describes, by URI; a file whose row counts are not
    its manifest's is damage."""
    if TABLE not in pinned.present or pinned.state.snapshots.get(TABLE) is None or not files:
        return {}
    t = pinned.read(TABLE, ("file", "row_groups", *PACKED), it.equal("keyed", name))
    wanted = {f.path: f for f in files}
    width = it.KEY_BYTES[name]
    columns = {c: t.column(c).to_pylist() for c in ("file", "row_groups", *PACKED)}
    out: dict[str, Groups] = {}
    for at, path in enumerate(columns["file"]):
        f = wanted.get(path)
        if f is None:  # a file the state does not hold (`check` reports it)
            continue
        g = unpack({c: columns[c][at] for c in PACKED}, columns["row_groups"][at], width)
        if g is None or int(g.rows.sum()) != f.rows:
            raise damaged(pinned.location, f"the key directory's row groups of data file "
                                           f"{datafiles.local_path(path)} are not the file's")
        out[path] = g
    return out


def by_table(rows: pa.Table) -> dict[str, pa.Table]:
    """The directory's ``rows`` split by the keyed table they describe, each written as a
    data file of its own (so that a lookup of one table reads none of the other's rows)."""
    return {name: part for name in KEYED
            if (part := rows.filter(pc.equal(rows.column("keyed"), name))).num_rows}


def compacted_rows(pinned: Any, snapshots: dict[str, int | None], planned: dict[str, list[Any]],
                   held_files: list[Any]) -> pa.Table | None:
    """The directory's rows for the keyed files of the state that ``snapshots`` (the tables'
    snapshot ids a compaction publishes) records, or None when the pinned directory (its
    data files ``held_files``) already describes exactly those files in at most
    `MOST_FILES` files: the rows of files it keeps, the others' read from their footers.
    ``planned``: the keyed tables' data files at the pinned state, for those the compaction
    left as they were."""
    if TABLE not in pinned.present:
        return None
    now: dict[str, str] = {}
    for name in KEYED:
        sid = snapshots.get(name)
        if name not in pinned.tables or sid is None:
            continue
        files = planned[name] if sid == pinned.state.snapshots[name] else [
            task.file for task in pinned.tables[name].scan(snapshot_id=sid).plan_files()]
        now.update((f.file_path, name) for f in files)
    described = set(pinned.read(TABLE, ("file",)).column("file").to_pylist())
    if described == set(now) and len(held_files) <= MOST_FILES:
        return None
    held = pinned.read(TABLE).cast(_schema())
    kept = held.filter(pc.is_in(held.column("file"), pa.array(list(now), pa.string())))
    new = rows_of(pinned.location, [(name, path) for path, name in now.items()
                                    if path not in described])
    rows = pa.concat_tables([kept, new])
    return rows.take(pc.sort_indices(rows, sort_keys=[("file", "ascending")]))


def check(pinned: Any, label: str, files: dict[str, list[Any]]) -> None:
    """Every row of the pinned directory names one of the keyed data files of the state
    (``files``: table name -> its `keyed.KeyedFile`s) and says of its row groups what the
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
