"""A day's append on an Iceberg index killed (SIGKILL) near its end and run again with the same
inputs resumes from the worker results its first try kept (docs/iceberg.md, "A killed day
resumes"): the second try says how many blocks it took from the first, nothing of the
first try is visible before the second commits, and the index and the reports are those of
a run never killed; another input or another config reuses nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, cpt, make_package, run_cli, stdlib_paragraphs, tree_bytes

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

pytestmark = pytest.mark.slow

V1 = SAMPLES / "cpt" / "2026-11-25" / "cpt-v1"
CONFIG = REPO / "config" / "near-dedup.json"
#: Records of the day: six blocks (`ingest.batch.BLOCK_LINES`, `package.BLOCK_BYTES`).
DAY_RECORDS = 4500
#: The first try is killed once it has applied this many blocks (of six).
KILLED_AT = 5


def day_records(salt: str) -> list[dict]:
    paras = stdlib_paragraphs()
    out = []
    for i in range(DAY_RECORDS):
        a, b = paras[i % len(paras)], paras[(7 * i + 3) % len(paras)]
        text = f"{a} {b}" if i % 5 else a  # every fifth: a reprint of a paragraph
        out.append(cpt(f"{salt}-{i:05d}", f"{text} ({salt} {i // 5})"))
    return out


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("days")
    return (make_package(root, "day", {"train": day_records("day")}),
            make_package(root, "other", {"train": day_records("other")}))


def index_cli(index: str, pkg: Path, *extra: str) -> str:
    code, out, err = run_cli("--quiet", "--index", index, "index", "--inputs", pkg, *extra)
    assert (code, err) == (0, ""), err
    return out


def based(tmp_path: Path, name: str) -> str:
    """A new local Iceberg index holding cpt-v1 (the day is its second batch)."""
    index = f"iceberg://{tmp_path / name}"
    index_cli(index, V1)
    return index


def killed_at_block(index: str, pkg: Path, block: int, tmp_path: Path,
                    config: Path = CONFIG, checkpoint_every: int | None = None) -> None:
    """``index --inputs pkg`` in a process group of its own, SIGKILLed once it has applied
    ``block`` blocks (`progress.pause_point` ``index-block-<n>``); with ``checkpoint_every``,
    the batch keeps a checkpoint every that many blocks (`ingest.batch.CHECKPOINT_BLOCKS`)."""
    flag = tmp_path / f"paused-{time.monotonic_ns()}"
    if checkpoint_every is None:
        start = ["-m", "near_dedup_core"]
    else:
        start = ["-c", "import sys; import near_dedup_core.ingest.batch as b; "
                       f"b.CHECKPOINT_BLOCKS = {checkpoint_every}; "
                       "from near_dedup_core import cli, runtime; runtime.begin(); "
                       "sys.exit(cli.main(sys.argv[1:]))"]
    proc = subprocess.Popen(
        [sys.executable, *start, "--quiet", "--config", str(config),
         "--index", index, "index", "--inputs", str(pkg), "--workers", "2"],
        env={**os.environ, "PYTHONPATH": str(REPO),
             "NEAR_DEDUP_PAUSE": f"index-block-{block}:{flag}"},
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the run never paused"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        flag.unlink(missing_ok=True)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def published(index: str) -> dict[str, list[tuple]]:
    """Every row of every data table at the published state, sorted, the batches' times
    left out (and the tables of the files' layout, `tables.LAYOUT_TABLES`)."""
    from near_dedup_core.index_store.iceberg import tables as it
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    pinned = Pinned(index)
    out = {}
    for name in (t for t in it.DATA_TABLES if t not in it.LAYOUT_TABLES):
        columns = tuple(c for c, _ in it.COLUMNS[name] if c != "created_at")
        out[name] = sorted(r for r in pinned.rows(name, columns) if r[0] != "created_at")
    return out


def work_files(index: str) -> list[str]:
    folder = Path(index[len("iceberg://"):])
    return sorted(p.name for p in folder.rglob("*.work"))


def scan_report(index: str, out: Path, *inputs: Path) -> dict[str, bytes]:
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", *inputs,
                           "--output", out)
    assert (code, err) == (0, ""), err
    return tree_bytes(out)


def test_a_killed_day_resumes_from_what_its_first_try_kept(days, tmp_path):
    day, _ = days
    whole = based(tmp_path, "whole")
    alone = index_cli(whole, day, "--workers", "2")
    assert "batch 2 added day" in alone and "resumed" not in alone
    assert work_files(whole) == []  # a batch that commits keeps nothing

    index = based(tmp_path, "killed")
    before = published(index)
    report_before = scan_report(index, tmp_path / "before", V1)
    killed_at_block(index, day, KILLED_AT, tmp_path)
    assert len(work_files(index)) == KILLED_AT  # the blocks it applied
    assert published(index) == before  # nothing of the first try is visible
    assert scan_report(index, tmp_path / "after-kill", V1) == report_before

    again = index_cli(index, day, "--workers", "2")
    assert again == alone.replace(whole, index).rstrip("\n") \
        + f"; resumed: {KILLED_AT} of 6 blocks taken from an interrupted run\n", (again, alone)
    assert work_files(index) == []
    assert published(index) == published(whole)
    assert scan_report(index, tmp_path / "resumed", V1, day) \
        == scan_report(whole, tmp_path / "unkilled", V1, day)
    code, out, err = run_cli("--quiet", "--index", index, "index", "check")
    assert (code, err) == (0, "") and "OK (2 batches" in out, err


def test_another_input_or_config_reuses_nothing(days, tmp_path):
    day, other = days
    whole = based(tmp_path, "whole")
    index_cli(whole, other, "--workers", "2")

    index = based(tmp_path, "killed")
    killed_at_block(index, day, KILLED_AT, tmp_path)
    kept = work_files(index)
    assert len(kept) == KILLED_AT
    # the same index, another package: the day's files are not used, and go at its commit
    out = index_cli(index, other, "--workers", "2")
    assert "batch 2 added other" in out and "resumed" not in out
    assert work_files(index) == []
    assert published(index) == published(whole)

    # the same package, a config that binds the index alike but reads differently
    index = based(tmp_path, "config")
    changed = tmp_path / "config.json"
    changed.write_text(json.dumps({**json.loads(CONFIG.read_text(encoding="utf-8")),
                                   "contamination_threshold": 0.7}), encoding="utf-8")
    killed_at_block(index, day, KILLED_AT, tmp_path, config=changed)
    assert len(work_files(index)) == KILLED_AT
    out = index_cli(index, day, "--workers", "2")
    assert "batch 2 added day" in out and "resumed" not in out
    assert work_files(index) == []


def data_files_of(index: str, table: str) -> set[str]:
    folder = Path(index[len("iceberg://"):]) / "warehouse" / "near_dedup" / table / "data"
    return {str(p) for p in folder.rglob("*.parquet")}


def test_a_killed_day_takes_over_its_first_trys_checkpoint(days, tmp_path, monkeypatch):
    """With a checkpoint every 2 blocks, a day of six blocks killed after block 5 leaves
    checkpoints at 2 and 4 blocks: the second try takes over the one at 4 (its ``contents``,
    ``sources``, ``content_keys`` and band files, published by the second try's commit, not
    written again), reads blocks 1–4 only to check them, takes block 5's kept result and
    works block 6; the index and the reports are those of a run never killed (with the same
    checkpoints), and nothing of the first try is visible before."""
    from near_dedup_core.index_store.iceberg.datafiles import local_path
    from near_dedup_core.index_store.iceberg.snapshot import Pinned
    from near_dedup_core.ingest import batch as ingest_batch

    day, _ = days
    monkeypatch.setattr(ingest_batch, "CHECKPOINT_BLOCKS", 2)
    whole = based(tmp_path, "whole")
    alone = index_cli(whole, day, "--workers", "2")
    assert work_files(whole) == []

    index = based(tmp_path, "killed")
    before = published(index)
    report_before = scan_report(index, tmp_path / "before", V1)
    killed_at_block(index, day, KILLED_AT, tmp_path, checkpoint_every=2)
    kept = work_files(index)
    assert len(kept) == KILLED_AT + 2 and sum(k.startswith("checkpoint-") for k in kept) == 2
    assert published(index) == before  # nothing of the first try is visible
    assert scan_report(index, tmp_path / "after-kill", V1) == report_before
    first_try = {t: data_files_of(index, t) for t in ("contents", "sources", "bands")}

    again = index_cli(index, day, "--workers", "2")
    assert again == alone.replace(whole, index).rstrip("\n") \
        + f"; resumed: {KILLED_AT} of 6 blocks taken from an interrupted run\n", (again, alone)
    assert work_files(index) == []
    pinned = Pinned(index)
    for table, files in first_try.items():  # the checkpoint's files, taken over
        now = {local_path(f.file_path) for f in pinned.data_files(table)}
        assert now & files, table
    assert published(index) == published(whole)
    assert scan_report(index, tmp_path / "resumed", V1, day) \
        == scan_report(whole, tmp_path / "unkilled", V1, day)
    code, out, err = run_cli("--quiet", "--index", index, "index", "check")
    assert (code, err) == (0, "") and "OK (2 batches" in out, err
