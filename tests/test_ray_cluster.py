"""The cluster recipe of docs/ray.md, run as written: a head and a second node started with
`ray start` on this machine, token authentication on, `near-dedup scan --executor ray` with
``RAY_ADDRESS`` naming the head, a report byte-identical to the local executor's, `ray stop`.

`ray stop` stops every Ray process it can see, and Ray binds to the machine's address. The
commands therefore run in private namespaces (``unshare``, as root, as in CI): a network
namespace holding only the loopback interface, a PID namespace in which `ray stop` sees only
this cluster (and whose processes all end with it), and a mount namespace with its own
``/tmp/ray``. Without root or ``unshare`` the test is skipped: outside them `ray stop` would
stop other Ray clusters of the machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SAMPLES, run_cli, tree_bytes

pytestmark = pytest.mark.slow  # a Ray head and node start (about a minute)

CPT = SAMPLES / "cpt"
V1, V2 = CPT / "2026-11-25" / "cpt-v1", CPT / "2026-11-26" / "cpt-v2"

# docs/ray.md, "Starting a cluster", with this machine's loopback address for the head
# and one CPU per node, so that the scan's tasks spread over both nodes; START, then RUN.
START = """
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(ray get-auth-token --generate)
ray start --head --port 6379 --num-cpus 1
ray start --address 127.0.0.1:6379 --num-cpus 1
"""
RUN = """
RAY_ADDRESS=127.0.0.1:6379 near-dedup --quiet --index "$INDEX" \\
  scan --inputs "$V1" "$V2" --output "$OUTPUT" --executor ray
ray stop
"""
#: Between the two: the cluster has two live nodes (a driver with the same token).
NODES = """
python -c 'import ray; ray.init(address="127.0.0.1:6379", logging_level="ERROR"); \\
print("live nodes:", sum(n["Alive"] for n in ray.nodes()))'
"""


def _need_namespaces() -> None:
    pytest.importorskip("ray", reason="pip install 'near-dedup[ray]'")
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip("needs root, unshare and ip (apt-get install util-linux iproute2): "
                    "`ray stop` must not reach other Ray clusters of this machine")


def _in_namespaces(tmp_path: Path, commands: str, **variables: str) -> subprocess.CompletedProcess:
    """``commands`` (sh) in private network, PID and mount namespaces with their own /tmp/ray,
    HOME under ``tmp_path``, this venv first on PATH and no RAY_* variable of ours."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    script = tmp_path / "cluster.sh"
    script.write_text("set -eux\nip link set lo up\nmkdir -p /tmp/ray\n"
                      "mount -t tmpfs tmpfs /tmp/ray\n" + commands
                      + "! pgrep -f raylet\n", encoding="utf-8")
    bindir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update({"HOME": str(home), "PATH": os.pathsep.join([bindir, env.get("PATH", "")]),
                **variables})
    return subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh",
                           str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_documented_two_node_cluster_gives_the_local_report(tmp_path):
    _need_namespaces()
    index = tmp_path / "cpt.sqlite"
    for day in (V1, V2):
        code, _, err = run_cli("--quiet", "--index", index, "index", "--inputs", day)
        assert (code, err) == (0, ""), err
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", V1, V2,
                           "--output", tmp_path / "local", "--workers", 1)
    assert (code, err) == (0, ""), err

    run = _in_namespaces(tmp_path, START + NODES + RUN, INDEX=str(index), V1=str(V1),
                         V2=str(V2), OUTPUT=str(tmp_path / "ray"))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-6000:]
    assert "Ray runtime started" in run.stdout and "live nodes: 2" in run.stdout
    assert (tmp_path / "home" / ".ray" / "auth_token").is_file()  # the nodes' token
    assert tree_bytes(tmp_path / "ray") == tree_bytes(tmp_path / "local")


# A head that turns token authentication on by itself (a token in ~/.ray/auth_token, no
# RAY_AUTH_MODE); a node that joins only in token mode; drivers on this machine without the
# head's token, with a wrong one, and with RAY_ADDRESS unset (docs/ray.md: "a local Ray").
HEAD_AND_DRIVERS = """
ray get-auth-token --generate >/dev/null
ray start --head --port 6379 --num-cpus 1
if ray start --address 127.0.0.1:6379 --num-cpus 1 > refused.log 2>&1; then exit 6; fi
grep -q "InvalidAuthToken" refused.log
RAY_AUTH_MODE=token ray start --address 127.0.0.1:6379 --num-cpus 1
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(cat "$HOME/.ray/auth_token")
SCAN="near-dedup --quiet --index $INDEX scan --inputs $V1 --executor ray --output"
started=$(date +%s%N)
if env -u RAY_AUTH_MODE -u RAY_AUTH_TOKEN RAY_ADDRESS=127.0.0.1:6379 \\
  NEAR_DEDUP_RAY_LOG="$PWD/ray.log" timeout 60 $SCAN none 2> none.err; then exit 3; fi
echo $(( ($(date +%s%N) - started) / 1000000 )) > none.ms
if env -u RAY_AUTH_MODE -u RAY_AUTH_TOKEN RAY_ADDRESS=127.0.0.1:6379 NEAR_DEDUP_RAY_LOG=- \\
  timeout 60 $SCAN shown 2> shown.err; then exit 5; fi
if RAY_AUTH_TOKEN=0123 RAY_ADDRESS=127.0.0.1:6379 timeout 60 $SCAN wrong 2> wrong.err; then
  exit 4
fi
env -u RAY_AUTH_MODE -u RAY_AUTH_TOKEN timeout 300 $SCAN "$OUTPUT" 2> local.err
ray stop
"""


def test_a_refused_token_is_one_line_and_a_local_ray_runs_beside_a_head(tmp_path):
    """As docs/ray.md says: with a token in ~/.ray/auth_token, `ray start --head` turns token
    authentication on by itself, `ray start --address` does not, and is refused; with
    RAY_AUTH_MODE=token (and the token) it joins. A driver that lacks the head's token (or
    has another) stops at once with one line naming the settings, not Ray's twenty seconds
    of warnings; with RAY_ADDRESS unset a local Ray of its own runs the scan beside the head
    (and stops with it); Ray's own messages stay off the terminal."""
    _need_namespaces()
    index = tmp_path / "cpt.sqlite"
    code, _, err = run_cli("--quiet", "--index", index, "index", "--inputs", V1)
    assert (code, err) == (0, ""), err
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", V1,
                           "--output", tmp_path / "local", "--workers", 1)
    assert (code, err) == (0, ""), err

    run = _in_namespaces(tmp_path, HEAD_AND_DRIVERS, INDEX=str(index), V1=str(V1),
                         OUTPUT=str(tmp_path / "ray"))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-6000:]
    assert "Token authentication is enabled for this Ray cluster" in run.stdout + run.stderr
    assert int((tmp_path / "none.ms").read_text()) < 10_000  # Ray alone: 20 s of retries
    assert (tmp_path / "none.err").read_text() == (
        "near-dedup: error: ray: cluster 127.0.0.1:6379 requires its authentication token: set "
        "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to the token of its head (or "
        "RAY_AUTH_TOKEN_PATH to a file holding it), as in docs/ray.md\n")
    # Ray's own messages: in the log file, or on stderr when NEAR_DEDUP_RAY_LOG=- asks
    assert "InvalidAuthToken" in (tmp_path / "ray.log").read_text()
    shown = (tmp_path / "shown.err").read_text()
    assert "InvalidAuthToken" in shown and shown.endswith((tmp_path / "none.err").read_text())
    assert (tmp_path / "wrong.err").read_text() == (
        "near-dedup: error: ray: cluster 127.0.0.1:6379 refused this command's authentication "
        "token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): set RAY_AUTH_TOKEN "
        "to the token of its head\n")
    assert (tmp_path / "local.err").read_text() == ""
    assert tree_bytes(tmp_path / "ray") == tree_bytes(tmp_path / "local")
    assert not any((tmp_path / name).exists() for name in ("none", "shown", "wrong"))
