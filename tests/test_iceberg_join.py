"""The per-bucket history join's reads (docs/measurements/2026-12-04-scale.md, "The
per-bucket join"): the writer's band files store the sorted keys and the content ids DELTA_BINARY_PACKED, without a codec,
and declare their order; `bucket_hits` finds exactly the rows a plain membership test finds,
in row order, on those files and on files of any other layout (the older zstd/dictionary
files, files that declare no order, files whose rows are not sorted); a scan of a batch its
index holds opens none of that batch's band files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import make_package, run_cli, stdlib_paragraphs, tree_bytes

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_core.index_store.iceberg import bands, bloom  # noqa: E402
from near_dedup_core.index_store.iceberg.bands import bucket_hits  # noqa: E402
from near_dedup_core.index_store.iceberg.datafiles import local_path  # noqa: E402
from near_dedup_core.index_store.iceberg.snapshot import Pinned  # noqa: E402

BUCKETS = 4


def rows(seed: int, n: int = 400_000) -> tuple[np.ndarray, np.ndarray]:
    """``n`` band rows with repeated keys (several contents a key) and repeated pairs."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(-(1 << 62), 1 << 62, n // 4, dtype=np.int64)
    keys = np.concatenate([keys, rng.choice(keys, n - len(keys))])
    return keys, rng.integers(1, 5_000, n, dtype=np.int64)


def written(tmp_path: Path, keys: np.ndarray, contents: np.ndarray) -> list[bands.BandFile]:
    spec = bands.BandSpec(f"file://{tmp_path}", {}, "t", BUCKETS)
    return bands.write_band_files(spec, keys, contents)


def expected(path: str, probes: np.ndarray, skip: np.ndarray, lo: int, hi: int
             ) -> tuple[list[int], list[int]]:
    t = pq.read_table(local_path(path), columns=["key", "content"])
    k, c = t.column("key").to_numpy(), t.column("content").to_numpy()
    hit = np.isin(k, probes) & ((c < lo) | (c > hi)) & ~np.isin(c, skip)
    return k[hit].tolist(), c[hit].tolist()


def test_the_writers_band_files_are_delta_packed_uncompressed_and_declare_their_order(
        tmp_path):
    files = written(tmp_path, *rows(1))
    assert len(files) == BUCKETS
    for f in files:
        meta = pq.read_metadata(local_path(f.path))
        assert meta.num_row_groups > 1
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            assert group.num_rows <= 65_536
            assert [c.column_index for c in group.sorting_columns] == [1, 2]
            assert not any(c.descending for c in group.sorting_columns)
            for at, name in ((1, "key"), (2, "content")):
                column = group.column(at)
                assert column.path_in_schema == name
                assert "DELTA_BINARY_PACKED" in column.encodings
                assert column.compression == "UNCOMPRESSED"
        t = pq.read_table(local_path(f.path))
        order = np.lexsort((t.column("content").to_numpy(), t.column("key").to_numpy()))
        assert (order == np.arange(t.num_rows)).all()


def relaid(path: str, out: Path, shuffle: bool, **options) -> str:
    """The rows of ``path`` rewritten to ``out`` with ``options`` (shuffled if asked)."""
    t = pq.read_table(local_path(path))
    if shuffle:
        t = t.take(pa.array(np.random.default_rng(5).permutation(t.num_rows)))
    pq.write_table(t, out, **options)
    return f"file://{out}"


@pytest.mark.parametrize("layout", ["writer", "zstd-dictionary", "small-row-groups",
                                    "no-declared-order", "unsorted", "no-bloom-filters",
                                    "unsorted-bloom-filters"])
def test_bucket_hits_finds_what_a_membership_test_finds_on_every_layout(tmp_path, layout):
    keys, contents = rows(2)
    rng = np.random.default_rng(3)
    files = written(tmp_path / "w", keys, contents)
    paths = []
    for f in files:
        out = tmp_path / f"{layout}-{f.bucket}.parquet"
        if layout == "zstd-dictionary":  # the layout of the first Iceberg indexes
            paths.append(relaid(f.path, out, False, compression="zstd", row_group_size=65_536))
        elif layout == "small-row-groups":
            paths.append(relaid(f.path, out, False, row_group_size=1_000,
                                sorting_columns=[pq.SortingColumn(1)]))
        elif layout == "no-bloom-filters":  # the layout of the indexes before them
            paths.append(relaid(f.path, out, False, **{
                k: v for k, v in bands.BAND_FILE_OPTIONS.items() if k != "bloom_filter_options"}))
        elif layout == "unsorted-bloom-filters":
            paths.append(relaid(f.path, out, True, row_group_size=7_000,
                                bloom_filter_options={"key": {"ndv": 7_000, "fpp": 0.01}}))
        elif layout == "no-declared-order":
            paths.append(relaid(f.path, out, False, row_group_size=7_000))
        elif layout == "unsorted":
            paths.append(relaid(f.path, out, True, row_group_size=7_000))
        else:
            paths.append(f.path)
    for path in paths:
        mine = pq.read_table(local_path(path), columns=["key"]).column("key").to_numpy()
        for size in (1, 40, 3_000):
            probes = np.sort(np.concatenate([
                rng.choice(mine, size),  # present, some twice
                rng.integers(-(1 << 62), 1 << 62, size, dtype=np.int64)]))  # absent
            skip = np.sort(rng.choice(contents, 50, replace=False))
            for lo, hi in ((1, 0), (1_000, 2_000)):
                got = bucket_hits([path], probes, skip, lo, hi)
                want = expected(path, probes, skip, lo, hi)
                assert (got[0].tolist(), got[1].tolist()) == want
                assert len(want[0]) > 0
    # several files of a bucket: their hits one file after the other
    probes = np.sort(rng.choice(keys, 500))
    got = bucket_hits(paths, probes, np.zeros(0, np.int64), 1, 0)
    want = [expected(p, probes, np.zeros(0, np.int64), 1, 0) for p in paths]
    assert got[0].tolist() == [k for w in want for k in w[0]]
    assert got[1].tolist() == [c for w in want for c in w[1]]
    assert bucket_hits(paths, np.zeros(0, np.int64), np.zeros(0, np.int64), 1, 0)[0].size == 0


def test_the_writers_bloom_filters_hold_every_key_and_turn_away_most_absent_ones(tmp_path):
    files = written(tmp_path, *rows(4))
    rng = np.random.default_rng(6)
    turned = asked = 0
    for f in files:
        pf = pq.ParquetFile(local_path(f.path))
        meta = pf.metadata
        at = pf.schema_arrow.get_field_index("key")
        keys = pf.read(columns=["key"]).column("key").to_numpy()
        assert bloom.unheld(f.path, meta, at, bloom.xxh64(keys)) is None
        filters = bloom.row_group_filters(f.path, meta, at, list(range(meta.num_row_groups)))
        assert sorted(filters) == list(range(meta.num_row_groups))
        first = 0
        for g in range(meta.num_row_groups):
            mine = keys[first:first + meta.row_group(g).num_rows]
            first += len(mine)
            assert filters[g].size * 32 >= 13 * len(np.unique(mine))  # sized for its keys
            assert bloom.may_hold(filters[g], bloom.xxh64(mine)).all()
            absent = np.setdiff1d(rng.integers(-(1 << 62), 1 << 62, 20_000, dtype=np.int64),
                                  keys)
            turned += int((~bloom.may_hold(filters[g], bloom.xxh64(absent))).sum())
            asked += len(absent)
    assert turned / asked > 0.99  # about 1 in 1,000 passes by chance at 16 bits a key


def test_a_join_task_reads_only_the_row_groups_whose_filter_holds_a_probe(tmp_path, monkeypatch):
    keys, contents = rows(7)
    files = written(tmp_path, keys, contents)
    path = files[0].path
    mine = pq.read_table(local_path(path), columns=["key"]).column("key").to_numpy()
    meta = pq.read_metadata(local_path(path))
    assert meta.num_row_groups > 1
    read: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups

    def counted(self, groups, *args, **kwargs):
        read.append(list(groups))
        return real(self, groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", counted)
    rng = np.random.default_rng(8)
    # absent keys across the whole key range (every row group's range holds some) that
    # their row group's filter turns away (about 1 in 1,000 would pass by chance)
    absent = np.setdiff1d(rng.integers(mine.min(), mine.max(), 200, dtype=np.int64), mine)
    filters = bloom.row_group_filters(path, meta, 1, list(range(meta.num_row_groups)))
    maxs = [meta.row_group(g).column(1).statistics.max for g in range(meta.num_row_groups)]
    group = np.searchsorted(np.array(maxs, np.int64), absent)
    absent = absent[[not bloom.may_hold(filters[g], bloom.xxh64(absent[i:i + 1]))[0]
                     for i, g in enumerate(group.tolist())]]
    assert len(np.unique(group)) == meta.num_row_groups and len(absent) > 150
    got = bucket_hits([path], absent, np.zeros(0, np.int64), 1, 0)
    assert got[0].size == 0 and read == []
    # one present key among them: its row group alone is read
    probes = np.sort(np.concatenate([absent, mine[-1:]]))
    got = bucket_hits([path], probes, np.zeros(0, np.int64), 1, 0)
    assert set(got[0].tolist()) == {int(mine[-1])}
    assert {g for groups in read for g in groups} == {meta.num_row_groups - 1}
    # a filter that is not the format's split-block one: its row group is read as before
    raw = bytearray(open(local_path(path), "rb").read())
    chunk = meta.row_group(0).column(1)
    raw[chunk.bloom_filter_offset + 2] ^= 0xFF  # inside the header
    other = tmp_path / "other-header.parquet"
    other.write_bytes(bytes(raw))
    read.clear()
    assert bucket_hits([f"file://{other}"], absent, np.zeros(0, np.int64), 1, 0)[0].size == 0
    assert [g for groups in read for g in groups] == [0]


@pytest.mark.parametrize("width", [8, 16, 32, 40])
def test_a_byte_strings_hash_is_the_one_pyarrows_filters_hold_it_by(tmp_path, width):
    """The keyed tables' hashes (16 and 32 bytes) and other widths: every value written
    passes the filter pyarrow wrote, and nearly every other value is turned away."""
    rng = np.random.default_rng(width)
    values = [rng.bytes(width) for _ in range(3_000)]
    path = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"k": pa.array(values, pa.binary())}), path,
                   bloom_filter_options={"k": {"ndv": 4_096, "fpp": 0.001}})
    (blocks,) = bloom.row_group_filters(f"file://{path}", pq.read_metadata(path), 0,
                                        [0]).values()
    assert bloom.may_hold(blocks, bloom.xxh64_bytes(values, width)).all()
    others = bloom.xxh64_bytes([rng.bytes(width) for _ in range(5_000)], width)
    assert bloom.may_hold(blocks, others).mean() < 0.01
    with pytest.raises(ValueError, match="multiple of 8"):
        bloom.xxh64_bytes([b"abc"], 3)


def test_a_scan_of_a_batch_the_index_holds_opens_none_of_its_band_files(tmp_path, monkeypatch):
    """Day 2 indexed after day 1, then scanned: the join opens day 1's band files, never
    day 2's own (their manifest bounds say each holds only day 2's contents, which the
    join leaves out), and the report is SQLite's."""
    paragraphs = stdlib_paragraphs()
    n = len(paragraphs)

    def package(name: str, first: int, at: str) -> Path:
        return make_package(tmp_path, name, {"train": [
            {"id": f"{name}-{i}", "text": f"{paragraphs[i % n]} {paragraphs[(i + 7) % n]}"}
            for i in range(first, first + 200)]}, created_at=at)

    d1 = package("d1", 0, "2026-11-25T00:00:00Z")
    d2 = package("d2", 100, "2026-11-26T00:00:00Z")  # its first half: day 1's texts again
    index, lite = f"iceberg://{tmp_path / 'ice'}", tmp_path / "lite.sqlite"
    bands_of: list[set[str]] = []
    for pkg in (d1, d2):
        for target in (index, lite):
            assert run_cli("--quiet", "--index", target, "index", "--inputs", pkg)[0] == 0
        bands_of.append({f.file_path for f in Pinned(index).data_files("bands")})
    first, every = bands_of
    opened: list[str] = []
    real = bands.file_hits

    def counted(path, probes, hashes):
        opened.append(path)
        return real(path, probes, hashes)

    monkeypatch.setattr(bands, "file_hits", counted)
    for target, name in ((index, "ice-report"), (lite, "lite-report")):
        code, _, err = run_cli("--quiet", "--index", target, "scan", "--inputs", d2,
                               "--workers", "1", "--output", tmp_path / name)
        assert code == 0, err
    assert opened and set(opened) <= first < every
    assert tree_bytes(tmp_path / "ice-report") == tree_bytes(tmp_path / "lite-report")
