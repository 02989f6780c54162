"""The two band tables: a small batch's band rows go to ``bands_recent``, a batch that brings
``bands_recent`` to an eighth of ``bands`` folds it in, scans read both and report exactly
what they report when every row is in ``bands``; an index of schema 2 is upgraded in place by
its next batch; ``index check`` finds a row in the wrong table.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import (
    make_package,
    reverse_every,
    run_cli,
    sigkill_in_the_fold,
    stdlib_paragraphs,
    tree_bytes,
)

from near_dedup_core import index_store
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.index_store import batch as index_batch
from near_dedup_core.index_store import schema
from near_dedup_core.index_store.sqlite_write import open_writable
from near_dedup_core.ingest import batch
from near_dedup_core.ingest.batch import ordered_key_ranges, stable_argsort

PARAS = stdlib_paragraphs()
#: The first batch, then two small ones: 8 texts stay under an eighth of 160 contents, and
#: the 16 of the third batch bring the recent contents to 24, over it.
FIRST, SECOND, THIRD = PARAS[:160], PARAS[160:168], PARAS[168:184]


def docs(prefix: str, texts) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": t} for i, t in enumerate(texts)]


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layout")
    # near copies of day1 and day2 texts and new ones: 10 contents, with day2's 8 still under
    # an eighth of day1's 160, so the pool's band rows stay in bands_recent too
    pool = [reverse_every(t, 40) for t in (*FIRST[:3], *SECOND[:4])] + list(PARAS[190:193])
    return {
        "day1": make_package(root, "day1", {"train": docs("a", FIRST)}),
        "day2": make_package(root, "day2", {"train": docs("b", SECOND)}),
        "day3": make_package(root, "day3", {"train": docs("c", THIRD)}),
        "pool": make_package(root, "pool", {"train": docs("p", pool)}),
    }


def index(path: Path, *inputs: Path) -> str:
    code, out, err = run_cli("--quiet", "--index", path, "index", "--inputs", *inputs)
    assert (code, err) == (0, ""), err
    return out


def check(path: Path) -> None:
    code, out, err = run_cli("--index", path, "index", "check")
    assert (code, err) == (0, "") and "OK" in out, err


def scan(path: Path, pool: Path, out: Path) -> dict[str, bytes]:
    code, _, err = run_cli("--quiet", "--index", path, "scan", "--inputs", pool,
                           "--output", out)
    assert (code, err) == (0, ""), err
    return tree_bytes(out)


def layout(path: Path) -> tuple[int, int, int]:
    """(rows in bands, rows in bands_recent, meta bands_merged_through)."""
    with sqlite3.connect(path) as con:
        (merged,) = con.execute("SELECT value FROM meta WHERE key = ?",
                                (index_store.BANDS_MERGED_THROUGH,)).fetchone()
        return (con.execute("SELECT COUNT(*) FROM bands").fetchone()[0],
                con.execute("SELECT COUNT(*) FROM bands_recent").fetchone()[0], int(merged))


def max_content(path: Path) -> int:
    with sqlite3.connect(path) as con:
        return con.execute("SELECT MAX(id) FROM contents").fetchone()[0]


def test_small_batches_go_to_bands_recent_and_a_larger_one_folds_them(packages, tmp_path):
    path = tmp_path / "index.sqlite"
    bands = NearDedupConfig().bands
    index(path, packages["day1"])
    assert layout(path) == (bands * len(FIRST), 0, len(FIRST))
    out = index(path, packages["day2"])
    assert "merged" not in out
    assert layout(path) == (bands * len(FIRST), bands * len(SECOND), len(FIRST))
    check(path)
    code, out, err = run_cli("--index", path, "index", "--inputs", packages["day3"])
    assert code == 0 and f"{bands * len(SECOND):,} lookup keys of earlier batches merged into " \
        "the main lookup table" in out
    assert f"index: merging the lookup keys of {len(SECOND)} texts of earlier batches into the " \
           f"main lookup table (once in a while; this batch takes longer)\n" in err, err
    total = len(FIRST) + len(SECOND) + len(THIRD)
    assert layout(path) == (bands * total, 0, total) and max_content(path) == total
    check(path)


def test_a_scan_reads_both_tables_and_reports_as_if_all_were_in_bands(packages, tmp_path,
                                                                      monkeypatch):
    split = tmp_path / "split.sqlite"
    index(split, packages["day1"])
    index(split, packages["day2"])
    index(split, packages["pool"])
    assert layout(split)[1] > 0  # day2 and the pool in bands_recent
    monkeypatch.setattr(index_batch, "RECENT_SHARE", 0.0)  # every batch writes bands
    whole = tmp_path / "whole.sqlite"
    for name in ("day1", "day2", "pool"):
        index(whole, packages[name])
    assert layout(whole)[1] == 0
    a = scan(split, packages["pool"], tmp_path / "a")
    b = scan(whole, packages["pool"], tmp_path / "b")
    assert a == b
    matched = {m["sample_id"] for line in a["relations.jsonl"].splitlines()
               for m in orjson.loads(line)["match_sources"]}
    # every near copy found its original, in bands (day1) and in bands_recent (day2)
    assert matched == {"a0", "a1", "a2", "b0", "b1", "b2", "b3"}, matched


def test_a_scan_of_the_newest_batch_leaves_bands_recent_unprobed_when_it_holds_only_the_pool(
        packages, tmp_path, monkeypatch):
    path = tmp_path / "index.sqlite"
    index(path, packages["day1"])
    index(path, packages["pool"])
    assert layout(path)[1:] == (NearDedupConfig().bands * 10, len(FIRST))
    statements: list[str] = []
    reader = index_store.connect_reader

    def traced(p: Path) -> sqlite3.Connection:
        con = reader(p)
        con.set_trace_callback(statements.append)
        return con

    monkeypatch.setattr(index_store.snapshot, "connect_reader", traced)
    a = scan(path, packages["pool"], tmp_path / "a")
    probes = [s for s in statements if "json_each" in s]
    assert probes and all("main.bands b" in s and "bands_recent" not in s for s in probes)
    monkeypatch.setattr(index_batch, "RECENT_SHARE", 0.0)  # every batch writes bands
    whole = tmp_path / "whole.sqlite"
    for name in ("day1", "pool"):
        index(whole, packages[name])
    assert a == scan(whole, packages["pool"], tmp_path / "b")
    matched = {m["sample_id"] for line in a["relations.jsonl"].splitlines()
               for m in orjson.loads(line)["match_sources"]}
    assert matched == {"a0", "a1", "a2"}, matched


@pytest.mark.parametrize(("ids", "run"), [
    ([], (1, 0)), ([7], (7, 7)), ([1, 2, 3, 9, 10], (1, 3)), ([1, 5, 6, 7, 8, 20], (5, 8)),
    ([-3, -2, 4], (-3, -2))])
def test_longest_run_of_consecutive_ids(ids, run):
    assert index_store.longest_run(np.asarray(ids, dtype=np.int64)) == run


def _downgrade(path: Path) -> None:
    """What an index written by the tool before ``bands_recent`` looks like."""
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE bands_recent")
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        con.execute("DELETE FROM meta WHERE key = ?", (index_store.BANDS_MERGED_THROUGH,))
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_an_index_of_schema_2_is_read_by_nothing_and_upgraded_by_the_next_batch(packages,
                                                                                 tmp_path):
    path = tmp_path / "index.sqlite"
    index(path, packages["day1"])
    _downgrade(path)
    before = path.read_bytes()
    for argv in (["scan", "--inputs", packages["pool"], "--output", tmp_path / "r"],
                 ["index", "check"]):
        code, _, err = run_cli("--index", path, *argv)
        assert code == 1 and err.count("\n") == 1, err
        assert "schema version 2, this tool reads 3; the next `near-dedup index` run " \
               "upgrades it in place" in err, err
    code, _, err = run_cli("--quiet", "--index", path, "index", "--inputs", packages["day1"])
    assert (code, err) == (0, ""), err  # nothing to do: nothing written, still schema 2
    assert path.read_bytes() == before and not (tmp_path / "r").exists()
    index(path, packages["day2"])
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                           ).fetchone() == (index_store.SCHEMA_VERSION,)
    bands = NearDedupConfig().bands
    assert layout(path) == (bands * len(FIRST), bands * len(SECOND), len(FIRST))
    check(path)


@pytest.mark.parametrize("sql", [
    "INSERT INTO bands_recent SELECT key + 1, content FROM bands LIMIT 1",
    "INSERT INTO bands SELECT key + 1, content FROM bands_recent LIMIT 1",
], ids=["merged-content-in-recent", "recent-content-in-bands"])
def test_index_check_finds_a_band_row_in_the_wrong_table(packages, tmp_path, sql):
    path = tmp_path / "index.sqlite"
    index(path, packages["day1"])
    index(path, packages["day2"])
    with sqlite3.connect(path) as con:
        con.execute(sql)
    code, _, err = run_cli("--index", path, "index", "check")
    assert code == 1 and err.count("\n") == 1, err
    assert f"a band row is in the wrong table for bands_merged_through = {len(FIRST)} (1 rows)" \
        in err, err


def rows(path: Path) -> dict[str, list]:
    with sqlite3.connect(path) as con:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("meta", "batches", "bands", "bands_recent")}


@pytest.mark.slow
def test_a_sigkill_in_the_fold_leaves_the_index_as_before(packages, tmp_path):
    path = tmp_path / "index.sqlite"
    index(path, packages["day1"])
    index(path, packages["day2"])
    before = rows(path)
    sigkill_in_the_fold(path, packages["day3"])
    assert rows(path) == before
    check(path)
    assert "merged into the main lookup table" in index(path, packages["day3"])
    assert layout(path)[1] == 0


@pytest.mark.parametrize("keys_are", ["hashes", "sharing top bits", "a narrow range"])
def test_band_rows_are_ordered_as_numpys_stable_argsort_orders_them(keys_are):
    """The order a batch writes its band rows in: by key, then position (content row ids grow
    along the batch), whatever the keys: uniform hashes with repeats (near copies share band
    keys), distinct keys in a few runs of equal top bits (sorted again), or keys from a narrow
    range, with hundreds of such runs (numpy's stable argsort)."""
    rng = np.random.default_rng(7)
    n = 50_000
    keys = rng.integers(-2**63, 2**63 - 1, size=n, dtype=np.int64)
    keys[rng.integers(0, n, n // 3)] = keys[rng.integers(0, n, n // 3)]
    if keys_are == "sharing top bits":  # 40 runs of three keys, later positions smaller
        at = np.sort(rng.choice(n, size=(40, 3), replace=False), axis=1)
        base = keys[at[:, 0]] & ~np.int64(0xFFFF)
        keys[at] = base[:, None] | np.asarray([2, 1, 0], dtype=np.int64)
    elif keys_are == "a narrow range":
        keys = rng.integers(0, 2**24, size=n, dtype=np.int64)
    assert np.array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("keys_are", ["band keys", "signed hashes", "a narrow range", "one key"])
def test_key_ranges_give_the_stable_order_range_after_range(keys_are, monkeypatch):
    """The batch's band rows as the index writes them: key ranges (several here, as for a
    large batch), every key of a range below every key of the next, together exactly the rows
    in ``np.argsort(kind="stable")`` order, whatever the spread of the keys."""
    monkeypatch.setattr(batch, "KEY_RANGE_ROWS", 4096)
    rng = np.random.default_rng(11)
    n = 40_000
    keys = {"band keys": rng.integers(0, 2**63 - 1, size=n, dtype=np.int64),
            "signed hashes": rng.integers(-2**63, 2**63 - 1, size=n, dtype=np.int64),
            "a narrow range": rng.integers(5, 300, size=n, dtype=np.int64),
            "one key": np.full(n, 42, dtype=np.int64)}[keys_are]
    keys[rng.integers(0, n, n // 3)] = keys[rng.integers(0, n, n // 3)]
    contents = np.repeat(np.arange(1, n // 16 + 1, dtype=np.int64), 16)
    ranges = list(ordered_key_ranges(keys, contents))
    assert len(ranges) == batch.MAX_KEY_RANGES
    for (low, _), (high, _) in zip(ranges, ranges[1:], strict=False):
        assert len(low) == 0 or len(high) == 0 or low.max() < high.min()
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(np.concatenate([k for k, _ in ranges]), keys[order])
    assert np.array_equal(np.concatenate([c for _, c in ranges]), contents[order])
    if keys_are == "band keys":
        assert min(map(len, (k for k, _ in ranges))) > n // batch.MAX_KEY_RANGES // 2


@pytest.mark.parametrize("rows", [0, 6, 7, 8, 50])
def test_add_sources_writes_every_row_once_in_order_across_statements(rows, tmp_path,
                                                                     monkeypatch):
    """Source rows go in ``SOURCE_ROWS_PER_INSERT`` to a statement, then the rest one by one:
    every row lands once, with its id in the rows' order, whatever the count's remainder."""
    monkeypatch.setattr(index_batch, "SOURCE_ROWS_PER_INSERT", 7)
    given = [(None, 100 + k, 1, f"s{k}", "train", "data/a.jsonl", k + 1, k, bytes([k]) * 32,
              None if k % 3 else "web", None if k % 2 else '{"url":"u"}') for k in range(rows)]
    path = tmp_path / "sources.sqlite"
    engine = open_writable(path, staged=True)
    try:
        with engine.begin() as conn:
            schema.sources.create(conn)
            store = index_batch.BatchTransaction(conn)
            store.add_sources(given[:rows // 2])  # two calls: ids go on from the first
            store.add_sources(given[rows // 2:])
    finally:
        engine.dispose()
    with sqlite3.connect(path) as con:
        written = con.execute("SELECT * FROM sources ORDER BY id").fetchall()
    assert written == [(k + 1, *row[1:]) for k, row in enumerate(given)]


@pytest.mark.parametrize("rows", [0, 6, 7, 49, 50, 1003])
def test_add_bands_writes_every_row_once_across_statements_and_calls(rows, tmp_path,
                                                                      monkeypatch):
    """Band rows go in by statements of ``BAND_ROWS_PER_INSERT`` rows, several statements
    per call of the driver, then the rest one by one: every row lands once, whatever the
    count's remainder against either size."""
    monkeypatch.setattr(index_batch, "BAND_ROWS_PER_INSERT", 7)
    monkeypatch.setattr(index_batch, "BAND_ROWS_PER_CALL", 50)
    rng = np.random.default_rng(5)
    keys = np.sort(rng.integers(-2**63, 2**63 - 1, size=rows, dtype=np.int64))
    contents = rng.integers(1, 10**6, size=rows, dtype=np.int64)
    path = tmp_path / "bands.sqlite"
    engine = open_writable(path, staged=True)
    try:
        with engine.begin() as conn:
            schema.bands_recent.create(conn)
            index_batch.BatchTransaction(conn).add_bands("bands_recent", keys, contents)
    finally:
        engine.dispose()
    with sqlite3.connect(path) as con:
        written = con.execute("SELECT key, content FROM bands_recent").fetchall()
    assert written == sorted(zip(keys.tolist(), contents.tolist(), strict=True))
