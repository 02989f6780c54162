"""Who writes an Iceberg batch's data files and what a batch holds in memory
(docs/iceberg.md): the band rows go to tasks of the index's executor a chunk at a time, each
chunk one sorted file per bucket, and the reports stay byte-identical to SQLite's, before
and after `index compact` (which rewrites a bucket's files in the writer's layout); content
and source rows are streamed into data files as they come; a batch that fails removes every
file it wrote; a text reader keeps a bounded number of content row groups.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Executor, Future
from contextlib import nullcontext
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import (
    drop_every,
    make_package,
    refused,
    reverse_every,
    run_cli,
    stdlib_paragraphs,
    tree_bytes,
)

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_core.config import NearDedupConfig  # noqa: E402
from near_dedup_core.index_store.iceberg import batch as ice_batch  # noqa: E402
from near_dedup_core.index_store.iceberg import snapshot as ice_snapshot  # noqa: E402
from near_dedup_core.index_store.iceberg import tables as it  # noqa: E402
from near_dedup_core.index_store.iceberg.datafiles import local_path  # noqa: E402
from near_dedup_core.index_store.iceberg.snapshot import Pinned  # noqa: E402
from near_dedup_core.ingest.run import index_packages  # noqa: E402
from near_dedup_core.workers import Executors, InlineExecutor  # noqa: E402

P = stdlib_paragraphs()


def ice(folder: Path) -> str:
    return f"iceberg://{folder.resolve()}"


def texts(count: int, offset: int = 0) -> list[str]:
    n = len(P)
    return [f"{P[(i + offset) % n]} {P[(i + offset + i // n + 1) % n]}" for i in range(count)]


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Path:
    """3,000 real-text records in three shards: three line blocks, so three band chunks when
    every block makes one."""
    root = tmp_path_factory.mktemp("iceberg-write")
    return make_package(root, "cpt-w1", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts(3000))]},
        shard_records=1000)


def ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert (code, err) == (0, ""), err
    return out


def band_files(index: str) -> dict[int, list[Path]]:
    files: dict[int, list[Path]] = {}
    for f in Pinned(index).data_files("bands"):
        files.setdefault(int(f.partition[0]), []).append(Path(local_path(f.file_path)))
    return files


class _Recording(Executor):
    """Runs each task inline and records which function it was."""

    parallelism = 2

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        self.calls[fn.__name__] += 1
        return InlineExecutor().submit(fn, *args, **kwargs)


class _Recorded(Executors):
    """An executor of two slots whose tasks `_Recording` runs (and counts)."""

    name = "recorded"

    def __init__(self) -> None:
        super().__init__(2)
        self.pool = _Recording()

    def start(self, initializer=None, initargs=(), preload=()):
        return nullcontext(self.pool)


def test_the_band_files_are_written_by_the_executors_tasks_a_chunk_at_a_time(
        pool, tmp_path, monkeypatch):
    monkeypatch.setattr(ice_batch.BandTasks, "chunk_rows", 1)  # every block a chunk
    index = ice(tmp_path / "ice")
    recorded = _Recorded()
    result = index_packages(index, NearDedupConfig(), [pool], executor=recorded)
    assert result.batch == 1 and result.new_contents == 3000
    # three chunks (one per block of lines), each split in two shares of buckets
    assert recorded.pool.calls["write_band_files"] == 3 * 2
    files = band_files(index)
    assert len(files) == it.DEFAULT_BUCKETS and {len(f) for f in files.values()} == {3}
    prefixes = {p.name.split("-")[0] for f in files.values() for p in f}
    assert len(prefixes) == 1  # the batch's
    rows = sum(pq.read_metadata(p).num_rows for f in files.values() for p in f)
    assert rows == 3000 * NearDedupConfig().bands
    assert "OK (1 batch," in ok("--index", index, "index", "check")


def test_chunked_band_files_give_sqlite_reports_before_and_after_compaction(
        pool, tmp_path, monkeypatch):
    monkeypatch.setattr(ice_batch.BandTasks, "chunk_rows", 1)
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    v2 = make_package(tmp_path, "cpt-w2", {"train": [
        {"id": f"b{i}", "text": drop_every(t, 9) if i % 2 else reverse_every(t, 13),
         "domain": "docs"} for i, t in enumerate(texts(1200))]},
        created_at="2026-11-26T00:00:00Z")
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", pool, "--workers", 2)
        ok("--index", target, "index", "--inputs", v2, "--workers", 2)
    assert max(len(f) for f in band_files(index).values()) == 3 + 2  # chunks of two batches

    def scan(target: str | Path, name: str) -> dict[str, bytes]:
        ok("--index", target, "scan", "--inputs", v2, "--output", tmp_path / name,
           "--workers", 2)
        return tree_bytes(tmp_path / name)

    expected = scan(lite, "lite")
    assert b'"history_only":true' in expected["relations.jsonl"]
    assert scan(index, "ice-report") == expected
    assert "compacted" in ok("--index", index, "index", "compact", "--full")
    assert {len(f) for f in band_files(index).values()} == {1}
    for (path,) in band_files(index).values():  # the writer's layout (BAND_FILE_OPTIONS)
        group = pq.read_metadata(path).row_group(0)
        assert [c.column_index for c in group.sorting_columns] == [1, 2]
        assert "DELTA_BINARY_PACKED" in group.column(1).encodings
    assert scan(index, "ice-compacted") == expected
    assert "OK (2 batches" in ok("--index", index, "index", "check")


def test_a_failed_batch_removes_every_data_file_it_wrote(pool, tmp_path, monkeypatch):
    """Blocks before the bad line were written (band files by the tasks, the first content
    row groups): the failed batch leaves the folder byte for byte as it was."""
    monkeypatch.setattr(ice_batch.BandTasks, "chunk_rows", 1)
    monkeypatch.setitem(ice_batch.it.ROW_GROUP_ROWS, "contents", 256)
    folder = tmp_path / "ice"
    index = ice(folder)
    ok("--index", index, "index", "--inputs", pool, "--workers", 2)
    before = tree_bytes(folder)
    lines: list = [{"id": f"c{i}", "text": t, "domain": "docs"}
                   for i, t in enumerate(texts(2600, 4000))]
    lines.append(b'{"id": "c-bad", "text": ')
    bad = make_package(tmp_path, "cpt-bad", {"train": lines},
                       created_at="2026-11-27T00:00:00Z")
    refused(["--quiet", "--index", index, "index", "--inputs", bad, "--workers", 2], "cpt-bad",
            "part-00000.jsonl:2601")
    assert tree_bytes(folder) == before


def test_a_text_reader_keeps_a_bounded_number_of_content_row_groups(pool, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setitem(ice_batch.it.ROW_GROUP_ROWS, "contents", 100)
    index = ice(tmp_path / "ice")
    ok("--index", index, "index", "--inputs", pool)
    paths = [f.file_path for f in Pinned(index).data_files("contents")]
    one_group = max(pq.ParquetFile(local_path(p)).read_row_group(g, columns=[
        "id", "text_z", "dictionary"]).nbytes for p in paths
        for g in range(pq.ParquetFile(local_path(p)).num_row_groups))
    monkeypatch.setattr(ice_snapshot, "KEPT_ROW_GROUP_BYTES", 3 * one_group)
    groups = ice_snapshot.RowGroups(paths)
    import numpy as np

    for start in range(1, 3001, 250):
        wanted = np.arange(start, start + 250, dtype=np.int64)
        got = groups.blobs(wanted)
        assert sorted(got) == wanted.tolist()
        assert len(groups._read) <= 3
    # the texts read through a bounded reader are the index's texts
    reader = ice_snapshot.IcebergTexts(Pinned(index))
    reader._groups = groups
    assert reader.texts([1, 1500, 3000]) == ice_snapshot.IcebergTexts(Pinned(index)).texts(
        [1, 1500, 3000])


def test_a_text_reader_opens_only_the_files_whose_id_range_holds_a_wanted_id(pool, tmp_path,
                                                                              monkeypatch):
    """A reader of the contents' texts reads no footer of a file that its manifest entry puts
    outside every wanted id: at 10^8 contents a worker's reader opened every contents file
    (their footers, one row group's statistics per 4,096 contents) before its first text."""
    monkeypatch.setitem(ice_batch.it.ROW_GROUP_ROWS, "contents", 100)
    index = ice(tmp_path / "ice")
    ok("--index", index, "index", "--inputs", pool)
    day = make_package(tmp_path, "cpt-w2", {"train": [
        {"id": f"b{i}", "text": f"{t} {t.upper()}", "domain": "docs"}
        for i, t in enumerate(texts(500, 7))]})
    ok("--index", index, "index", "--inputs", day)
    ranges = Pinned(index).id_ranges("contents")
    assert len(ranges) >= 2 and all(lo is not None and hi is not None for _, lo, hi in ranges)
    opened: list[str] = []
    real = ice_snapshot.datafiles.parquet_file

    def recording(path: str) -> pq.ParquetFile:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(ice_snapshot.datafiles, "parquet_file", recording)
    import numpy as np

    last = max(hi for _, _, hi in ranges)
    groups = ice_snapshot.RowGroups(ranges)
    assert opened == []
    got = groups.blobs(np.asarray([last], dtype=np.int64))
    assert list(got) == [last]
    assert opened == [path for path, lo, hi in ranges if lo <= last <= hi]
    assert len(opened) < len(ranges)
    every = np.arange(1, last + 1, dtype=np.int64)
    got = groups.blobs(every)
    assert sorted(got) == every.tolist()
    assert sorted(opened) == sorted(path for path, _, _ in ranges)
    # the same texts as a reader that opens every file at its first read
    assert ice_snapshot.RowGroups([path for path, _, _ in ranges]).blobs(every) == got
