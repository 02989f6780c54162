"""`index compact` of an Iceberg index (docs/iceberg.md, "Compaction"): which data files are
merged, and the merges, published as one new commit.

**Size tiers.** A file (a band bucket's file, a run of ``content_keys`` files written
together, a ``raw_texts`` file) is of tier ``floor(log_FANOUT(rows))``. Whenever `FANOUT`
files or more share a tier, they are merged into one, which lands a tier or more higher;
merges go on from the lowest tier up, and a file is rewritten at most once by one compaction
(`merges`). After it, every tier holds fewer than `FANOUT` files, so a bucket holds at most
``FANOUT - 1`` files of each tier between the day's and the history's (about
``log_FANOUT(history / day)`` tiers). A row is rewritten each time its file moves up a tier,
so over its life about that many times, and a day's compaction costs a small multiple of the
day, however large the history. The day a high tier fills, its compaction rewrites that
tier's files; for tier ``k`` tiers above the day's, that is once every ``FANOUT ** k`` days.

``full`` (`index compact --full`) merges every bucket's files into one, as the release did
before the tiers. The band table's bucket count still grows with the index
(`bands.buckets_for`): when it does, every band file is rewritten at the new count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import parquet_files_to_data_files
from pyiceberg.table import TableProperties

from near_dedup_core.fsutil import utc_now
from near_dedup_core.index_store.iceberg import datafiles, directory
from near_dedup_core.index_store.iceberg import tables as it
from near_dedup_core.index_store.iceberg.bands import BandSpec, buckets_for, write_band_files
from near_dedup_core.index_store.iceberg.batch import publish, to_arrow, write_rows_file
from near_dedup_core.index_store.iceberg.keyed import (
    KeyedFile,
    bits_for,
    keyed_files,
    merge_sorted,
    relayout,
    write_keyed_files,
)
from near_dedup_core.index_store.iceberg.maintain import writing
from near_dedup_core.index_store.iceberg.snapshot import Pinned
from near_dedup_core.progress import Progress
from near_dedup_core.wording import count

#: Files of one tier that `index compact` merges into one.
FANOUT = 4


def tier(rows: int, fanout: int = FANOUT) -> int:
    """The tier of a file of ``rows`` rows: the largest ``t`` with ``fanout ** t <= rows``."""
    t, size = 0, fanout
    while size <= rows:
        t, size = t + 1, size * fanout
    return t


def merges(sizes: Sequence[int], fanout: int | None = None) -> list[list[int]]:
    """The merges of files of ``sizes`` rows (module doc; ``fanout``: `FANOUT`): groups of
    their indices, each of two or more files, each group's indices ascending, the groups
    ordered by their first; the same sizes always give the same merges."""
    fanout = FANOUT if fanout is None else fanout
    if fanout < 2:
        raise ValueError(f"a fanout of at least 2, not {fanout}")
    held: list[tuple[int, list[int]]] = [(int(s), [i]) for i, s in enumerate(sizes)]
    while True:
        tiers: dict[int, list[int]] = {}
        for at, (rows, _) in enumerate(held):
            tiers.setdefault(tier(rows, fanout), []).append(at)
        full = [t for t, ats in tiers.items() if len(ats) >= fanout]
        if not full:
            break
        merged = set(tiers[min(full)])
        rows = sum(held[at][0] for at in merged)
        members = sorted(i for at in merged for i in held[at][1])
        held = [h for at, h in enumerate(held) if at not in merged] + [(rows, members)]
    return sorted((members for _, members in held if len(members) > 1), key=lambda m: m[0])


def compact(location: str, progress: bool = False, full: bool = False) -> str:
    """Merge the files `merges` picks (every bucket's into one with ``full``) of the band
    table (`compact_bands`, one bucket at a time), ``content_keys`` (`compact_keys`) and
    ``raw_texts`` (`compact_raw_texts`), all published as one new commit; a one-line summary.
    ``progress``: its stages on stderr."""
    stages = Progress("index compact", 4, enabled=progress)
    with writing(location) as pinned:
        snapshots = dict(pinned.state.snapshots)
        # each table's data files planned once, for the choice, the summary and the commit
        data = {name: pinned.data_files(name) for name in ("bands", "content_keys", "raw_texts")}
        stages.step("laying out the content ids by hash bucket")
        keys = "; ".join(x for x in (
            compact_keys(pinned, snapshots, data["content_keys"], full),
            compact_raw_texts(pinned, snapshots, data["raw_texts"], full)) if x) or None
        bands = compact_bands(pinned, snapshots, data["bands"], stages, full)
        keys = "; ".join(x for x in (keys, compact_directory(pinned, snapshots, data)) if x) \
            or None
        if bands is None and keys is None:
            return f"index {location}: nothing to compact ({layout(pinned, data)})"
        stages.step("committing")
        publish(pinned, "compact", utc_now(), snapshots)
        stages.finish()
        done = "; ".join(x for x in (bands, keys) if x)
        return f"index {location}: {done} (commit {pinned.state.n + 1:,})"


def layout(pinned: Pinned, data: dict[str, list[Any]]) -> str:
    """How the band and content-id files (``data``: the tables' planned data files) lie,
    for the summary of a compaction that found nothing to merge."""
    per_bucket: dict[int, int] = {}
    for f in data["bands"]:
        b = int(f.partition[0])
        per_bucket[b] = per_bucket.get(b, 0) + 1
    most = max(per_bucket.values(), default=0)
    keys = keyed_files(pinned, "content_keys", data["content_keys"])
    return (f"{count(len(per_bucket), 'band bucket')}, at most {count(most, 'file')} each; "
            f"the content ids in {count(len(keys), 'file')} of {count(len(runs(keys)), 'run')}")


def replace_files(table: Any, removed: list[Any], added: list[str]) -> int:
    """One snapshot of ``table`` that drops the data files ``removed`` (pyiceberg
    ``DataFile``s of its current snapshot) and adds the Parquet files ``added``: its id."""
    with table.transaction() as tx:
        if tx.table_metadata.name_mapping() is None:  # as pyiceberg's own add_files does
            tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                 tx.table_metadata.schema().name_mapping.model_dump_json()})
        change = tx.update_snapshot().overwrite()
        for f in removed:
            change.delete_data_file(f)
        for f in parquet_files_to_data_files(table.io, tx.table_metadata, iter(added)):
            change.append_data_file(f)
        change.commit()
    current = table.current_snapshot()
    assert current is not None
    return int(current.snapshot_id)


def compact_bands(pinned: Pinned, snapshots: dict[str, int | None], data: list[Any],
                  stages: Progress, full: bool) -> str | None:
    """The band files (``data``: the table's planned data files) `merges` picks in each
    bucket (with ``full``, each bucket's files)
    rewritten into one sorted file, one merge at a time, so that only its rows are held; when
    the index has outgrown its bucket count (`bands.buckets_for`), every bucket's files split
    into the buckets of the grown count (one file each) instead, and ``meta`` records the new
    count. The old files dropped and the new ones added by one snapshot of the table (and
    of ``meta``); ``snapshots`` gets the new snapshots. What was done, or None (nothing)."""
    meta = pinned.rows("meta", ("key", "value"))
    buckets = int(dict(meta)[it.BUCKETS_KEY])
    files: dict[int, list[Any]] = {}
    rows = 0
    for f in sorted(data, key=lambda f: f.file_path):
        files.setdefault(int(f.partition[0]), []).append(f)
        rows += f.record_count
    grown = buckets_for(rows, buckets)
    if grown != buckets or full:
        groups = [fs for _, fs in sorted(files.items()) if grown != buckets or len(fs) > 1]
    else:
        groups = [[fs[i] for i in g] for _, fs in sorted(files.items())
                  for g in merges([f.record_count for f in fs])]
    if not groups:
        return None
    table = pinned.tables["bands"]
    prefix = f"compact-{pinned.state.n + 1}"
    spec = BandSpec(f"{table.location().rstrip('/')}/data", dict(table.io.properties), prefix,
                    grown)
    chosen = len({int(g[0].partition[0]) for g in groups})
    stages.step(f"rewriting the band files of {count(chosen, 'bucket')}")
    written: list[str] = []
    for group in groups:
        parts = [datafiles.parquet_file(f.file_path).read(columns=["key", "content"],
                                                          use_threads=False) for f in group]
        held = pa.concat_tables(parts)
        del parts
        written += [f.path for f in write_band_files(spec, held.column("key").to_numpy(),
                                                     held.column("content").to_numpy())]
        del held
    stages.step(f"registering {count(len(written), 'band file')}")
    snapshots["bands"] = replace_files(table, [f for g in groups for f in g], written)
    what = (f"compacted {count(sum(map(len, groups)), 'band file')} of "
            f"{count(chosen, 'bucket')} into {len(written):,}")
    if grown == buckets:
        return what
    meta_table = pinned.tables["meta"]
    rows_now = [(k, str(grown) if k == it.BUCKETS_KEY else v) for k, v in meta]
    path = write_rows_file(meta_table, "meta", to_arrow("meta", rows_now), prefix)
    snapshots["meta"] = replace_files(meta_table, pinned.data_files("meta"), [path])
    return f"{what}: the band buckets grown from {buckets:,} to {grown:,} ({count(rows, 'band row')})"


#: The end of a keyed file's name after its run's name (`keyed.write_keyed_files`).
_BUCKET_TAIL = re.compile(r"-\d{2}-\d{6}\.parquet$")


def runs(files: list[KeyedFile]) -> list[list[KeyedFile]]:
    """Keyed files grouped by the run that wrote them (a batch's checkpoint, a merge): the
    files whose names share the part before ``-<bits>-<bucket>.parquet``; ordered by name."""
    of: dict[str, list[KeyedFile]] = {}
    for f in sorted(files, key=lambda f: f.path):
        name = f.path.rsplit("/", 1)[-1]
        of.setdefault(_BUCKET_TAIL.sub("", name), []).append(f)
    return [of[name] for name in sorted(of)]


def compact_keys(pinned: Pinned, snapshots: dict[str, int | None], data: list[Any],
                 full: bool) -> str | None:
    """The runs of ``content_keys`` files (``data``: the table's planned data files) that
    `merges` picks each laid out again as one run at the
    bit count its rows ask for (`keyed.bits_for`: buckets grow with the index), one bucket at
    a time (`keyed.relayout`). With ``full``: the whole table at the bit count of the index's
    size, one file per bucket, unless laid out so. An index of an earlier version, which lacks
    rows of some contents: the table built from the contents, read whole once. ``snapshots``
    gets the table's new snapshot; what was done, or None (nothing)."""
    contents = pinned.total_records("contents")
    files = keyed_files(pinned, "content_keys", data)
    table = pinned.tables["content_keys"]
    prefix = f"compact-{pinned.state.n + 1}"
    if pinned.total_records("content_keys") != contents:
        rows = pinned.read("contents", ("content_id", "id"))
        written = write_keyed_files(table, "content_keys", prefix, "content_id", rows,
                                    bits_for(contents))
        del rows
        snapshots["content_keys"] = replace_files(table, data, written)
        return (f"the content ids built from the contents in {count(len(written), 'file')} "
                f"of {count(1 << bits_for(contents), 'bucket')}")
    bits = bits_for(contents)
    if full:
        laid_out = len({f.bucket for f in files}) == len(files) \
            and all(f.bits == bits for f in files)
        groups = [] if laid_out else [files]
    else:
        of_runs = runs(files)
        groups = [[f for i in g for f in of_runs[i]]
                  for g in merges([sum(f.rows for f in run) for run in of_runs])]
    if not groups:
        return None
    written = []
    for n, group in enumerate(groups):
        written += relayout(table, "content_keys", f"{prefix}-{n}", "content_id", group,
                            bits_for(sum(f.rows for f in group)))
    by_path = {f.file_path: f for f in data}
    snapshots["content_keys"] = replace_files(
        table, [by_path[f.path] for g in groups for f in g], written)
    into = f" of {count(1 << bits, 'bucket')}" if full else ""
    return (f"the content ids' {count(sum(map(len, groups)), 'file')} laid out again in "
            f"{count(len(written), 'file')}{into}")


def compact_raw_texts(pinned: Pinned, snapshots: dict[str, int | None], data: list[Any],
                      full: bool) -> str | None:
    """The ``raw_texts`` files (``data``: the table's planned data files; one per batch,
    each sorted by ``text_sha256``) that `merges`
    picks (with ``full``: all, when there are several) each merged into one sorted file in
    the lookup's layout (`keyed.keyed_options`), one hash range at a time
    (`keyed.merge_sorted`): a raw-text lookup reads a row group per key in each file.
    ``snapshots`` gets the table's new snapshot; what was done, or None (nothing)."""
    files = sorted(keyed_files(pinned, "raw_texts", data), key=lambda f: f.path)
    if full:
        groups = [files] if len(files) > 1 else []
    else:
        groups = [[files[i] for i in g] for g in merges([f.rows for f in files])]
    if not groups:
        return None
    table = pinned.tables["raw_texts"]
    written = [merge_sorted(table, "raw_texts", f"compact-{pinned.state.n + 1}-{n}",
                            "text_sha256", group, sum(f.rows for f in group))
               for n, group in enumerate(groups)]
    by_path = {f.file_path: f for f in data}
    snapshots["raw_texts"] = replace_files(table, [by_path[f.path] for g in groups for f in g],
                                           written)
    return (f"the raw texts' {count(sum(map(len, groups)), 'file')} merged into "
            f"{count(len(written), 'file')}")


def compact_directory(pinned: Pinned, snapshots: dict[str, int | None],
                      data: dict[str, list[Any]]) -> str | None:
    """The key directory rewritten as one file per keyed table, describing the keyed files of
    the state ``snapshots`` records (`directory.compacted_rows`; ``data``: the keyed tables'
    planned data files), unless it already does: the summary's part, or None."""
    held = pinned.data_files(directory.TABLE)
    rows = directory.compacted_rows(pinned, snapshots, data, held)
    if rows is None:
        return None
    table = pinned.tables[directory.TABLE]
    snapshots[directory.TABLE] = replace_files(
        table, held,
        [write_rows_file(table, directory.TABLE, part, f"compact-{pinned.state.n + 1}-{name}")
         for name, part in directory.by_table(rows).items()])
    return f"the key directory of {count(rows.num_rows, 'keyed file')} written"
