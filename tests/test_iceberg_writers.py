"""Writers of an Iceberg index that share no lock (docs/iceberg.md, "Commits"): two `index`
processes racing on one shared catalog (PostgreSQL, the warehouse on moto's S3 server or in
a folder) end with the index and the reports of the serial order in which their commits
landed; a writer beaten at every try stops with one line; a day killed on an S3 warehouse
resumes from the work files it kept in the bucket.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, refused, run_cli, tree_bytes

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")
pytest.importorskip("s3fs", reason="pip install 'near-dedup[s3]'")
from pg_server import PASSWORD, require_bindir  # noqa: E402

pytestmark = pytest.mark.slow

require_bindir()

CPT = SAMPLES / "cpt"
V1 = CPT / "2026-11-25" / "cpt-v1"
V2 = CPT / "2026-11-26" / "cpt-v2"
V3 = CPT / "2026-11-27" / "cpt-v3"


@pytest.fixture(scope="module")
def env(shared_catalog):
    """A bucket of moto's S3 server and the PostgreSQL server for the module (conftest.py,
    as tests/test_iceberg_remote.py); the catalog's password in PGPASSWORD."""
    return shared_catalog


def new_location(env, warehouse: str, tmp_path: Path, name: str) -> str:
    """A new index: a fresh catalog database and a fresh prefix (or folder)."""
    s3, pg = env
    catalog = pg.create_database().replace(f":{PASSWORD}@", "@")
    if warehouse == "s3":
        return f"iceberg+s3://{s3.bucket}/{tmp_path.name}-{name}?catalog={catalog}"
    return f"iceberg://{tmp_path / name}?catalog={catalog}"


def ok(index: str | Path, *inputs: Path) -> str:
    code, out, err = run_cli("--quiet", "--index", index, "index", "--inputs", *inputs)
    assert (code, err) == (0, ""), err
    return out


def scan_ok(index: str | Path, out: Path, *inputs: Path) -> dict[str, bytes]:
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", *inputs,
                           "--output", out)
    assert (code, err) == (0, ""), err
    return tree_bytes(out)


#: Columns that hold the time of a run (they differ between any two runs).
TIMES = {"batches": "created_at", "commits": "at"}


def published_rows(index: str) -> dict[str, list[tuple]]:
    """Every row of every table at the published state, sorted (the ``commits`` rows too),
    the times of the runs left out (and the ``meta`` row ``created_at``, and the tables of
    the files' layout, `tables.LAYOUT_TABLES`): what two indexes built by the same batches in
    the same order hold alike, byte for byte."""
    from near_dedup_core.index_store.iceberg import tables as it
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    pinned = Pinned(index)
    out = {}
    for name in (t for t in it.DATA_TABLES if t not in it.LAYOUT_TABLES):
        columns = tuple(c for c, _ in it.COLUMNS[name] if c != TIMES.get(name))
        rows = pinned.rows(name, columns)
        if name == "meta":
            rows = [r for r in rows if r[0] != "created_at"]
        out[name] = sorted(rows)
    commits = it.read(pinned.tables[it.COMMITS], pinned.state.commit_snapshot, ("n", "op"))
    out["commits"] = sorted(zip(*(commits.column(c).to_pylist() for c in ("n", "op")),
                                strict=True))
    return out


def start_index(index: str, pkg: Path, pause: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if pause is not None:
        env["NEAR_DEDUP_PAUSE"] = pause
    return subprocess.Popen([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                             index, "index", "--inputs", str(pkg)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(flag: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while not flag.exists():
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1])
        assert time.monotonic() < deadline, "the writer never paused"
        time.sleep(0.05)


def test_batches_in_one_process_find_the_raw_texts_of_the_batch_just_before(env, tmp_path):
    """Three `index` runs in one process, one right after the other, on a shared catalog
    (v1, v3, then v2, whose every text v1 or v3 holds): the last batch finds each of its raw
    texts, v3's among them, and adds no ``raw_texts`` row; no (text_sha256, scope) pair is
    held twice."""
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    index = new_location(env, "folder", tmp_path, "index")
    ok(index, V1)
    ok(index, V3)
    before = Pinned(index).rows("raw_texts", ("text_sha256", "scope", "content"))
    out = ok(index, V2)
    assert "batch 3 added cpt-v2: 73 records, 0 new texts, 73 repeats" in out, out
    after = Pinned(index).rows("raw_texts", ("text_sha256", "scope", "content"))
    assert len({(sha, scope) for sha, scope, _ in after}) == len(after) == len(before) == 90


@pytest.fixture(scope="module")
def serial(env, tmp_path_factory) -> dict:
    """The serial order v1, v3, v2 on a shared catalog (a folder warehouse), for the races of
    both warehouses to be compared with: its location, the summary of the batch of v2, the
    rows it publishes, a scan's report."""
    tmp_path = tmp_path_factory.mktemp("serial")
    index = new_location(env, "folder", tmp_path, "serial")
    ok(index, V1)
    ok(index, V3)
    alone = ok(index, V2)
    assert "batch 3 added cpt-v2" in alone
    return {"index": index, "alone": alone, "rows": published_rows(index),
            "report": scan_ok(index, tmp_path / "serial-report", V1, V2, V3)}


@pytest.mark.parametrize("warehouse", ["s3", "folder"])
def test_the_writer_that_loses_the_commit_runs_again_on_the_new_state(env, serial, warehouse,
                                                                      tmp_path):
    """Writer A (cpt-v2) pauses with every data table appended, just before its ``commits``
    row (`progress.pause_point` ``index-publish``); writer B (cpt-v3) runs whole meanwhile
    and lands as batch 2. A's commit is then refused; it reads the new state, runs its batch
    again and lands as batch 3, with exit 0 and the summary of that batch. The index holds,
    row for row, what the serial order v1, v3, v2 gives (`serial`, on either warehouse the
    same rows), and a scan's report is that order's, byte for byte."""
    alone = serial["alone"]
    raced = new_location(env, warehouse, tmp_path, "raced")
    ok(raced, V1)
    flag = tmp_path / "paused"
    first = start_index(raced, V2, f"index-publish:{flag}")
    try:
        wait_for(flag, first)
        second = start_index(raced, V3)
        out, err = second.communicate(timeout=300)
        assert (second.returncode, err) == (0, ""), err
        assert "batch 2 added cpt-v3" in out
    finally:
        flag.unlink(missing_ok=True)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert err == "paused at index-publish\n", err
    assert out == alone.replace(serial["index"], raced), (out, alone)

    assert published_rows(raced) == serial["rows"]
    assert scan_ok(raced, tmp_path / "raced-report", V1, V2, V3) == serial["report"]
    code, out, err = run_cli("--quiet", "--index", raced, "index", "check")
    assert (code, err) == (0, "") and "OK (3 batches" in out, err


def test_a_writer_beaten_at_every_try_stops_with_one_line(monkeypatch, tmp_path):
    """A commit refused at every try (another writer always first: here the commit of the
    local catalog made to fail as a lost race does): `run.COMMIT_TRIES` tries, then one line
    naming the index, exit 1, the index as it was."""
    from near_dedup_core.index_store.iceberg import batch, lost_commit
    from near_dedup_core.ingest import run

    index = f"iceberg://{tmp_path / 'ice'}"
    ok(index, V1)
    before = published_rows(index)
    tries = []

    def beaten(pinned, *args):
        tries.append(pinned.state.n)
        raise lost_commit(pinned.location)

    monkeypatch.setattr(batch, "publish", beaten)
    monkeypatch.setattr(run, "RETRY_PAUSE", 0.0)
    line = refused(["--quiet", "--index", index, "index", "--inputs", V2],
                   f"index {index}: another writer committed first {run.COMMIT_TRIES} times",
                   "nothing of this run was published; run it again")
    assert re.search(r"\d+ times", line)
    assert tries == [1] * run.COMMIT_TRIES
    monkeypatch.undo()
    assert published_rows(index) == before
    assert "batch 2 added cpt-v2" in ok(index, V2)


def test_a_killed_day_on_s3_resumes_from_the_bucket(env, tmp_path):
    """The work files of a day killed on an S3 warehouse are objects under the index's prefix;
    the rerun takes them, removes them at its commit, and publishes the rows of a run never
    killed."""
    from helpers import make_package
    from test_iceberg_resume import KILLED_AT, day_records, killed_at_block

    s3, _ = env
    day = make_package(tmp_path, "day", {"train": day_records("day")})
    whole = f"iceberg://{tmp_path / 'whole'}"
    ok(whole, V1)
    ok(whole, day)
    index = new_location(env, "s3", tmp_path, "resumed")
    prefix = index.split("?", 1)[0].split("/", 3)[3]
    ok(index, V1)
    killed_at_block(index, day, KILLED_AT, tmp_path)
    assert len([k for k in s3.keys(prefix) if k.endswith(".work")]) == KILLED_AT
    assert f"; resumed: {KILLED_AT} of 6 blocks taken from an interrupted run" in ok(index, day)
    assert [k for k in s3.keys(prefix) if "/_resume/" in k] == []
    assert published_rows(index) == published_rows(whole)
