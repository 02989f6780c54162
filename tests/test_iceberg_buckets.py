"""The band table's buckets grow with the index (docs/iceberg.md, "Buckets grow with the
index"): a new index starts at 16 buckets, `index compact` re-partitions the table one old
bucket at a time at the count its rows ask for (`bands.buckets_for`) and records the count
in ``meta``; the reports before and after are byte-identical and SQLite's, a scan reads only
the new layout (the old files removed by `index expire`), and the next day writes at the
grown count."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import make_package, run_cli, stdlib_paragraphs, tree_bytes

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_core.index_store.iceberg import bands, compact  # noqa: E402
from near_dedup_core.index_store.iceberg import tables as it  # noqa: E402
from near_dedup_core.index_store.iceberg.datafiles import local_path  # noqa: E402
from near_dedup_core.index_store.iceberg.snapshot import Pinned  # noqa: E402

P = stdlib_paragraphs()


def ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert (code, err) == (0, ""), err
    return out


def texts(count: int) -> list[str]:
    n = len(P)
    return [f"{P[i % n]} {P[(i + i // n + 1) % n]}" for i in range(count)]


def day(tmp_path: Path, name: str, items: list[str], at: str) -> Path:
    return make_package(
        tmp_path,
        name,
        {
            "train": [
                {"id": f"{name}-{i}", "text": t, "domain": "docs"} for i, t in enumerate(items)
            ]
        },
        created_at=at,
    )


def band_buckets(index: str) -> tuple[int, dict[int, list[str]]]:
    """The published state's bucket count (``meta``) and its band files by bucket."""
    pinned = Pinned(index)
    files: dict[int, list[str]] = {}
    for f in pinned.data_files("bands"):
        files.setdefault(int(f.partition[0]), []).append(f.file_path)
    return int(dict(pinned.rows("meta", ("key", "value")))[it.BUCKETS_KEY]), files


def test_the_growth_rule_doubles_while_a_bucket_holds_more_than_its_rows():
    rows = bands.BUCKET_ROWS
    assert bands.buckets_for(0, 16) == 16
    assert bands.buckets_for(16 * rows, 16) == 16
    assert bands.buckets_for(16 * rows + 1, 16) == 32
    assert bands.buckets_for(1_600_000_000, 16) == 4_096  # 10^8 contents, 16 band rows each
    assert bands.buckets_for(1_600_000_000, 1_000) == 4_000  # a count set at creation doubles
    assert bands.buckets_for(10**13, 16) == it.MAX_BUCKETS
    assert bands.buckets_for(10, 1_024) == 1_024  # never fewer


def test_the_band_table_is_re_partitioned_by_compaction_and_the_reports_stay(tmp_path, monkeypatch):
    """With buckets of 128 band rows: two batches at the 16 buckets of a new index; `index
    compact` splits each old bucket into its buckets at the grown count (one at a time: a
    rewrite holds one old bucket's rows), one file each, ``meta`` records the count; the
    scan's report is byte-identical before, after, and after the old files are removed, and
    SQLite's; the next day's band files are at the grown count and its report is SQLite's."""
    monkeypatch.delenv(it.BUCKETS_ENV, raising=False)
    monkeypatch.setattr(bands, "BUCKET_ROWS", 128)
    index, lite = f"iceberg://{(tmp_path / 'ice').resolve()}", tmp_path / "lite.sqlite"
    every = texts(700)  # distinct texts
    d1 = day(tmp_path, "g1", every[:300], "2026-11-25T00:00:00Z")
    d2 = day(tmp_path, "g2", every[300:600], "2026-11-26T00:00:00Z")
    # day 3: contents seen before under other raw texts, and new ones
    d3 = day(
        tmp_path,
        "g3",
        [*(t.replace(" ", "  ") for t in every[200:350]), *every[600:]],
        "2026-11-27T00:00:00Z",
    )
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", d1)
        ok("--index", target, "index", "--inputs", d2)
    start, files = band_buckets(index)
    assert start == it.DEFAULT_BUCKETS == 16
    assert len(files) == 16 and all(len(paths) >= 2 for paths in files.values()), {
        b: len(p) for b, p in files.items()
    }
    old = sum(len(paths) for paths in files.values())
    rows = Pinned(index).total_records("bands")
    grown = bands.buckets_for(rows, 16)
    assert grown >= 64, rows

    def report(target: object, name: str) -> dict:
        ok("--index", target, "scan", "--inputs", d1, d2, "--output", tmp_path / name)
        return tree_bytes(tmp_path / name)

    before = report(index, "before")
    assert before == report(lite, "lite")
    held: list[int] = []
    write = compact.write_band_files

    def recorded(spec, keys, contents):
        held.append(len(keys))
        return write(spec, keys, contents)

    monkeypatch.setattr(compact, "write_band_files", recorded)
    out = ok("--index", index, "index", "compact")
    assert (
        f"compacted {old} band files of 16 buckets into {grown}: the band buckets grown "
        f"from 16 to {grown:,} ({rows:,} band rows)" in out
    ), out
    # one old bucket at a time: each rewrite held that bucket's rows, no more
    assert len(held) == 16 and sum(held) == rows and max(held) < rows / 4
    count, files = band_buckets(index)
    assert count == grown
    assert sorted(files) == list(range(grown)) and all(len(p) == 1 for p in files.values())
    for b, (path,) in files.items():
        keys = pq.read_table(local_path(path), columns=["key"]).column("key").to_numpy()
        assert (bands.bucket_of(keys, grown) == b).all() and (np.diff(keys) >= 0).all()
    assert report(index, "after") == before
    assert "nothing to compact" in ok("--index", index, "index", "compact")
    # the old layout's files gone: the scan reads the new one alone
    assert "removed" in ok("--index", index, "index", "expire")
    assert report(index, "expired") == before
    assert "OK" in ok("--index", index, "index", "check")
    # the next day writes at the grown count, and its report is SQLite's
    for target in (index, lite):
        ok("--index", target, "index", "--inputs", d3)
    count, files = band_buckets(index)
    assert count == grown and max(len(p) for p in files.values()) == 2
    ok("--index", index, "scan", "--inputs", d3, "--output", tmp_path / "ice3")
    ok("--index", lite, "scan", "--inputs", d3, "--output", tmp_path / "lite3")
    assert tree_bytes(tmp_path / "ice3") == tree_bytes(tmp_path / "lite3")
    assert "OK" in ok("--index", index, "index", "check")
