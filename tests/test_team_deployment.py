"""The team deployment of docs/postgres.md, run as a shell runs it: its blocks, taken from
the markdown, on a fresh clone of the project (a git repository of its files), from the
clone's root, through ``bash -e``, with ``DAGSTER_HOME`` unset and no setting exported that the
blocks do not set. A throw-away PostgreSQL server stands in for ``db.internal``: its address and
its administrator's password replace the block's ``db.internal``, ``5432`` and
``admin-secret``, and the webserver's port replaces ``3000``. The install block is this test's
own environment (it has the ``[team]`` extra; ``PYTHONPATH`` points at the clone, as the
editable install would).

Then the UI's asset page loads in headless Chromium, a two-day asset backfill launched through
GraphQL completes, the two days' reports are byte-identical to the same days released on the
SQLite demo configuration, and ``git status`` of the clone shows no changed or new file.

Marked ``webserver``. Dagster's backfill daemon looks at a backfill every 30 s (a constant,
``DEFAULT_DAEMON_INTERVAL_SECONDS``, that no setting changes) and launches one step of the
backfill per look; the ``dagster-daemon`` the block starts is this environment's, found first
on ``PATH``, with that constant at 2 s, so the backfill takes about a minute instead of three.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
from helpers import tree_bytes
from pg_server import PASSWORD, PostgresServer, require_bindir
from test_webserver import (
    CHECK_EXECUTIONS,
    REPO,
    chromium,
    free_port,
    graphql,
    location_loaded,
    stop,
    wait_for_page,
    wait_until,
)

pytestmark = pytest.mark.webserver

DAYS = ["2026-11-25", "2026-11-26"]
DOC = REPO / "docs" / "postgres.md"
SECTION = "## A team deployment: Dagster and the index on one server"
ROLE, ROLE_PASSWORD = "near_dedup", "team-secret"
BACKFILL_TIMEOUT = 300.0
DAEMON_INTERVAL = 2  # seconds between the backfill daemon's looks (Dagster's default: 30)
# `dagster-daemon run …` (its console script), the daemon's look interval set first.
DAEMON = f"""#!{sys.executable}
import sys
import dagster._daemon.controller as controller
controller.DEFAULT_DAEMON_INTERVAL_SECONDS = {DAEMON_INTERVAL}
from dagster._daemon.cli import main
sys.argv[0] = "dagster-daemon"
sys.exit(main())
"""


@pytest.fixture(scope="module")
def server():
    bindir = require_bindir()
    pytest.importorskip("dagster_postgres", reason="pip install 'near-dedup[team]'")
    srv = PostgresServer(bindir)
    try:
        yield srv
    finally:
        srv.stop()


def doc_blocks() -> list[str]:
    """The ``` blocks of the team deployment section of docs/postgres.md, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    return re.findall(r"^```[^\n]*\n(.*?)^```", section, re.DOTALL | re.MULTILINE)


def fresh_clone(tmp_path: Path) -> Path:
    """A git repository of the project's files as they are here (tracked, and new files not
    ignored), committed: what a fresh clone of them holds."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    clone = tmp_path / "clone"
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run([*git, *args], cwd=clone, check=True, capture_output=True)
    return clone


def shell_env(tmp_path: Path, clone: Path) -> dict[str, str]:
    """A login's environment: no Dagster, near-dedup or libpq settings; this environment's
    tools on PATH (its ``dagster-daemon`` with the short look interval first), and the clone
    importable, as ``pip install -e`` in it would make it."""
    shims = tmp_path / "bin"
    shims.mkdir()
    daemon = shims / "dagster-daemon"
    daemon.write_text(DAEMON, encoding="utf-8")
    daemon.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DAGSTER_", "NEAR_DEDUP_", "PG"))}
    env["PATH"] = os.pathsep.join([str(shims), str(Path(sys.executable).parent),
                                   env.get("PATH", "")])
    env["PYTHONPATH"] = str(clone)
    return env


def launch_backfill(base: str, days: list[str]) -> str:
    data = graphql(base, """
        mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
            __typename ... on LaunchBackfillSuccess { backfillId }
            ... on PythonError { message } ... on InvalidSubsetError { message } } }""",
                   {"params": {"partitionNames": days,
                               "assetSelection": [{"path": [name]} for name in (
                                   "validated_snapshot", "index_append", "scan_report",
                                   "mixture")]}})
    launched = data["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]


def backfill_status(base: str, backfill_id: str) -> str:
    data = graphql(base, """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
        ... on PartitionBackfill { status } } }""", {"id": backfill_id})
    return data["partitionBackfillOrError"]["status"]


def sqlite_demo_reports(tmp_path: Path, root: Path) -> dict[str, dict[str, bytes]]:
    """The same two days of the project at ``root`` released in process on the demo
    configuration (.env.example's values: a SQLite index, the shipped config and mixture
    template), day by day."""
    from near_dedup_assets.assets import RELEASE_ASSETS
    from near_dedup_assets.checks import RELEASE_CHECKS
    from near_dedup_assets.resources import ReleaseSettings

    out = tmp_path / "sqlite"
    settings = ReleaseSettings(
        snapshot_root=str(root / "samples" / "cpt"), index=str(out / "index" / "cpt.sqlite"),
        config=str(root / "config" / "near-dedup.json"), report_root=str(out / "reports"),
        mixture_root=str(out / "mixtures"), release_root=str(out / "releases"),
        mixture_template=str(root / "config" / "mixture-template.json"), workers=1)
    with dg.instance_for_test() as instance:
        for day in DAYS:
            result = dg.materialize([*RELEASE_ASSETS, *RELEASE_CHECKS], partition_key=day,
                                    resources={"release": settings}, instance=instance)
            assert result.success
    return {day: tree_bytes(settings.report_dir(day).local_path) for day in DAYS}


def test_the_team_deployment_runs_as_written_from_a_fresh_clone(server, tmp_path):
    install, setup, services = doc_blocks()
    assert install.strip().startswith("pip install -e '.[team]'")  # this environment has it
    web_port = free_port()
    filled = []
    for placeholder, value in (("db.internal", "127.0.0.1"), ("5432", str(server.port)),
                               ("admin-secret", PASSWORD), ("-p 3000", f"-p {web_port}")):
        assert placeholder in setup + services, placeholder
        filled.append((placeholder, value))

    def fill(block: str) -> str:
        for placeholder, value in filled:
            block = block.replace(placeholder, value)
        return block

    clone = fresh_clone(tmp_path)
    env = shell_env(tmp_path, clone)
    assert "DAGSTER_HOME" not in env
    run = subprocess.run(["bash", "-e", "-c", fill(setup)], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"role {ROLE} owns database(s): dagster near_dedup_cpt" in run.stdout
    settings = (clone / ".env").read_text(encoding="utf-8").splitlines()
    for name in ("DAGSTER_HOME", "NEAR_DEDUP_INDEX", "DAGSTER_PG_HOST", "DAGSTER_PG_PASSWORD"):
        assert sum(line.startswith(f"{name}=") for line in settings) == 1, name

    lines = [line for line in fill(services).splitlines() if line.strip()]
    assert [line.split()[0] for line in lines] == ["dagster-webserver", "dagster-daemon"]
    logs = [tmp_path / "webserver.log", tmp_path / "daemon.log"]
    started = []
    for line, log in zip(lines, logs, strict=True):
        with open(log, "wb") as out:
            started.append(subprocess.Popen(["bash", "-e", "-c", line], cwd=clone, env=env,
                                            stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True))
    webserver, daemon = started
    base = f"http://127.0.0.1:{web_port}"
    try:
        wait_until("/server_info", lambda: urllib.request.urlopen(
            f"{base}/server_info", timeout=5).status == 200, webserver, logs[0])
        wait_until("the code location", lambda: location_loaded(base), webserver, logs[0])
        graphql(base, "mutation { setNuxSeen }")  # no "join the community" modal
        # the instance is the team's: Dagster's runs in the server's database
        assert (clone / "dagster_home_team" / "dagster.yaml").is_file()
        with chromium() as driver:
            backfill = launch_backfill(base, DAYS)  # the daemon works while the page loads
            nodes = graphql(base, "{ assetNodes { assetKey { path } kinds } }")["assetNodes"]
            kinds = {"/".join(n["assetKey"]["path"]): n["kinds"] for n in nodes}
            assert kinds["index_append"] == ["postgres"]  # badged by the index's backend
            wait_for_page(driver, f"{base}/assets/scan_report", "scan_report",
                          "Latest materialization")
            deadline = time.monotonic() + BACKFILL_TIMEOUT
            status = backfill_status(base, backfill)
            while status == "REQUESTED" and time.monotonic() < deadline:
                assert daemon.poll() is None, logs[1].read_text(errors="replace")[-3000:]
                time.sleep(0.5)
                status = backfill_status(base, backfill)
            assert status in ("COMPLETED", "COMPLETED_SUCCESS"), \
                (status, logs[1].read_text(errors="replace")[-3000:])
            wait_for_page(driver, f"{base}/assets/scan_report", "Latest materialization",
                          "records_in", absent=("Never materialized",))
            # the check's history: one row per day, each with its day, no "Skipped" rows
            history = graphql(base, CHECK_EXECUTIONS,
                              {"check": "exclusion_rates"})["assetCheckExecutions"]
            assert sorted((e["partition"], e["status"]) for e in history) == \
                [(day, "SUCCEEDED") for day in DAYS]
    finally:
        stop(daemon)
        stop(webserver)

    runs = server_rows(server, "dagster", "SELECT count(*) FROM runs")
    assert runs >= len(DAYS)  # Dagster's storage is the server's database
    out = clone / "data" / "release"
    for day in DAYS:  # the whole day was released, on the server's index
        assert (out / "mixtures" / f"cpt-mix-{day}" / "manifest.json").is_file()
        assert (out / "releases" / f"cpt-{day}" / "release.json").is_file()
    teams = {day: tree_bytes(out / "reports" / f"near-cpt-{day}") for day in DAYS}
    assert teams == sqlite_demo_reports(tmp_path, clone)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True,
                            text=True, check=True).stdout
    assert status == ""  # the deployment changed no tracked file and left nothing unignored


def server_rows(server: PostgresServer, dbname: str, sql: str) -> int:
    import psycopg

    with psycopg.connect(server.url(dbname)) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])
