"""`bench/day_cost.py` (docs/benchmarks.md, docs/measurements/2026-12-06-day.md) at a small
scale: both indexes get the base package, the history index the generated contents (their
``content_keys`` in the index's layout, so a day's lookups read them by bucket), and each
measured day is indexed into both, in turns."""

from __future__ import annotations

import orjson
import pytest

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_core.index_store.iceberg.keyed import (
    KeyedFiles,  # noqa: E402
    content_lookup,  # noqa: E402
)
from near_dedup_core.index_store.iceberg.snapshot import Pinned  # noqa: E402

from bench import day_cost  # noqa: E402


@pytest.mark.slow  # eleven fresh interpreters: the measured `index` runs and the packages'
def test_day_cost_measures_a_day_against_an_empty_index_and_a_generated_history(tmp_path):
    out = tmp_path / "day-cost"
    # in this process (its `index` runs are processes of their own, as measured)
    day_cost.main(["--contents", "3000", "--out", str(out), "--base", "60", "--day-records",
                   "40", "--days", "1"])
    result = orjson.loads((out / "result.json").read_bytes())
    assert [(r["day"], r["index"]) for r in result["runs"]] == [(1, "empty"), (1, "history")]
    assert all(r["cpu_s"] > 0 and r["peak_tree_rss_mib"] > 0 for r in result["runs"])
    assert len(result["ratio_cpu_s"]) == 1
    history = Pinned(f"iceberg://{out / 'history'}")
    contents = history.total_records("contents")
    assert contents > 3000
    assert history.total_records("content_keys") == contents
    assert isinstance(content_lookup(history), KeyedFiles)
    # later days on the same pair, run by a given checkout's code (here this one): the
    # packages of the days before are not remade, the runs go to their own result file
    day_cost.main(["--pair", "own", f"iceberg://{out / 'empty'}", f"iceberg://{out / 'history'}",
                   "--out", str(out), "--base", "60", "--day-records", "40", "--days", "1",
                   "--first-day", "3", "--code", str(day_cost.ROOT)])
    later = orjson.loads((out / "result-3.json").read_bytes())
    assert later["code"] == str(day_cost.ROOT)
    assert [(r["day"], r["index"]) for r in later["runs"]] == [(3, "empty"), (3, "history")]
    assert not (out / "pkg" / "day-2").exists() and (out / "pkg" / "day-3").is_dir()
    assert Pinned(f"iceberg://{out / 'history'}").total_records("contents") > contents
    # on the same states: each run's day appended, then the index put back as it was
    states = {side: Pinned(f"iceberg://{out / side}").state.n for side in ("empty", "history")}
    day_cost.main(["--pair", "own", f"iceberg://{out / 'empty'}", f"iceberg://{out / 'history'}",
                   "--out", str(out), "--base", "60", "--day-records", "40", "--days", "1",
                   "--first-day", "4", "--same-state"])
    same = orjson.loads((out / "result-4.json").read_bytes())
    assert [(r["day"], r["index"]) for r in same["runs"]] == [(4, "history"), (4, "empty")]
    assert all(r["cpu_s"] > 0 for r in same["runs"])
    assert {side: Pinned(f"iceberg://{out / side}").state.n for side in states} == states
    assert not list(out.glob("*/catalog.db.same-state"))
