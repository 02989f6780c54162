"""The Ray executor: `ray_cases.py` against a real two-node cluster, and Ray's absence.

Ray binds its services to the machine's address. The cluster cases therefore run in a
private network namespace holding only the loopback interface (``unshare -n``, as root, as
in CI), where Ray falls back to 127.0.0.1: the test cluster never listens on or talks to
anything but this machine's loopback. Where ``unshare`` is not available (a developer's
machine without root), they run in a plain subprocess.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO, SAMPLES, run_cli

# Starts a two-node Ray cluster.
pytestmark = pytest.mark.slow

CASES = REPO / "tests" / "ray_cases.py"


def _isolated_command() -> list[str]:
    pytest_cmd = f"{sys.executable} -m pytest -q -p no:cacheprovider {CASES}"
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        return ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {pytest_cmd}"]
    return ["sh", "-c", f"exec {pytest_cmd}"]


def test_the_ray_cases_pass_on_a_two_node_cluster():
    pytest.importorskip("ray", reason="pip install 'near-dedup[ray]'")
    run = subprocess.run(_isolated_command(), cwd=REPO, capture_output=True, text=True,
                         timeout=1800, env={**os.environ, "PYTHONPATH": str(REPO)})
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, \
        run.stdout[-3000:]
    print(summary)


def test_without_ray_the_ray_executor_is_one_line_with_the_install_hint(monkeypatch,
                                                                         tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)
    index = tmp_path / "cpt.sqlite"
    code, out, err = run_cli("--quiet", "--index", index, "index", "--inputs",
                             SAMPLES / "cpt" / "2026-11-25" / "cpt-v1", "--executor", "ray")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "pip install 'near-dedup[ray]'" in err, err
    assert not index.exists()
