"""The Iceberg index backend (`--index iceberg:///folder`, docs/iceberg.md).

The same packages indexed into SQLite and into Iceberg tables give byte-identical reports,
also after `index compact`; a SIGKILL between the data tables' appends and the commit leaves
an index whose next scan is the report of before; `index check` finds a missing or altered
data file and lists orphan files; two concurrent appends both land, in order; a scan during
an append reads the state it pinned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import (
    REPO,
    SAMPLES,
    drop_every,
    make_package,
    refused,
    reverse_every,
    run_cli,
    run_doc_block,
    scan_with_an_append_meanwhile,
    stdlib_paragraphs,
    tree_bytes,
)

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

CPT = SAMPLES / "cpt"
V1 = CPT / "2026-11-25" / "cpt-v1"
V2 = CPT / "2026-11-26" / "cpt-v2"
V3 = CPT / "2026-11-27" / "cpt-v3"
P = stdlib_paragraphs()


def ice(folder: Path) -> str:
    return f"iceberg://{folder.resolve()}"


def ok(index: str | Path, *inputs: Path, workers: int = 1, executor: str = "local") -> str:
    code, out, err = run_cli("--quiet", "--index", index, "index", "--inputs", *inputs,
                             "--workers", workers, "--executor", executor)
    assert (code, err) == (0, ""), err
    return out


def scan_ok(index: str | Path, out: Path, *inputs: Path, workers: int = 1,
            executor: str = "local") -> dict[str, bytes]:
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", *inputs,
                           "--output", out, "--workers", workers, "--executor", executor)
    assert (code, err) == (0, ""), err
    return tree_bytes(out)


def maintain(index: str, *action: str) -> str:
    code, out, err = run_cli("--quiet", "--index", index, "index", *action)
    assert (code, err) == (0, ""), err
    return out


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> tuple[Path, Path, Path]:
    """6,000 real-text documents over two versions of 3,000, with near and exact copies, and
    a third version of 600 edited copies. Each text is two stdlib paragraphs: 4,500
    distinct pairs."""
    root = tmp_path_factory.mktemp("iceberg-packages")
    n = len(P)
    texts = [f"{P[i % n]} {P[(i + i // n + 1) % n]}" for i in range(4500)]
    assert len(set(texts)) == 4500
    v1 = make_package(root, "cpt-v1", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[:3000])]},
        shard_records=1000)
    edited = [drop_every(t, 9) if i % 3 == 0 else reverse_every(t, 13) if i % 3 == 1 else t
              for i, t in enumerate(texts[:1500])]
    v2 = make_package(root, "cpt-v2", {"train": [
        {"id": f"b{i}", "text": t, "domain": "docs"}
        for i, t in enumerate(edited + texts[3000:4500])]},
        created_at="2026-11-26T00:00:00Z", shard_records=1000)
    v3 = make_package(root, "cpt-v3", {"train": [
        {"id": f"c{i}", "text": drop_every(t, 7), "domain": "docs"}
        for i, t in enumerate(texts[100:700])]}, created_at="2026-11-27T00:00:00Z")
    return v1, v2, v3


# --------------------------------------------------------------------------- same reports


def test_the_bundled_days_give_byte_identical_reports(tmp_path):
    index, lite = ice(tmp_path / "cpt-ice"), tmp_path / "cpt.sqlite"
    for day in (V1, V2, V3):
        assert ok(index, day).replace(index, "X") == ok(lite, day).replace(str(lite), "X")
    for name, pool in (("v2", (V1, V2)), ("v3", (V2, V3))):
        assert scan_ok(index, tmp_path / f"ice-{name}", *pool) == \
            scan_ok(lite, tmp_path / f"lite-{name}", *pool)
    assert "already indexed" in ok(index, V3)


_PAUSE_BEFORE_COMMIT = """
import os, sys, time
from near_dedup_core import cli
from near_dedup_core.index_store.iceberg import batch
publish = batch.publish
def pause_then_publish(*args):
    print("paused before the commit", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("PAUSE_SECONDS", "600")))
    publish(*args)
batch.publish = pause_then_publish
sys.exit(cli.main(sys.argv[1:]))
"""


def start_paused(index: str, pkg: Path, seconds: float = 600) -> subprocess.Popen:
    """``index --inputs pkg`` in a process of its own, paused after every data table's
    append, before the commit."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PAUSE_SECONDS": str(seconds)}
    proc = subprocess.Popen([sys.executable, "-c", _PAUSE_BEFORE_COMMIT, "--quiet", "--index",
                             index, "index", "--inputs", str(pkg)], env=env,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    line = proc.stderr.readline() if proc.stderr else b""
    assert b"paused before the commit" in line, (line, proc.poll(),
                                                 proc.stderr.read() if proc.stderr else b"")
    return proc


@pytest.mark.slow
def test_6000_real_documents_compaction_and_a_killed_append(packages, tmp_path):
    """The bar: 6,000 real-text documents in two versions, byte-identical reports to SQLite;
    `index compact` keeps them identical; a SIGKILL during an append (every data table
    appended, the commit not yet made) leaves an index whose next scan is the report of
    before, and the next append lands as the next batch."""
    v1, v2, v3 = packages
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    for target in (index, lite):
        ok(target, v1, workers=2)
        ok(target, v2, workers=2)
    sqlite_report = scan_ok(lite, tmp_path / "lite-report", v2, workers=2)
    report = scan_ok(index, tmp_path / "ice-report", v2, workers=2)
    assert report == sqlite_report
    assert b'"history_only":true' in report["relations.jsonl"]
    assert b'"reason":"near_duplicate"' in report["decisions.jsonl"]
    assert scan_ok(index, tmp_path / "ice-both", v1, v2) == \
        scan_ok(lite, tmp_path / "lite-both", v1, v2)

    assert "compacted" in maintain(index, "compact", "--full")
    assert scan_ok(index, tmp_path / "compacted", v2, workers=2) == sqlite_report
    assert "OK (2 batches" in maintain(index, "check")

    proc = start_paused(index, v3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert scan_ok(index, tmp_path / "after-kill", v2, workers=2) == sqlite_report
    checked = maintain(index, "check")
    assert "OK (2 batches" in checked and "orphan data file" not in checked  # kept by a snapshot
    assert "batch 3 added cpt-v3" in ok(index, v3)
    ok(lite, v3)
    assert scan_ok(index, tmp_path / "ice-v3", v3) == scan_ok(lite, tmp_path / "lite-v3", v3)
    expired = maintain(index, "expire")
    assert "removed" in expired and "removed 0 " not in expired  # the killed append's files
    assert scan_ok(index, tmp_path / "expired", v3) == tree_bytes(tmp_path / "lite-v3")


# --------------------------------------------------------------------------- check


def _data_files(index: str, table: str) -> list[Path]:
    from near_dedup_core.index_store.iceberg.datafiles import local_path
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    return [Path(local_path(f.file_path)) for f in Pinned(index).data_files(table)]


def test_index_check_passes_and_finds_a_missing_or_altered_data_file(tmp_path):
    index = ice(tmp_path / "ice")
    ok(index, V1)
    ok(index, V2)
    assert "OK (2 batches, 2 packages" in maintain(index, "check")
    band = _data_files(index, "bands")[0]
    saved = band.read_bytes()
    band.write_bytes(saved + b"x")
    refused(["--index", index, "index", "check"], "damaged", str(band), "bytes")
    band.unlink()
    refused(["--index", index, "index", "check"], "damaged", str(band), "missing")
    band.write_bytes(saved)
    # a Bloom filter that lacks keys of its row group would let the join skip their rows
    meta = pq.read_metadata(band)
    chunk = meta.row_group(0).column(meta.schema.to_arrow_schema().get_field_index("key"))
    start, length = chunk.bloom_filter_offset, chunk.bloom_filter_length
    band.write_bytes(saved[:start + length - 32] + bytes(32) + saved[start + length:])
    refused(["--index", index, "index", "check"], "damaged", str(band), "Bloom filter",
            "row group 0")
    band.write_bytes(saved)
    # the same for a content-id file: a lookup would miss the content and index it again
    keys_file = _data_files(index, "content_keys")[0]
    kept = keys_file.read_bytes()
    meta = pq.read_metadata(keys_file)
    chunk = meta.row_group(0).column(
        meta.schema.to_arrow_schema().get_field_index("content_id"))
    end = chunk.bloom_filter_offset + chunk.bloom_filter_length
    keys_file.write_bytes(kept[:end - 32] + bytes(32) + kept[end:])
    refused(["--index", index, "index", "check"], "damaged", str(keys_file), "Bloom filter",
            "row group 0", "content_keys")
    keys_file.write_bytes(kept)
    contents = _data_files(index, "contents")[0]
    contents.write_bytes(contents.read_bytes()[:-1] + b"\0")
    refused(["--index", index, "index", "check"], "damaged")


def test_index_check_lists_orphan_files_and_expire_removes_them(tmp_path):
    index = ice(tmp_path / "ice")
    ok(index, V1)
    stray = _data_files(index, "bands")[0].with_name("00000-0-stray.parquet")
    stray.write_bytes(_data_files(index, "bands")[0].read_bytes())
    checked = maintain(index, "check")
    assert "1 orphan data file," in checked and str(stray) in checked
    assert "removed 1 unreferenced data file" in maintain(index, "expire")
    assert not stray.exists()
    assert "orphan data file" not in maintain(index, "check")


def test_a_published_state_without_a_content_row_is_one_line_for_check_and_scan(tmp_path):
    """A commit that publishes a contents snapshot lacking a row breaks an invariant: `index
    check`, a scan and an append each stop with one line."""
    from near_dedup_core.index_store.iceberg import batch
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    index = ice(tmp_path / "ice")
    ok(index, V1)
    pinned = Pinned(index)
    table = pinned.tables["contents"]
    table.overwrite(pinned.read("contents").sort_by("id").slice(1))
    current = table.current_snapshot()
    assert current is not None
    batch.publish(pinned, "batch", "2026-11-26T00:00:00Z",
                  {**pinned.state.snapshots, "contents": current.snapshot_id})
    refused(["--index", index, "index", "check"], "content rows are missing")
    refused(["--index", index, "scan", "--inputs", V1, "--output", tmp_path / "out"],
            "content rows are missing")
    refused(["--index", index, "index", "--inputs", V2], "content rows are missing")


# --------------------------------------------------------------------------- writers, readers


def test_two_concurrent_appends_both_land_in_order(tmp_path):
    index = ice(tmp_path / "ice")
    ok(index, V1)
    first = start_paused(index, V2, seconds=2)
    out = ok(index, V3)  # waits for the writer's lock, then appends on the new state
    assert first.wait(timeout=60) == 0
    assert "batch 3 added cpt-v3" in out
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    pinned = Pinned(index)
    assert sorted(pinned.rows("batches", ("seq", "packages"))) == [
        (1, '["cpt-v1"]'), (2, '["cpt-v2"]'), (3, '["cpt-v3"]')]
    assert pinned.state.n == 3
    lite = tmp_path / "lite.sqlite"
    for day in (V1, V2, V3):
        ok(lite, day)
    assert scan_ok(index, tmp_path / "a", V2, V3) == scan_ok(lite, tmp_path / "b", V2, V3)


def test_a_commit_raced_by_another_writer_is_one_line_and_publishes_nothing(tmp_path):
    """A writer whose view of the commit table is stale (another machine committed without
    this one's lock) is refused at its commit, nothing published, never a doubled batch."""
    from near_dedup_core.index_store.iceberg import batch
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    index = ice(tmp_path / "ice")
    ok(index, V1)
    stale = Pinned(index)
    ok(index, V2)
    with pytest.raises(Exception, match="another writer committed meanwhile"):
        batch.publish(stale, "batch", "2026-11-27T00:00:00Z", stale.state.snapshots)
    assert Pinned(index).state.n == 2


def test_a_scan_during_an_append_reads_the_state_it_pinned(tmp_path):
    index = ice(tmp_path / "ice")
    v1 = make_package(tmp_path, "cpt-a", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(P[:300])]})
    v2 = make_package(tmp_path, "cpt-b", {"train": [
        {"id": f"b{i}", "text": drop_every(t, 9), "domain": "docs"}
        for i, t in enumerate(P[:150])]},
        created_at="2026-11-26T00:00:00Z")
    ok(index, v1)
    before = scan_ok(index, tmp_path / "before", v1)

    def append_and_compact() -> str:
        appended = ok(index, v2)
        assert "compacted" in maintain(index, "compact", "--full")
        refused(["--index", index, "index", "expire"], "a scan is reading it")
        return appended

    appended = scan_with_an_append_meanwhile(
        ["-m", "near_dedup_core"], ["--index", index, "scan", "--inputs", str(v1), "--output",
                                    str(tmp_path / "during"), "--workers", "2"],
        "scan-verify", tmp_path / "paused", append_and_compact)
    assert "batch 2 added cpt-b" in appended
    assert tree_bytes(tmp_path / "during") == before
    after = scan_ok(index, tmp_path / "after", v1)
    assert b'"package_id":"cpt-b"' in after["relations.jsonl"]


# --------------------------------------------------------------------------- refusals


def test_bad_locations_and_states_are_one_line(tmp_path):
    refused(["--index", "iceberg://relative/folder", "index", "check"], "absolute")
    missing = ice(tmp_path / "none")
    refused(["--index", missing, "scan", "--inputs", V1, "--output", tmp_path / "out"],
            "not found")
    assert not (tmp_path / "out").exists() and not (tmp_path / "none").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    refused(["--index", ice(foreign), "index", "--inputs", V1], "not a near-dedup index")
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    index = ice(tmp_path / "ice")
    ok(index, V1)
    other = tmp_path / "other.json"
    other.write_text('{"threshold": 0.8}')
    refused(["--index", index, "--config", other, "index", "--inputs", V2],
            "bound to a different config")
    refused(["--index", tmp_path / "x.sqlite", "index", "compact"], "Iceberg tables")


def test_without_pyiceberg_the_index_is_one_line_with_the_install_command(tmp_path,
                                                                          monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pyiceberg(name, *args, **kwargs):
        if name.startswith("pyiceberg"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyiceberg)
    refused(["--index", ice(tmp_path / "ice"), "index", "--inputs", V1],
            "pip install 'near-dedup[iceberg]'")
    assert not (tmp_path / "ice").exists()


def test_the_commands_of_docs_iceberg_run_as_written(tmp_path):
    """docs/iceberg.md's "Commands" block, verbatim in bash in a folder holding the samples,
    with this venv's near-dedup first on PATH: every command exits 0."""
    run, _ = run_doc_block("iceberg.md", "## Commands", tmp_path)
    assert "nothing to compact" in run.stdout and "compacted" in run.stdout and "OK (2 batches" in run.stdout
    assert "expired" in run.stdout
    assert (tmp_path / "data" / "reports" / "ice-v2" / "decisions.jsonl").is_file()


def test_a_killed_first_batch_leaves_no_published_index_and_the_next_one_starts_over(tmp_path):
    index = ice(tmp_path / "ice")
    proc = start_paused(index, V1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    refused(["--index", index, "scan", "--inputs", V1, "--output", tmp_path / "out"],
            "no batch committed yet")
    assert "batch 1 added cpt-v1" in ok(index, V1)
    lite = tmp_path / "lite.sqlite"
    ok(lite, V1)
    assert scan_ok(index, tmp_path / "a", V1) == scan_ok(lite, tmp_path / "b", V1)


_PAUSE_IN_COMPACTION = """
import sys, time
from near_dedup_core import cli
from near_dedup_core.index_store.iceberg import compact
def pause(*args):
    print("paused before the commit", file=sys.stderr, flush=True)
    time.sleep(600)
compact.publish = pause
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_killed_compaction_leaves_the_published_state_and_the_next_one_lands(tmp_path):
    index, lite = ice(tmp_path / "ice"), tmp_path / "lite.sqlite"
    for target in (index, lite):
        ok(target, V1)
        ok(target, V2)
    before = scan_ok(lite, tmp_path / "lite-report", V1, V2)
    proc = subprocess.Popen([sys.executable, "-c", _PAUSE_IN_COMPACTION, "--index", index,
                             "index", "compact", "--full"],
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    # the compaction's progress lines (a loaded box: its steps last past the delay) come first
    lines = [proc.stderr.readline() if proc.stderr else b"" for _ in range(1)]
    while lines[-1] and b"paused before the commit" not in lines[-1] and len(lines) < 20:
        lines.append(proc.stderr.readline() if proc.stderr else b"")
    assert b"paused before the commit" in lines[-1], lines
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert scan_ok(index, tmp_path / "after-kill", V1, V2) == before
    assert "compacted" in maintain(index, "compact", "--full")
    assert scan_ok(index, tmp_path / "compacted", V1, V2) == before
    assert "OK (2 batches" in maintain(index, "check")
