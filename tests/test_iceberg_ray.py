"""An Iceberg index's band files written, and its per-bucket history join run, as Ray tasks
on a two-node cluster (`ray.cluster_utils.Cluster`, a head and a second node of one CPU
each): the scan's report is byte-identical to the local executor's and to SQLite's.

As in test_ray.py, the cluster runs in a private network namespace holding only the
loopback interface (``unshare -n``, as root); without it, in a plain subprocess. The case
itself is collected only inside that subprocess.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

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

CASE_ENV = "NEAR_DEDUP_ICEBERG_RAY_CASE"


@pytest.mark.slow
def test_the_per_bucket_join_on_a_two_node_ray_cluster_gives_the_local_report():
    pytest.importorskip("ray", reason="pip install 'near-dedup[ray]'")
    pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")
    cmd = f"{sys.executable} -m pytest -q -p no:cacheprovider {__file__}::test_cluster_case"
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        argv = ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {cmd}"]
    else:
        argv = ["sh", "-c", f"exec {cmd}"]
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1200,
                         env={**os.environ, "PYTHONPATH": str(REPO), CASE_ENV: "1"})
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert "1 passed" in summary and "skipped" not in summary, run.stdout[-3000:]


if os.environ.get(CASE_ENV):
    def test_cluster_case(tmp_path, monkeypatch):
        import ray
        from ray.cluster_utils import Cluster

        from near_dedup_core.index_store.iceberg import batch as ice_batch
        from near_dedup_core.index_store.iceberg import snapshot

        paras = stdlib_paragraphs()
        n = len(paras)
        texts = [f"{paras[i % n]} {paras[(i + i // n + 1) % n]}" for i in range(1500)]
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
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False, include_dashboard=False)
        try:
            assert len([x for x in ray.nodes() if x["Alive"]]) == 2
            # the Iceberg batches' band files are written by Ray tasks, a chunk per block
            monkeypatch.setattr(ice_batch.BandTasks, "chunk_rows", 1)
            for target, executor in ((index, "ray"), (lite, "local")):
                for pkg in (v1, v2):
                    code, _, err = run_cli("--quiet", "--index", target, "index", "--inputs",
                                           pkg, "--executor", executor, "--workers", "2")
                    assert code == 0, err
            reports = {}
            for name, target, executor in (("ray", index, "ray"), ("local", index, "local"),
                                           ("sqlite", lite, "local")):
                out = tmp_path / f"report-{name}"
                code, _, err = run_cli("--quiet", "--index", target, "scan", "--inputs", v2,
                                       "--output", out, "--executor", executor,
                                       "--workers", "2")
                assert code == 0, err
                reports[name] = tree_bytes(out)
        finally:
            ray.shutdown()
            cluster.shutdown()
        assert reports["ray"] == reports["local"] == reports["sqlite"]
        assert b'"history_only":true' in reports["ray"]["relations.jsonl"]
        assert "Ray" in executors[0], executors  # the join ran as Ray tasks
