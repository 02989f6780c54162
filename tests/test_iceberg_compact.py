"""`index compact` by size tiers (`iceberg.compact`, docs/iceberg.md "Compaction"): the rule
itself (which files merge, how many a bucket keeps, how often a row is rewritten over a
thousand days), and on a real index: the files the rule picks are the ones merged, in the
band table, ``content_keys`` and ``raw_texts``, the reports stay SQLite's, and a second
compaction finds nothing to merge."""

from __future__ import annotations

import math
import random

import pyarrow.parquet as pq
import pytest
from test_iceberg_keyed import day, ice, ok, texts

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_core.index_store.iceberg.compact import FANOUT, merges, runs, tier  # noqa: E402
from near_dedup_core.index_store.iceberg.keyed import keyed_files  # noqa: E402
from near_dedup_core.index_store.iceberg.snapshot import Pinned  # noqa: E402


def applied(sizes: list[int], groups: list[list[int]]) -> list[int]:
    """The file sizes after ``groups`` are merged."""
    merged = {i for g in groups for i in g}
    return [s for i, s in enumerate(sizes) if i not in merged] + \
        [sum(sizes[i] for i in g) for g in groups]


def test_tiers_are_powers_of_the_fanout():
    assert [tier(r, 4) for r in (0, 1, 3, 4, 15, 16, 63, 64, 4 ** 10 - 1, 4 ** 10)] == \
        [0, 0, 0, 1, 1, 2, 2, 3, 9, 10]


def test_fewer_than_fanout_files_of_a_tier_stay_and_fanout_merge():
    assert merges([100, 100, 100], 4) == []
    assert merges([100, 100, 100, 100], 4) == [[0, 1, 2, 3]]
    assert merges([5, 100, 100, 100, 100, 10 ** 6], 4) == [[1, 2, 3, 4]]
    with pytest.raises(ValueError, match="fanout of at least 2"):
        merges([1, 2], 1)


def test_a_merge_that_fills_the_tier_above_takes_it_along_and_rewrites_each_file_once():
    # four files of tier 2 (16..63) make 160 rows, tier 3 (64..255), where three wait
    assert merges([40, 40, 40, 40, 100, 100, 100], 4) == [[0, 1, 2, 3, 4, 5, 6]]


def test_after_a_compaction_every_tier_holds_fewer_than_fanout_and_nothing_is_left():
    rng = random.Random(7)
    for _ in range(200):
        sizes = [int(rng.lognormvariate(8, 3)) for _ in range(rng.randrange(1, 60))]
        groups = merges(sizes)
        assert all(len(g) >= 2 and g == sorted(g) for g in groups)
        assert sorted(i for g in groups for i in g) == sorted({i for g in groups for i in g})
        after = applied(sizes, groups)
        assert sum(after) == sum(sizes)
        held: dict[int, int] = {}
        for s in after:
            held[tier(s)] = held.get(tier(s), 0) + 1
        assert max(held.values()) < FANOUT
        assert merges(after) == []
        # the order of the files does not matter
        assert sorted(merges(list(reversed(sizes)))) == \
            sorted(sorted(len(sizes) - 1 - i for i in g) for g in groups)


@pytest.mark.parametrize("history", [10 ** 6, 10 ** 8])
def test_a_thousand_days_rewrite_a_few_days_each_and_keep_few_files(history):
    """A bucket of ``history`` rows in one file gains a day of about 1,000 rows a day and is
    compacted after each: the rows rewritten, over the thousand days, are a few times the
    days' rows (about one per tier between the day's and the history's), not a thousand
    times the history, and the bucket never holds more than (FANOUT - 1) files of a tier."""
    rng = random.Random(history)
    sizes = [history]
    rewritten = added = most = 0
    for _ in range(1000):
        sizes.append(rng.randrange(900, 1100))
        added += sizes[-1]
        groups = merges(sizes)
        rewritten += sum(sizes[i] for g in groups for i in g)
        sizes = applied(sizes, groups)
        most = max(most, len(sizes))
    tiers_between = math.log(history / 1000, FANOUT)
    assert rewritten <= (tiers_between + 1) * added, (rewritten / added, tiers_between)
    assert most <= (FANOUT - 1) * (math.ceil(tiers_between) + 2), most


def test_a_compaction_merges_the_files_the_tiers_pick_and_the_reports_stay_sqlites(tmp_path):
    """Five batches of the same size: in each band bucket, each ``content_keys`` run and the
    ``raw_texts`` files, what `merges` picks is merged and nothing else; the reports before
    and after are SQLite's; the next compaction merges nothing; `index check` passes."""
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    days = [day(tmp_path, f"t{n}", texts(40, offset=40 * n), f"2026-11-{20 + n}T00:00:00Z")
            for n in range(5)]
    for d in days:
        for target in (index, lite):
            ok("--index", target, "index", "--inputs", d)

    def band_sizes(pinned: Pinned) -> dict[int, list[int]]:
        of: dict[int, list[int]] = {}
        for f in pinned.data_files("bands"):
            of.setdefault(int(f.partition[0]), []).append(int(f.record_count))
        return of

    def report(target: object, name: str) -> dict:
        ok("--index", target, "scan", "--inputs", *days, "--output", tmp_path / name)
        return {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())
                if p.is_file()}

    before = report(lite, "lite")
    assert report(index, "before") == before
    pinned = Pinned(index)
    bands = band_sizes(pinned)
    expected = {b: sorted(applied(s, merges(s))) for b, s in bands.items()}
    assert any(len(expected[b]) < len(s) for b, s in bands.items())  # something merges
    key_runs = runs(keyed_files(pinned, "content_keys"))
    assert len(key_runs) == 5 and merges([sum(f.rows for f in r) for r in key_runs])
    raw = keyed_files(pinned, "raw_texts")
    assert len(raw) == 5 and merges([f.rows for f in raw]) == [[0, 1, 2, 3, 4]]

    out = ok("--index", index, "index", "compact")
    assert "compacted" in out and "raw texts' 5 files merged into 1 file" in out, out
    pinned = Pinned(index)
    assert {b: sorted(s) for b, s in band_sizes(pinned).items()} == expected
    assert len(runs(keyed_files(pinned, "content_keys"))) == 1
    for f in keyed_files(pinned, "raw_texts") + keyed_files(pinned, "content_keys"):
        column = pq.read_table(f.path.removeprefix("file://")).column(0).to_pylist()
        assert column == sorted(column)  # one sorted run
    assert report(index, "after") == before
    again = ok("--index", index, "index", "compact")
    assert "nothing to compact" in again and "the content ids in 1 file of 1 run" in again
    assert "OK (5 batches" in ok("--index", index, "index", "check")
