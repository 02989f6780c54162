"""The generated history of `bench/scale_history.py`
(docs/measurements/2026-12-04-scale.md): each subcommand that page shows, at 10^4 contents
on the sample packages.

`run` indexes a pool into two Iceberg indexes, appends the generated contents to one, and
scans the pool and a next day against both: the product's readers accept the generated
history (the CLI's scans succeed), no scan reaches a generated content (the reports equal
those against the pool alone) and the appended batch holds the rows it says, in the index's
layout. `bands` + `join` measure the band table alone, `bench.join_ab` the join of two
checkouts in turns.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import orjson
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import REPO, SAMPLES

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

V1 = SAMPLES / "cpt" / "2026-11-25" / "cpt-v1"
V2 = SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"
V3 = SAMPLES / "cpt" / "2026-11-27" / "cpt-v3"


def bench(*args: object) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench.scale_history", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


@pytest.mark.slow
def test_run_appends_a_history_that_scans_read_and_never_reach(tmp_path: Path) -> None:
    from near_dedup_core.index_store.iceberg.bands import bucket_of
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    out = tmp_path / "scale"
    result = bench("run", "--pool", V1, "--day", V2, "--contents", 10_000, "--buckets", 16,
                   "--out", out, "--workers", 1)
    assert result["reports_identical"] and result["day_reports_identical"]
    assert [s["side"] for s in result["scans"]] == ["empty", "history"]
    generated = result["generated"]
    assert (generated["contents"], generated["band_rows"]) == (10_000, 160_000)
    assert generated["band_files"] == 16 and len(result["scans"][0]["load_before"]) == 3

    history, empty = Pinned(f"iceberg://{out / 'history'}"), Pinned(f"iceberg://{out / 'empty'}")
    ids = history.read("contents", ("id",)).column("id").to_numpy()
    real = empty.read("contents", ("id",)).column("id").to_numpy()
    # the pool, 10^4 generated contents, then the day's: ids without gaps
    assert len(ids) == ids.max() and len(ids) - len(real) == 10_000
    first = generated["first_content"]
    new = history.read("contents", ("id", "signature", "text_z", "batch")).filter(
        (pc.field("id") >= first) & (pc.field("id") < first + 10_000))
    assert new.num_rows == 10_000 and new.column("text_z").null_count == 10_000
    assert {len(s) for s in new.column("signature").to_pylist()} == {256}
    assert set(new.column("batch").to_pylist()) == {generated["batch"]}
    bands = history.read("bands", ("key", "content"))
    assert bands.num_rows - empty.read("bands", ("key",)).num_rows == 160_000
    assert history.total_records("sources") - empty.total_records("sources") == 10_000
    for f in history.data_files("bands"):
        keys = pq.read_table(f.file_path[len("file://"):], columns=["key"]).column(
            "key").to_numpy()
        assert (bucket_of(keys, 16) == f.partition[0]).all() and (np.diff(keys) >= 0).all()
    join = result["join"]
    assert join["tasks"] == 16 and join["hits"] == 0 and join["probes"] > 0
    assert result["bytes"]["history"]["bands"] > result["bytes"]["empty"]["bands"]
    # the same join on the history as it is now (the day indexed into both): the day's own
    # rows are hits, since their ids differ between the two indexes; the driver's timings
    again = bench("join", "--probes", f"iceberg://{out / 'empty'}", "--index",
                  f"iceberg://{out / 'history'}")
    assert again["tasks"] == 16 and again["band_rows"] == bands.num_rows and again["hits"] > 0
    assert again["pin_s"] >= 0 and again["plan_s"] >= 0
    # both indexes scanned by another checkout too (here this one), in turns
    more = bench("scans", "--pool", V1, "--out", out, "--buckets", 16, "--workers", 1,
                 "--before", REPO)
    assert [(s["round"], s["side"]) for s in more["more_scans"]] == [
        (1, "empty"), (1, "history"), (1, "empty-before"), (1, "history-before")]
    assert more["more_scans"][2]["code"] == more["more_scans"][3]["code"] == str(REPO)
    # `index find` of the next day's texts on both indexes, and on the history by another
    # checkout too (here this one), in turns: the same answers
    found = bench("find", "--day", V3, "--queries", 20, "--out", out, "--workers", 1,
                  "--rounds", 2, "--before", REPO)
    assert found["answers_identical"] and found["queries"] == 20
    assert found["before"] == str(REPO)
    assert [(r["round"], r["side"]) for r in found["runs"]] == [
        (1, "empty"), (1, "history"), (1, "history-before"),
        (2, "history-before"), (2, "history"), (2, "empty")]
    assert (out / "queries-cpt-v3-20.jsonl").read_text().count("\n") == 20
    # with the release's maintenance after it, the band buckets held at their count
    day = bench("day", "--day", V3, "--out", out, "--buckets", 16, "--workers", 1,
                "--maintain", "--hold-buckets")
    assert day["reports_identical"] and day["day"] == str(V3)
    assert all(day[side][step]["cpu_s"] > 0 for side in ("empty", "history")
               for step in ("index", "scan"))
    for side in ("empty", "history"):
        done = day["maintenance"][side]
        assert done["compact"]["said"].startswith(f"index iceberg://{out / side}: "), done
        assert " expired " in done["expire"]["said"] and done["expire"]["cpu_s"] > 0, done
    saved = orjson.loads((out / "result.json").read_bytes())
    assert saved["more_days"] == [day] and saved["finds"] == [found]
    # the content ids laid out again as `index compact` lays them out (the days added files
    # to their buckets), and asked again: the same answers
    laid = bench("keys", "--out", out)
    assert all("laid out" in laid[side]["done"] for side in ("empty", "history"))
    assert bench("keys", "--out", out) == {side: {"done": None, "s": ANY}
                                           for side in ("empty", "history")}
    assert bench("find", "--day", V3, "--queries", 20, "--out", out,
                 "--workers", 1)["answers_identical"]


def test_bands_and_join(tmp_path: Path) -> None:
    from near_dedup_core.index_store.iceberg.bands import bucket_of

    pool = tmp_path / "pool"
    done = subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                           f"iceberg://{pool}", "index", "--inputs", str(V1)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "bands"
    written = bench("bands", "--out", folder, "--contents", 10_000, "--buckets", 32,
                    "--only", 8, "--first", 1001)
    assert (written["band_rows"], written["rows_written"]) == (160_000, 40_000)
    files = sorted(folder.glob("bucket=*/part.parquet"))
    assert len(files) == 8
    for f in files:
        t = pq.read_table(f)
        keys = t.column("key").to_numpy()
        assert t.num_rows == 5_000 and (np.diff(keys) >= 0).all()
        assert (bucket_of(keys, 32) == int(f.parent.name.split("=")[1])).all()
        assert 1001 <= pc.min(t.column("content")).as_py() <= pc.max(t.column("content")
                                                                         ).as_py() <= 11_000
    join = bench("join", "--probes", f"iceberg://{pool}", "--bands", folder)
    assert (join["tasks"], join["band_rows"], join["hits"]) == (8, 40_000, 0)
    assert join["max_s"] >= join["median_s"] > 0
    # the same join by two checkouts (here this one twice), in turns; then with a hit in
    # every row group (one a file here)
    for extra, hits in (([], 0), (["--hit-every-row-group"], 8)):
        done = subprocess.run([sys.executable, "-m", "bench.join_ab", "--probes",
                               f"iceberg://{pool}", "--bands", str(folder), "--code",
                               str(REPO), "--code", str(REPO), "--rounds", "1", *extra],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        ab = orjson.loads(done.stdout)
        assert ab["probes"] == join["probes"] and len(ab["runs"]) == 2
        for run in ab["runs"]:
            assert (run["tasks"], run["band_rows"]) == (8, 40_000)
            assert run["hits"] >= hits and (run["hits"] == 0) == (hits == 0)
            assert run["total_s"] > 0 and "cpu_s" in run and run["bytes_per_row"] > 0
