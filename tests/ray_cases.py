"""`--executor ray` on a real multi-node Ray cluster simulated on this machine
(`ray.cluster_utils.Cluster`: a head and a second node of one CPU each, started once for the
module). Run by test_ray.py inside a private network namespace, so that the cluster binds to
the loopback address only.

Reports and index rows are byte-identical to the local executor's, also with the packages on
an S3 server (moto's, on the loopback; started before the cluster, whose nodes then have its
address and keys in their environment) that the tasks of ``index`` read their byte ranges
from; a task whose worker process dies is retried by Ray and the result is still the same; a
task that can never finish stops the command with exit 1, nothing written. An Iceberg index's
band files and its per-bucket history join run as Ray tasks give the local executor's and
SQLite's report.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import (
    REPO,
    drop_every,
    make_package,
    reverse_every,
    run_cli,
    stdlib_paragraphs,
    tree_bytes,
)

ray = pytest.importorskip("ray", reason="pip install 'near-dedup[ray]'")
from ray.cluster_utils import Cluster  # noqa: E402

P = stdlib_paragraphs()


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from s3_server import run_s3_server

    with pytest.MonkeyPatch.context() as mp, \
            run_s3_server(mp, tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(s3):
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False, include_dashboard=False)
    try:
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> tuple[Path, Path]:
    """About 6,000 real-text documents over two versions, with near and exact copies."""
    root = tmp_path_factory.mktemp("ray-packages")
    texts = [f"{a} {b}" for a, b in zip(P, P[1:] + P[:1], strict=True)] * 3
    texts = [t if i < len(P) else f"{t} {P[i % len(P)][:200]}" for i, t in enumerate(texts)]
    v1 = make_package(root, "cpt-v1", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[:3000])]},
        shard_records=1000)
    edited = [drop_every(t, 9) if i % 3 == 0 else reverse_every(t, 13) if i % 3 == 1 else t
              for i, t in enumerate(texts[:1500])]
    v2 = make_package(root, "cpt-v2", {"train": [
        {"id": f"b{i}", "text": t, "domain": "docs"}
        for i, t in enumerate(edited + texts[3000:4500])]},
        created_at="2026-11-26T00:00:00Z", shard_records=1000)
    return v1, v2


def _run(index: Path, executor: str, *argv: object) -> str:
    code, out, err = run_cli("--quiet", "--index", index, *argv, "--executor", executor,
                             "--workers", "2")
    assert code == 0, err
    return out


def release(tmp_path: Path, executor: str, v1: Path, v2: Path) -> dict[str, bytes]:
    index = tmp_path / f"{executor}.sqlite"
    _run(index, executor, "index", "--inputs", v1)
    _run(index, executor, "index", "--inputs", v2)
    out = tmp_path / f"report-{executor}"
    _run(index, executor, "scan", "--inputs", v2, "--output", out)
    return tree_bytes(out)


def test_the_ray_executor_gives_the_local_report_byte_for_byte(cluster, packages, tmp_path):
    local = release(tmp_path, "local", *packages)
    assert release(tmp_path, "ray", *packages) == local
    assert b'"history_only":true' in local["relations.jsonl"]
    assert b'"reason":"near_duplicate"' in local["decisions.jsonl"]


def test_a_scan_with_takedowns_on_ray_is_the_local_report_byte_for_byte(cluster, packages,
                                                                         tmp_path):
    """Takedowns in force (docs/takedowns.md) give the same format 2 report on Ray."""
    v1, v2 = packages
    reports = {}
    for executor in ("local", "ray"):
        index = tmp_path / f"{executor}-takedowns.sqlite"
        _run(index, executor, "index", "--inputs", v1)
        _run(index, executor, "index", "--inputs", v2)
        code, _, err = run_cli("--quiet", "--index", index, "takedown", "add", "--request",
                               "R-1", "--reason", "test", "--package", v1, "--sample", "a0",
                               "a1", "a2")
        assert code == 0, err
        out = tmp_path / f"takedown-report-{executor}"
        _run(index, executor, "scan", "--inputs", v2, "--output", out)
        reports[executor] = tree_bytes(out)
    assert reports["ray"] == reports["local"]
    assert b'"reason":"takedown"' in reports["local"]["decisions.jsonl"]


def test_contamination_on_ray_is_the_local_report_byte_for_byte(cluster, packages, tmp_path):
    """`contamination --executor ray`, reading the packages or (texts shipped from the driver's
    snapshot) an index: the same report as the local pool's."""
    v1, v2 = packages
    evals = make_package(tmp_path, "evals", {"test": [
        {"id": f"q{i}", "text": P[(7 * i) % len(P)][:300]} for i in range(60)]})
    index = tmp_path / "contamination.sqlite"
    _run(index, "local", "index", "--inputs", v1, v2)
    reports = {}
    for executor in ("local", "ray"):
        for source in ("packages", "index"):
            out = tmp_path / f"contamination-{executor}-{source}"
            argv = ["--quiet", *(["--index", index] if source == "index" else []),
                    "contamination", "--evals", evals, "--inputs", v1, v2, "--output", out,
                    "--executor", executor, "--workers", "2"]
            code, _, err = run_cli(*argv)
            assert code == 0, err
            reports[(executor, source)] = tree_bytes(out)
    assert all(r == reports[("local", "packages")] for r in reports.values())
    assert reports[("local", "packages")]["contamination.jsonl"].count(b"\n") >= 60


def test_the_iceberg_join_and_band_writes_as_ray_tasks_give_the_local_report(
        cluster, tmp_path, monkeypatch):
    """An Iceberg index's band files written, and its per-bucket history join run, as Ray
    tasks on the two-node cluster: the scan's report is byte-identical to the local
    executor's and to SQLite's."""
    pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")
    from near_dedup_core.index_store.iceberg import batch as ice_batch
    from near_dedup_core.index_store.iceberg import snapshot

    n = len(P)
    texts = [f"{P[i % n]} {P[(i + i // n + 1) % n]}" for i in range(1500)]
    v1 = make_package(tmp_path, "cpt-v1", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[:1000])]})
    v2 = make_package(tmp_path, "cpt-v2", {"train": [
        {"id": f"b{i}", "text": drop_every(t, 9) if i % 2 else reverse_every(t, 13),
         "domain": "docs"} for i, t in enumerate(texts[:500])] + [
        {"id": f"c{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[1000:])]},
        created_at="2026-11-26T00:00:00Z")
    index, lite = f"iceberg://{tmp_path / 'ice'}", tmp_path / "lite.sqlite"
    executors = []
    real = snapshot.IcebergSnapshot.history_band_hits

    def recorded(self, *args):
        executors.append(type(self.join_executor).__name__)
        return real(self, *args)

    monkeypatch.setattr(snapshot.IcebergSnapshot, "history_band_hits", recorded)
    # the Iceberg batches' band files are written by Ray tasks, a chunk per block
    monkeypatch.setattr(ice_batch.BandTasks, "chunk_rows", 1)
    for target, executor in ((index, "ray"), (lite, "local")):
        for pkg in (v1, v2):
            code, _, err = run_cli("--quiet", "--index", target, "index", "--inputs", pkg,
                                   "--executor", executor, "--workers", "2")
            assert code == 0, err
    reports = {}
    for name, target, executor in (("ray", index, "ray"), ("local", index, "local"),
                                   ("sqlite", lite, "local")):
        out = tmp_path / f"report-{name}"
        code, _, err = run_cli("--quiet", "--index", target, "scan", "--inputs", v2,
                               "--output", out, "--executor", executor, "--workers", "2")
        assert code == 0, err
        reports[name] = tree_bytes(out)
    assert reports["ray"] == reports["local"] == reports["sqlite"]
    assert b'"history_only":true' in reports["ray"]["relations.jsonl"]
    assert "Ray" in executors[0], executors  # the join ran as Ray tasks


def test_index_tasks_read_their_byte_ranges_from_the_bucket(cluster, s3, packages, tmp_path,
                                                             monkeypatch):
    """With the packages on the bucket, the driver sends each block of ``index`` as a byte
    range of its shard (no lines); the tasks read them from the bucket, and the index gives
    the local report byte for byte (but for the input locations it records)."""
    from near_dedup_core.ingest import batch

    local = release(tmp_path, "local", *packages)
    client = s3.client()
    urls = []
    for pkg in packages:
        for path in sorted(p for p in pkg.rglob("*") if p.is_file()):
            client.put_object(Bucket=s3.bucket, Key=f"{pkg.name}/{path.relative_to(pkg)}",
                              Body=path.read_bytes())
        urls.append(s3.url(pkg.name))
    sent = []
    read_blocks = batch.read_blocks

    def recorded(*args, **kwargs):
        for event in read_blocks(*args, **kwargs):
            sent.append(event)
            yield event

    monkeypatch.setattr(batch, "read_blocks", recorded)
    index = tmp_path / "ray-s3.sqlite"
    _run(index, "ray", "index", "--inputs", urls[0])
    _run(index, "ray", "index", "--inputs", urls[1])
    blocks = [b for b in sent if hasattr(b, "source")]
    shards = {(pkg.name, path.relative_to(pkg).as_posix()) for pkg in packages
              for path in (pkg / "data").rglob("*.jsonl")}
    assert {(b.package_id, b.file) for b in blocks} == shards
    assert all(b.data == b"" and b.source is not None and b.source.url.startswith(s3.url())
               for b in blocks)
    out = tmp_path / "report-ray-s3"
    _run(index, "ray", "scan", "--inputs", urls[1], "--output", out)
    remote = tree_bytes(out)
    assert sorted(remote) == sorted(local)
    for name in ("decisions.jsonl", "relations.jsonl", "origins.jsonl"):
        assert remote[name] == local[name], name
    assert remote["manifest.json"].replace(urls[1].encode(), str(packages[1]).encode()) == \
        local["manifest.json"]


_DIE_ONCE = """
import os, sys
from pathlib import Path
from near_dedup_core import cli
from near_dedup_core.ingest import work

real_process_block = work.process_block
marker = Path(os.environ["DIE_MARKER"])  # read here: the function runs on Ray's workers
always = bool(os.environ.get("DIE_ALWAYS"))

def process_block_or_die(*args):
    # the first task to get here kills its own worker process; Ray runs the task again
    if always or not marker.exists():
        marker.touch()
        os.kill(os.getpid(), 9)
    return real_process_block(*args)

work.process_block = process_block_or_die
sys.exit(cli.main(sys.argv[1:]))
"""


def _index_in_subprocess(cluster, index: Path, pkg: Path, marker: Path, always: bool):
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": cluster.address,
           "DIE_MARKER": str(marker)}
    if always:
        env["DIE_ALWAYS"] = "1"
    return subprocess.run([sys.executable, "-c", _DIE_ONCE, "--quiet", "--index", str(index),
                           "index", "--inputs", str(pkg), "--executor", "ray"],
                          env=env, capture_output=True, text=True, timeout=600)


def test_a_killed_worker_is_retried_and_the_index_is_the_same(cluster, packages, tmp_path):
    v1, _ = packages
    local = tmp_path / "local.sqlite"
    _run(local, "local", "index", "--inputs", v1)
    index = tmp_path / "ray.sqlite"
    marker = tmp_path / "died"
    run = _index_in_subprocess(cluster, index, v1, marker, always=False)
    assert (run.returncode, run.stderr) == (0, ""), run.stderr  # Ray's notices: in its logs
    assert marker.exists()  # a worker did die
    reports = []
    for idx in (local, index):
        out = tmp_path / f"r-{idx.stem}"
        _run(idx, "local", "scan", "--inputs", v1, "--output", out)
        reports.append(tree_bytes(out))
    assert reports[0] == reports[1]


def test_a_task_that_keeps_failing_stops_with_one_line_and_writes_nothing(
        cluster, packages, tmp_path):
    v1, v2 = packages
    index = tmp_path / "ray.sqlite"
    _run(index, "local", "index", "--inputs", v1)
    before = index.read_bytes()
    run = _index_in_subprocess(cluster, index, v2, tmp_path / "died", always=True)
    assert run.returncode == 1, run.stderr
    assert run.stderr.startswith("near-dedup: error: ray: a task failed after") \
        and run.stderr.count("\n") == 1, run.stderr  # one line: Ray's own are in its logs
    assert index.read_bytes() == before


def test_a_cluster_that_cannot_be_reached_is_one_line(packages, tmp_path):
    v1, _ = packages
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": "127.0.0.1:1"}
    run = subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                          str(tmp_path / "x.sqlite"), "index", "--inputs", str(v1),
                          "--executor", "ray"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1, run.stderr
    assert run.stderr.startswith("near-dedup: error: ray: cannot reach cluster 127.0.0.1:1") \
        and run.stderr.count("\n") == 1, run.stderr
    assert not (tmp_path / "x.sqlite").exists()


def _session(sid: int) -> dict[int, bytes]:
    """Live processes of session ``sid``: pid → command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found[int(entry.name)] = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("when", ["starting", "running"])
def test_a_local_ray_dies_with_its_killed_driver(packages, tmp_path, when):
    """A local Ray started by `index --executor ray` (no RAY_ADDRESS): its servers, agents
    (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) and workers are gone soon after the
    command is killed with SIGKILL, whether Ray was still starting or running tasks."""
    v1, v2 = packages
    index = tmp_path / "cpt.sqlite"
    _run(index, "local", "index", "--inputs", v1)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # a Ray of its own (this module's cluster is the machine's current one), at a short path
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    proc = subprocess.Popen([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                             str(index), "index", "--inputs", str(v2), "--executor", "ray",
                             "--workers", "2"], env={**env, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        wanted = b"raylet" if when == "starting" else b"ray::process_block"
        while not any(wanted in cmd for cmd in _session(proc.pid).values()):
            assert proc.poll() is None and time.monotonic() < deadline, "Ray never started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while _session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session(proc.pid) == {}
    finally:
        for pid in _session(proc.pid):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
