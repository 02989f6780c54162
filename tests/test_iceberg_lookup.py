"""What an Iceberg index's driver reads of the history
(docs/measurements/2026-12-04-scale.md, "What grows with the history on the driver"): pinning a state reads no content row (the count from the snapshot's
summary, the highest id from the manifests); the content-id lookups of an index of an
earlier version find the rows by sorted hash arrays (`lookup.HashedRows`), exactly; the
lookups laid out by hash (`keyed.KeyedFiles`, tests/test_iceberg_keyed.py) give the SQLite
backend's reports without reading a whole column of the contents.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import make_package, refused, run_cli, stdlib_paragraphs, tree_bytes

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_core.errors import NearDedupError  # noqa: E402
from near_dedup_core.index_store.iceberg.lookup import HashedRows  # noqa: E402
from near_dedup_core.index_store.iceberg.snapshot import Pinned  # noqa: E402

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


def test_hashed_rows_find_every_row_of_a_key_exactly(tmp_path):
    """Keys that share their first eight bytes, a key on two rows (two files), absent keys:
    each asked key gets exactly its rows."""
    a = b"\x01" * 8 + b"A" * 8
    b = b"\x01" * 8 + b"B" * 8  # the same first word as ``a``
    c = b"\x02" * 8 + b"A" * 8
    files = []
    for name, keys, values in (("one", [b, a, c], [20, 10, 30]), ("two", [a], [11])):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"key": pa.array(keys, pa.binary()),
                                 "value": pa.array(values, pa.int64())}), path,
                       row_group_size=2)
        files.append((str(path), len(keys)))
    rows = HashedRows("test", files, "key", 16, ("value",))
    assert len(rows) == 4
    asked, at = rows.find([c, b"\x03" * 16, a, b"\x01" * 8 + b"C" * 8, b])
    found = sorted(zip(asked.tolist(), rows.values["value"][at].tolist(), strict=True))
    assert found == [(0, 30), (2, 10), (2, 11), (4, 20)]
    assert [len(x) for x in rows.find([])] == [0, 0]


def test_hashed_rows_sorted_in_runs_find_what_a_dict_finds(tmp_path, monkeypatch):
    """Rows sorted in many small runs (`lookup.RUN_ROWS`), files of several sizes, keys on
    several rows across runs, shared first words: each key's rows as a dict of every row
    gives them, in the files' order."""
    from near_dedup_core.index_store.iceberg import lookup

    monkeypatch.setattr(lookup, "RUN_ROWS", 7)
    rng = np.random.default_rng(5)
    firsts = rng.integers(0, 40, 300).astype(np.uint64).tobytes()
    keys = [firsts[8 * i:8 * i + 8] + bytes([int(x)]) * 8
            for i, x in enumerate(rng.integers(0, 3, 300))]
    files, expected, value = [], {}, 0
    for f, size in enumerate((1, 50, 13, 200, 36)):
        chunk = keys[:size]
        keys = keys[size:]
        values = list(range(value, value + size))
        value += size
        for k, v in zip(chunk, values, strict=True):
            expected.setdefault(k, []).append(v)
        path = tmp_path / f"{f}.parquet"
        pq.write_table(pa.table({"key": pa.array(chunk, pa.binary()),
                                 "value": pa.array(values, pa.int64())}), path,
                       row_group_size=11)
        files.append((str(path), size))
    rows = HashedRows("test", files, "key", 16, ("value",), threads=2)
    assert len(rows.runs) == 43
    asked_keys = [*expected, b"\x00" * 16, *list(expected)[:5]]
    asked, at = rows.find(asked_keys)
    got: dict[int, list[int]] = {}
    for a, v in zip(asked.tolist(), rows.values["value"][at].tolist(), strict=True):
        got.setdefault(a, []).append(v)
    assert got == {i: expected[k] for i, k in enumerate(asked_keys) if k in expected}
    assert asked.tolist() == sorted(asked.tolist())


def test_hashed_rows_refuse_a_wrong_hash_width_or_row_count_with_one_line(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"key": pa.array([b"\x01" * 15], pa.binary()),
                             "value": pa.array([1], pa.int64())}), path)
    with pytest.raises(NearDedupError, match=r"bad\.parquet: a hash of other than 16 bytes"):
        HashedRows("test", [(str(path), 1)], "key", 16, ("value",))
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"key": pa.array([b"\x01" * 16], pa.binary()),
                             "value": pa.array([1], pa.int64())}), good)
    with pytest.raises(NearDedupError, match=r"good\.parquet: its rows are not the 2 "):
        HashedRows("test", [(str(good), 2)], "key", 16, ("value",))


def test_an_index_run_and_a_scan_read_no_whole_column_of_the_contents(tmp_path, monkeypatch):
    """The second day repeats half of the first day's texts under other raw texts (more
    spaces: the same normalized contents) and repeats some raw texts as they were: the
    writer's content-id lookups and the workers' raw-text lookups find them without any read
    of the contents' rows through the table scan, and the reports are SQLite's."""
    day1 = make_package(tmp_path, "cpt-l1", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts(1500))]})
    old = texts(1500)
    day2 = make_package(tmp_path, "cpt-l2", {"train": [
        {"id": f"b{i}", "text": old[i].replace(" ", "  ") if i % 3 == 0
         else old[i] if i % 3 == 1 else t, "domain": "docs"}
        for i, t in enumerate(texts(1200, offset=7))]}, created_at="2026-11-26T00:00:00Z")
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", day1)

    whole = []
    read = Pinned.read

    def no_whole_contents(self, table, columns=("*",), row_filter=None):
        if table == "contents" and row_filter is None:
            whole.append(columns)
            raise AssertionError(f"a read of every content row ({columns})")
        return read(self, table, columns, row_filter)

    monkeypatch.setattr(Pinned, "read", no_whole_contents)
    reports = {}
    for target, name in ((index, "ice-report"), (lite, "lite-report")):
        ok("--index", target, "index", "--inputs", day2)
        ok("--index", target, "scan", "--inputs", day2, "--output", tmp_path / name)
        reports[name] = tree_bytes(tmp_path / name)
    assert whole == []
    assert reports["ice-report"] == reports["lite-report"]
    assert b'"history_only":true' in reports["ice-report"]["relations.jsonl"]
    pinned = Pinned(index)
    assert pinned.total_records("contents") == pinned.max_value("contents", "id")


def test_pinning_takes_the_highest_content_id_from_the_manifests(tmp_path, monkeypatch):
    """The highest id is the manifests' upper bound of each file's ``id`` (equal to the
    rows' maximum); a published contents state lacking its last row is still one line."""
    index = ice(tmp_path / "ice")
    pkg = make_package(tmp_path, "cpt-m1", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts(300))]})
    ok("--index", index, "index", "--inputs", pkg)
    pinned = Pinned(index)
    ids = pinned.read("contents", ("id",)).column("id").to_numpy()
    assert pinned.max_value("contents", "id") == int(ids.max()) == len(ids)
    from near_dedup_core.index_store.iceberg import batch

    table = pinned.tables["contents"]
    table.overwrite(pinned.read("contents").sort_by("id").slice(0, len(ids) - 1))
    current = table.current_snapshot()
    assert current is not None
    batch.publish(pinned, "batch", "2026-11-26T00:00:00Z",
                  {**pinned.state.snapshots, "contents": current.snapshot_id})
    assert Pinned(index).max_value("contents", "id") == len(ids) - 1
    # the count and the highest id agree, but a source names the missing content: the
    # scan's reads of the content rows stop with one line
    refused(["--index", index, "scan", "--inputs", pkg, "--output", tmp_path / "out"],
            "content rows are missing")
    assert np.array_equal(np.sort(Pinned(index).read("contents", ("id",)).column("id")
                                  .to_numpy()), np.arange(1, len(ids), dtype=np.int64))


@pytest.mark.parametrize("table", ["content_keys", "raw_texts"])
def test_a_damaged_data_file_read_inside_a_batch_is_one_line_naming_the_index(tmp_path, table):
    """The content ids' and the raw texts' files are read inside the batch's body (the
    lookups of the ingest) and beside it (the previous batch's files, read in full): a file
    that is not Parquet any more stops the run with one line naming the index, whichever
    read meets it first, and nothing is published."""
    day1 = make_package(tmp_path, "cpt-d1", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts(400))]})
    old = texts(400)
    day2 = make_package(tmp_path, "cpt-d2", {"train": [
        {"id": f"b{i}", "text": old[i].replace(" ", "  "), "domain": "docs"}
        for i in range(300)]}, created_at="2026-11-26T00:00:00Z")
    index = ice(tmp_path / "ice")
    ok("--index", index, "index", "--inputs", day1)
    for f in Pinned(index).data_files(table):
        path = Path(f.file_path.removeprefix("file://"))
        path.write_bytes(b"\0" * path.stat().st_size)
    before = Pinned(index).state
    line = refused(["--index", index, "index", "--inputs", day2], f"index {index}")
    assert "cannot use the Iceberg tables" in line or "does not read back" in line, line
    assert Pinned(index).state == before
