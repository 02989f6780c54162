"""The lookups of an Iceberg `index` laid out by hash (docs/iceberg.md, "Lookups"): the
``content_keys`` and ``raw_texts`` files are sorted by their hash and bucketed by its
prefix; a lookup reads only the row groups its keys fall into; the bucket count grows with
the index (`index compact` re-partitions), an index of an earlier version is built by
`index compact`, and the reports stay SQLite's throughout. An `index` reads in full only the
data files published since the batch before."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import make_package, run_cli, stdlib_paragraphs, tree_bytes

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_core.errors import NearDedupError  # noqa: E402
from near_dedup_core.index_store.iceberg import directory, keyed  # noqa: E402
from near_dedup_core.index_store.iceberg import tables as it  # noqa: E402
from near_dedup_core.index_store.iceberg.keyed import (  # noqa: E402
    KeyedFile,
    KeyedFiles,
    content_lookup,  # noqa: E402
    keyed_files,
    write_keyed_files,
)
from near_dedup_core.index_store.iceberg.snapshot import Pinned, unverified_files  # noqa: E402

P = stdlib_paragraphs()


def ice(folder: Path) -> str:
    return f"iceberg://{folder.resolve()}"


def ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert (code, err) == (0, ""), err
    return out


def texts(count: int, offset: int = 0) -> list[str]:
    n = len(P)
    return [f"{P[(i + offset) % n]} {P[(i + offset + i // n + 1) % n]}" for i in range(count)]


def day(tmp_path: Path, name: str, items: list[str], at: str) -> Path:
    return make_package(tmp_path, name, {"train": [
        {"id": f"{name}-{i}", "text": t, "domain": "docs"} for i, t in enumerate(items)]},
        created_at=at)


class _Table:
    """What `write_keyed_files` asks of a table: its location and FileIO."""

    def __init__(self, folder: Path) -> None:
        from pyiceberg.io.pyarrow import PyArrowFileIO

        self.folder = folder
        self.io = PyArrowFileIO()

    def location(self) -> str:
        return f"file://{self.folder}"


def test_keyed_files_of_several_bit_counts_find_what_a_dict_finds_reading_few_rows(
        tmp_path, monkeypatch):
    """Files of 0, 1 and 5 bucket bits side by side (as batches and a compaction leave them),
    row groups of 64 rows: every asked key gets exactly its rows, absent keys none, and a
    lookup reads only the row groups its keys fall into."""
    monkeypatch.setitem(it.ROW_GROUP_ROWS, "content_keys", 64)
    table = _Table(tmp_path)
    ids = iter(range(1, 1 << 20))
    expected: dict[bytes, int] = {}
    files: list[KeyedFile] = []
    for part, (rows, bits) in enumerate(((3000, 0), (2000, 1), (6000, 5), (1, 0))):
        keys = [hashlib.sha256(f"{part}-{i}".encode()).digest()[:16] for i in range(rows)]
        values = [next(ids) for _ in keys]
        expected.update(zip(keys, values, strict=True))
        paths = write_keyed_files(table, "content_keys", f"p{part}", "content_id",
                                  pa.table({"content_id": pa.array(keys, pa.binary()),
                                            "id": pa.array(values, pa.int64())}), bits)
        for path in paths:
            b = int(path.split("bucket=")[1].split("/")[0])
            files.append(KeyedFile(path, 0, bits, b))
    assert len(files) == 1 + 2 + 32 + 1
    lookup = KeyedFiles("test", files, "content_id", 16, ("id",), threads=2)
    present = list(expected)[::797]
    absent = [hashlib.sha256(f"absent-{i}".encode()).digest()[:16] for i in range(10)]
    found = lookup.find([*present, *absent, present[0]])
    assert found == {k: [(expected[k],)] for k in present}
    # each key reads at most the one row group of its range in each of the four layers of
    # files (two of 0 bits, one of 1, one of 5) that hold its bucket
    assert lookup.groups_read <= (len(present) + len(absent)) * 4
    assert lookup.rows_read <= lookup.groups_read * 64 < len(expected) / 2
    assert lookup.find([]) == {}
    with pytest.raises(ValueError, match="other than 16 bytes"):
        lookup.find([b"short"])
    # the files' Bloom filters turn the absent keys away: their row groups are not read
    before = lookup.groups_read
    assert lookup.find(absent) == {}
    assert lookup.groups_read == before and lookup.filters_read > 0
    # the files whose row groups are read again stay open between lookups, within the open
    # files the process may keep and the footers' budget: with room for three files, or for
    # the footers of two, the first probed stay open, the others are opened per lookup, and
    # the answers are the same; a file whose filters turn every asked key away is not opened
    assert not lookup._open
    assert lookup.find([*present, *absent]) == found
    holding = {f.path for f in files
               if set(pq.read_table(f.path.removeprefix("file://"), columns=["content_id"])
                      .column("content_id").to_pylist()) & set(present)}
    assert holding <= set(lookup._open) and 3 < len(lookup._open) < len(lookup._ranges)
    monkeypatch.setattr(keyed, "open_files_kept", lambda: 3)
    few = KeyedFiles("test", files, "content_id", 16, ("id",), threads=1)
    for _ in range(3):
        assert few.find([*present, *absent]) == found
    assert len(few._open) == 3
    monkeypatch.setattr(keyed, "open_files_kept", lambda: 4096)
    chunks = sorted(pq.read_metadata(f.path).num_row_groups * 4 for f in files)
    monkeypatch.setattr(keyed, "FOOTER_CHUNKS", chunks[0] + chunks[1])
    small = KeyedFiles("test", files, "content_id", 16, ("id",), threads=2)
    for _ in range(3):
        assert small.find([*present, *absent]) == found
    assert 1 <= len(small._open) <= 2
    assert small._open_chunks <= chunks[0] + chunks[1]



def test_a_keyed_file_without_its_key_column_is_one_line_naming_it(tmp_path):
    """A data file of the lookup that lacks its key column (another table's file in its
    place): the lookup stops with the index's one line for damage, naming the file."""
    path = tmp_path / "data" / "bits=0" / "bucket=0" / "other.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), path)
    lookup = KeyedFiles("test-index", [KeyedFile(f"file://{path}", 2, 0, 0)], "content_id", 16,
                        ("id",), threads=1)
    with pytest.raises(NearDedupError) as raised:
        lookup.find([b"\0" * 16])
    message = str(raised.value)
    assert "\n" not in message
    assert "damaged" in message and str(path) in message and "no column content_id" in message


def test_a_compaction_rewrites_keyed_files_one_hash_range_at_a_time(tmp_path, monkeypatch):
    """`keyed.relayout` rewrites files of 0, 1 and 5 bits as one file per bucket of 3 bits,
    holding one bucket's rows at a time (every row kept, each file holding only its bucket's
    keys, sorted); `keyed.merge_sorted` merges files into one sorted file, holding one hash
    range of at most about `MERGE_ROWS` rows at a time."""
    monkeypatch.setitem(it.ROW_GROUP_ROWS, "content_keys", 64)
    table = _Table(tmp_path)
    rows: dict[bytes, int] = {}
    files: list[KeyedFile] = []
    for part, (count, bits) in enumerate(((3000, 0), (2000, 1), (3000, 5))):
        keys = [hashlib.sha256(f"{part}-{i}".encode()).digest()[:16] for i in range(count)]
        values = list(range(len(rows) + 1, len(rows) + 1 + count))
        rows.update(zip(keys, values, strict=True))
        for path in write_keyed_files(table, "content_keys", f"p{part}", "content_id",
                                      pa.table({"content_id": pa.array(keys, pa.binary()),
                                                "id": pa.array(values, pa.int64())}), bits):
            files.append(KeyedFile(path, count, bits, int(path.split("bucket=")[1].split("/")[0])))
    held: list[int] = []
    reader_rows = keyed.RangeReader.rows

    def recorded(self, paths, lo, hi):
        out = reader_rows(self, paths, lo, hi)
        held.append(0 if out is None else out.num_rows)
        return out

    monkeypatch.setattr(keyed.RangeReader, "rows", recorded)
    written = keyed.relayout(table, "content_keys", "c", "content_id", files, 3)
    assert len(written) == 8 and len(held) == 8 and max(held) < len(rows) / 4
    got: dict[bytes, int] = {}
    for path in written:
        b = int(path.split("bucket=")[1].split("/")[0])
        t = pq.read_table(path.removeprefix("file://"))
        keys = t.column("content_id").to_pylist()
        assert keys == sorted(keys)
        assert (keyed.buckets_of(keyed.prefixes(keys), 3) == b).all()
        got.update(zip(keys, t.column("id").to_pylist(), strict=True))
    assert got == rows
    held.clear()
    monkeypatch.setattr(keyed, "MERGE_ROWS", 1000)
    merged = keyed.merge_sorted(table, "content_keys", "m", "content_id", files, len(rows))
    t = pq.read_table(merged.removeprefix("file://"))
    assert t.column("content_id").to_pylist() == sorted(rows)
    assert dict(zip(t.column("content_id").to_pylist(), t.column("id").to_pylist(),
                    strict=True)) == rows
    assert len(held) == 8 and max(held) <= 1300  # 8,000 rows in ranges of about 1,000

def test_buckets_grow_by_compaction_and_the_reports_stay_sqlites(tmp_path, monkeypatch):
    """With buckets of 128 rows: each batch writes its content ids at the bucket count its
    own size asks for, `index compact --full` re-partitions them at the count the whole index
    asks for (one file a bucket) and merges the raw texts' files into one; a day's lookups then
    find every repeat, and the reports before and after the compaction are byte-identical
    and SQLite's."""
    monkeypatch.setattr(keyed, "BUCKET_ROWS", 128)
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    d1 = day(tmp_path, "g1", texts(500), "2026-11-25T00:00:00Z")
    d2 = day(tmp_path, "g2", texts(400, offset=500), "2026-11-26T00:00:00Z")
    # day 3: contents seen before under other raw texts, and raw texts seen before as they were
    d3 = day(tmp_path, "g3", [*(t.replace(" ", "  ") for t in texts(300, offset=300)),
                              *texts(100)], "2026-11-27T00:00:00Z")
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", d1)
        ok("--index", target, "index", "--inputs", d2)
    pinned = Pinned(index)
    contents = pinned.total_records("contents")
    assert pinned.total_records("content_keys") == contents
    grown = keyed.bits_for(contents)
    # each batch's own size asked for fewer buckets than the two together
    assert max(f.bits for f in keyed_files(pinned, "content_keys")) < grown

    def report(target: object, name: str) -> dict:
        ok("--index", target, "scan", "--inputs", d1, d2, "--output", tmp_path / name)
        return tree_bytes(tmp_path / name)

    before = report(index, "before")
    assert before == report(lite, "lite")
    out = ok("--index", index, "index", "compact", "--full")
    assert "content ids' 5 files laid out again in" in out \
        and f"of {1 << grown:,} buckets" in out, out
    pinned = Pinned(index)
    files = keyed_files(pinned, "content_keys")
    assert {f.bits for f in files} == {grown}
    assert len({f.bucket for f in files}) == len(files) == 1 << grown
    assert "raw texts' 2 files merged into 1 file" in out
    assert len(pinned.data_files("raw_texts")) == 1
    assert report(index, "after") == before
    assert "nothing to compact" in ok("--index", index, "index", "compact", "--full")
    # the next day's repeats are found in the re-partitioned files
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", d3)
    assert report(index, "day3") == report(lite, "lite3")
    assert "OK" in ok("--index", index, "index", "check")


def test_an_index_of_an_earlier_version_gets_its_content_keys_from_compaction(
        tmp_path, monkeypatch):
    """An index without the ``content_keys`` table (made by an earlier version): the next
    `index` adds the table and still finds the history's contents (the whole column, as
    before); `index compact` builds the table from the contents; from then on the lookups
    read it by bucket, and the reports are SQLite's throughout."""
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    d1 = day(tmp_path, "o1", texts(400), "2026-11-25T00:00:00Z")
    d2 = day(tmp_path, "o2", [*(t.replace(" ", "  ") for t in texts(300)),
                              *(f"{t} (new {i})" for i, t in enumerate(texts(100)))],
             "2026-11-26T00:00:00Z")
    d3 = day(tmp_path, "o3", texts(300, offset=200), "2026-11-27T00:00:00Z")
    with monkeypatch.context() as m:  # the tables and commits of an earlier version
        m.setattr(it, "DATA_TABLES", tuple(t for t in it.DATA_TABLES if t != "content_keys"))
        for target in (index, lite):
            ok("--index", target, "index", "--inputs", d1)
    old = Pinned(index)
    assert "content_keys" not in old.tables and old.total_records("content_keys") == 0
    assert "OK" in ok("--index", index, "index", "check")
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", d2)
    pinned = Pinned(index)
    assert 0 < pinned.total_records("content_keys") < pinned.total_records("contents")
    assert not isinstance(content_lookup(pinned), KeyedFiles)
    out = ok("--index", index, "index", "compact")
    assert "content ids built from the contents" in out, out
    pinned = Pinned(index)
    assert pinned.total_records("content_keys") == pinned.total_records("contents")
    assert isinstance(content_lookup(pinned), KeyedFiles)
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", d3)
        ok("--index", target, "scan", "--inputs", d2, d3, "--output", tmp_path / f"r-{target}"
           .replace("/", "_").replace(":", "_"))
    reports = [tree_bytes(p) for p in sorted(tmp_path.glob("r-*"))]
    assert len(reports) == 2 and reports[0] == reports[1]


def test_an_index_reads_in_full_only_the_files_published_since_the_batch_before(tmp_path):
    """After batches 1 and 2, the files an `index` reads in full are batch 2's (batch 1's
    were read by batch 2's run); after a compaction, the compaction's files as well."""
    index = ice(tmp_path / "ice")
    ok("--index", index, "index", "--inputs", day(tmp_path, "v1", texts(300),
                                                  "2026-11-25T00:00:00Z"))
    first = {f.file_path for name in it.DATA_TABLES for f in Pinned(index).data_files(name)}
    assert {u for u, _ in unverified_files(Pinned(index))} == first
    ok("--index", index, "index", "--inputs", day(tmp_path, "v2", texts(300, offset=250),
                                                  "2026-11-26T00:00:00Z"))
    pinned = Pinned(index)
    every = {f.file_path for name in it.DATA_TABLES for f in pinned.data_files(name)}
    second = {u for u, _ in unverified_files(pinned)}
    assert second and second == every - first
    ok("--index", index, "index", "compact", "--full")
    pinned = Pinned(index)
    now = {f.file_path for name in it.DATA_TABLES for f in pinned.data_files(name)}
    assert {u for u, _ in unverified_files(pinned)} == now - first


def test_index_check_finds_content_ids_that_do_not_match_the_contents(tmp_path):
    """A published ``content_keys`` whose rows are all there but one content's id is
    another's (a lookup would find the wrong content) is one line of `index check`."""
    from pyiceberg.expressions import AlwaysTrue

    from near_dedup_core.index_store.iceberg.batch import publish

    index = ice(tmp_path / "ice")
    ok("--index", index, "index", "--inputs", day(tmp_path, "c1", texts(200),
                                                  "2026-11-25T00:00:00Z"))
    assert "OK" in ok("--index", index, "index", "check")
    pinned = Pinned(index)
    rows = pinned.read("content_keys", ("content_id", "id")).sort_by("id")
    ids = rows.column("id").to_pylist()
    ids[0], ids[1] = ids[1], ids[0]
    table = pinned.tables["content_keys"]
    written = write_keyed_files(table, "content_keys", "swapped", "content_id",
                                pa.table({"content_id": rows.column("content_id"),
                                          "id": pa.array(ids, pa.int64())}), 0)
    with table.transaction() as tx:
        tx.delete(AlwaysTrue())
        tx.add_files(written, check_duplicate_files=False)
    snapshots = dict(pinned.state.snapshots)
    current = table.current_snapshot()
    assert current is not None
    snapshots["content_keys"] = current.snapshot_id
    publish(pinned, "compact", "2026-11-25T01:00:00Z", snapshots)
    code, out, err = run_cli("--index", index, "index", "check")
    assert code == 1 and out == "" and err.count("\n") == 1, (code, out, err)
    assert "damaged (the content ids table does not hold the contents' (content_id, id) " \
           "pairs)" in err, err


def test_raw_text_lookups_kept_from_run_to_run_follow_the_published_state(tmp_path,
                                                                         monkeypatch):
    """A raw-text lookup kept past its run (the writer's own process indexes inline) reads
    the newly published state: the texts of the next batch are found, and the files that a
    compaction replaced and an expiry removed are not read."""
    from near_dedup_core.index_store.iceberg.snapshot import IcebergKnownTexts

    monkeypatch.setattr(IcebergKnownTexts, "RECHECK_S", 0.0)
    index = ice(tmp_path / "ice")
    first, second = texts(50), [f"{t} (second)" for t in texts(50)]
    ok("--index", index, "index", "--inputs", day(tmp_path, "k1", first,
                                                  "2026-11-25T00:00:00Z"))
    kept = IcebergKnownTexts(index)

    def sha(t: str) -> bytes:
        return hashlib.sha256(t.encode()).digest()

    assert len(kept.contents([sha(t) for t in first])) == 50
    ok("--index", index, "index", "--inputs", day(tmp_path, "k2", second,
                                                  "2026-11-26T00:00:00Z"))
    ok("--index", index, "index", "compact", "--full")
    ok("--index", index, "index", "expire", "--older-than", "0s")
    assert len(kept.contents([sha(t) for t in first + second])) == 100


def test_a_lookup_reads_the_values_of_the_row_groups_holding_a_hit_alone(tmp_path, monkeypatch):
    """Several hits in one row group, a key in two files (its rows in the files' order) and
    keys in row groups without a hit: the answers are every row of each key, and the value
    column is read from the row groups that hold a hit only."""
    monkeypatch.setitem(it.ROW_GROUP_ROWS, "content_keys", 64)
    table = _Table(tmp_path)
    keys = sorted(hashlib.sha256(f"k{i}".encode()).digest()[:16] for i in range(640))
    files = []
    for part, values in enumerate((range(1, 641), range(1001, 1641))):
        rows = keys if part == 0 else keys[::2]
        for path in write_keyed_files(table, "content_keys", f"p{part}", "content_id",
                                      pa.table({"content_id": pa.array(rows, pa.binary()),
                                                "id": pa.array(list(values)[:len(rows)],
                                                               pa.int64())}), 0):
            files.append(KeyedFile(path, 0, 0, 0))
    assert [pq.read_metadata(f.path).num_row_groups for f in files] == [10, 5]
    # two hits in the first row group of each file, one in the sixth of the first file (a
    # key the second file does not hold), and keys that fall in the other row groups but
    # are absent
    asked = [keys[0], keys[2], keys[321]]
    absent = [bytes([k[0], *k[1:15], k[15] ^ 1]) for k in keys[100:600:50]]
    want = {keys[0]: [(1,), (1001,)], keys[2]: [(3,), (1002,)], keys[321]: [(322,)]}
    lookup = KeyedFiles("test", files, "content_id", 16, ("id",), threads=1)
    # the Bloom filters turn the absent keys away: only the row groups holding a hit are read
    for _ in range(2):
        assert lookup.find([*asked, *absent]) == want
    assert lookup.value_groups_read == lookup.groups_read == 6
    # files without filters (an earlier version's): the key column of the absent keys' row
    # groups is read too, their values not
    monkeypatch.setattr(keyed.bloom, "read_filters", lambda path, where: {})
    lookup = KeyedFiles("test", files, "content_id", 16, ("id",), threads=1)
    assert lookup.find([*asked, *absent]) == want
    assert lookup.value_groups_read == 3
    assert lookup.groups_read > lookup.value_groups_read + 5


def _every_keyed_file(pinned: Pinned) -> list[tuple[str, str]]:
    return [(name, f.path) for name in directory.KEYED for f in keyed_files(pinned, name)]


def test_the_key_directory_spares_a_lookup_the_footers_of_the_files_its_keys_miss(
        tmp_path, monkeypatch):
    """Each batch records its ``content_keys`` and ``raw_texts`` files' row groups in the key
    directory, as their footers give them; a lookup takes them from there: a key that no
    file holds opens no file, a key that one holds opens that file alone, and the answers
    are those of a lookup that reads every footer. An index whose directory lacks files
    (one of an earlier version) gets them at its next `index compact`, which rewrites the
    directory as one file per keyed table, and the reports stay SQLite's."""
    monkeypatch.setitem(it.ROW_GROUP_ROWS, "content_keys", 64)
    monkeypatch.setitem(it.ROW_GROUP_ROWS, "raw_texts", 64)
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    d1 = day(tmp_path, "r1", texts(400), "2026-11-25T00:00:00Z")
    d2 = day(tmp_path, "r2", [f"{t} (day two)" for t in texts(300, offset=350)],
             "2026-11-26T00:00:00Z")
    with monkeypatch.context() as m:  # the first batch's files have no rows in the directory
        rows_of = directory.rows_of
        m.setattr(directory, "rows_of", lambda label, files: rows_of(label, []))
        ok("--index", index, "index", "--inputs", d1)
    ok("--index", index, "index", "--inputs", d2)
    pinned = Pinned(index)
    held = set(pinned.read(directory.TABLE).column("file").to_pylist())
    first = {p for _, p in _every_keyed_file(Pinned(index))} - held
    assert held and first and held.isdisjoint(first)
    out = ok("--index", index, "index", "compact")
    assert "the key directory of" in out, out
    pinned = Pinned(index)
    every = _every_keyed_file(pinned)
    # one data file per keyed table, so that a lookup reads its own table's rows alone
    assert len(pinned.data_files(directory.TABLE)) == 2
    assert pinned.read(directory.TABLE).sort_by("file") == directory.rows_of(index, every)
    assert "nothing to compact" in ok("--index", index, "index", "compact")
    assert "OK" in ok("--index", index, "index", "check")

    files = keyed_files(pinned, "content_keys")
    known = directory.read(pinned, "content_keys", files)
    assert set(known) == {f.path for f in files}
    rows = pinned.read("content_keys", ("content_id", "id"))
    present = rows.column("content_id").to_pylist()[::37]
    absent = [hashlib.sha256(f"absent-{i}".encode()).digest()[:16] for i in range(200)]
    footers = KeyedFiles(index, files, "content_id", 16, ("id",), threads=1)
    want = footers.find([*present, *absent])
    assert len(want) == len(present)
    opened: list[str] = []
    parquet_file = keyed.datafiles.parquet_file

    def counted(path):
        opened.append(path)
        return parquet_file(path)

    monkeypatch.setattr(keyed.datafiles, "parquet_file", counted)
    lookup = KeyedFiles(index, files, "content_id", 16, ("id",), threads=1, known=known)
    assert lookup.find(absent) == {} and opened == [] and lookup.filters_read > 0
    assert lookup.find(present[:1]) == {present[0]: want[present[0]]}
    assert len(opened) == 1
    assert lookup.find([*present, *absent]) == want
    monkeypatch.undo()
    d3 = day(tmp_path, "r3", [*texts(100, offset=200), *(f"{t} (day three)" for t in texts(100))],
             "2026-11-27T00:00:00Z")
    ok("--index", lite, "index", "--inputs", d1)
    ok("--index", lite, "index", "--inputs", d2)
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", d3)
        ok("--index", target, "scan", "--inputs", d2, d3, "--output",
           tmp_path / ("r-ice" if target == index else "r-lite"))
    assert tree_bytes(tmp_path / "r-ice") == tree_bytes(tmp_path / "r-lite")


def test_a_key_directory_that_contradicts_its_files_is_damage(tmp_path):
    """A directory row whose key range is not its row group's is one line of `index check`;
    one whose row counts are not its file's stops the next `index` with the damage line,
    and leaves the index as it was."""
    from near_dedup_core.index_store.iceberg.batch import publish, write_rows_file
    from near_dedup_core.index_store.iceberg.compact import replace_files

    index = ice(tmp_path / "ice")
    ok("--index", index, "index", "--inputs", day(tmp_path, "x1", texts(200),
                                                  "2026-11-25T00:00:00Z"))

    def publish_directory(change) -> None:
        pinned = Pinned(index)
        rows = pinned.read(directory.TABLE)
        columns = {c: rows.column(c).to_pylist() for c in rows.column_names}
        change(columns)
        table = pinned.tables[directory.TABLE]
        snapshots = dict(pinned.state.snapshots)
        snapshots[directory.TABLE] = replace_files(
            table, pinned.data_files(directory.TABLE),
            [write_rows_file(table, directory.TABLE, pa.table(columns, schema=rows.schema),
                             "changed")])
        publish(pinned, "compact", "2026-11-25T01:00:00Z", snapshots)

    publish_directory(lambda c: c["highest"].__setitem__(0, bytes(len(c["highest"][0]))))
    code, out, err = run_cli("--index", index, "index", "check")
    assert code == 1 and out == "" and err.count("\n") == 1, (code, out, err)
    assert "damaged (the key directory's row groups of data file" in err, err
    publish_directory(lambda c: c.update(rows=[(np.frombuffer(r, "<i8") + 1).tobytes()
                                               for r in c["rows"]]))
    before = tree_bytes(tmp_path / "ice")
    code, out, err = run_cli("--index", index, "index", "--inputs", day(
        tmp_path, "x2", [*texts(20), *(f"{t} (new)" for t in texts(30))], "2026-11-26T00:00:00Z"))
    assert code == 1 and err.count("\n") == 1, (code, out, err)
    assert "are not the file's" in err, err
    assert tree_bytes(tmp_path / "ice") == before
    # a missing value, or an array of another length, reads as no row groups (damage)
    assert directory.unpack({c: None for c in directory.PACKED}, 1, 16) is None
    assert directory.unpack({c: b"" for c in directory.PACKED}, 1, 16) is None
    assert directory.unpack({c: b"" for c in directory.PACKED}, None, 16) is None
