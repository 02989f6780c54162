"""The team deployment of docs/postgres.md, brought up as written: one PostgreSQL server set up
by ``scripts/setup_postgres.sh`` holds Dagster's storage (``docs/dagster-postgres.yaml``) and
the index; ``dagster-webserver`` and ``dagster-daemon`` run on it; the UI's asset page loads in
headless Chromium; a two-day asset backfill launched through GraphQL completes; and the two
days' reports are byte-identical to the same days released on the SQLite demo configuration.

Marked ``webserver``. Dagster's backfill daemon looks at a backfill every 30 s (a constant,
``DEFAULT_DAEMON_INTERVAL_SECONDS``, that no setting changes) and launches one step of the
backfill per look; the daemon here is ``dagster-daemon run`` with that constant at 2 s, so the
backfill takes about a minute instead of three; everything else is the deployment as written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from helpers import tree_bytes
from pg_server import PASSWORD, PostgresServer, require_bindir
from test_webserver import (
    CHECK_EXECUTIONS,
    REPO,
    chromium,
    graphql,
    release_env,
    running_webserver,
    stop,
    wait_for_page,
)

pytestmark = pytest.mark.webserver

DAYS = ["2026-11-25", "2026-11-26"]
ROLE, ROLE_PASSWORD = "near_dedup", "team-secret"
BACKFILL_TIMEOUT = 300.0
DAEMON_INTERVAL = 2  # seconds between the backfill daemon's looks (Dagster's default: 30)
# `dagster-daemon run …` (its console script), the daemon's look interval set first.
DAEMON = f"""
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


def setup_databases(server: PostgresServer, *databases: str) -> None:
    """The set-up step of docs/postgres.md, as written, with the test server's address."""
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(server.port),
           "PGUSER": "postgres", "PGPASSWORD": PASSWORD, "NEAR_DEDUP_PG_PASSWORD": ROLE_PASSWORD}
    run = subprocess.run(["sh", str(REPO / "scripts" / "setup_postgres.sh"), ROLE, *databases],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"role {ROLE} owns database(s): {' '.join(databases)}"


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


def sqlite_demo_reports(tmp_path: Path) -> dict[str, dict[str, bytes]]:
    """The same two days released in process on the demo configuration (.env.example's
    values: a SQLite index, the shipped config and mixture template), day by day."""
    from near_dedup_assets.assets import RELEASE_ASSETS
    from near_dedup_assets.checks import RELEASE_CHECKS
    from near_dedup_assets.resources import ReleaseSettings

    out = tmp_path / "sqlite"
    settings = ReleaseSettings(
        snapshot_root=str(REPO / "samples" / "cpt"), index=str(out / "index" / "cpt.sqlite"),
        config=str(REPO / "config" / "near-dedup.json"), report_root=str(out / "reports"),
        mixture_root=str(out / "mixtures"), release_root=str(out / "releases"),
        mixture_template=str(REPO / "config" / "mixture-template.json"), workers=1)
    with dg.instance_for_test() as instance:
        for day in DAYS:
            result = dg.materialize([*RELEASE_ASSETS, *RELEASE_CHECKS], partition_key=day,
                                    resources={"release": settings}, instance=instance)
            assert result.success
    return {day: tree_bytes(settings.report_dir(day)) for day in DAYS}


def test_the_team_deployment_comes_up_and_releases_two_days(server, tmp_path):
    setup_databases(server, "dagster", "near_dedup_cpt")
    index_url = (f"postgresql://{ROLE}:{ROLE_PASSWORD}@127.0.0.1:{server.port}/"
                 f"near_dedup_cpt")
    env, cwd = release_env(
        tmp_path, REPO / "docs" / "dagster-postgres.yaml", NEAR_DEDUP_INDEX=index_url,
        DAGSTER_PG_HOST="127.0.0.1", DAGSTER_PG_PORT=str(server.port), DAGSTER_PG_DB="dagster",
        DAGSTER_PG_USER=ROLE, DAGSTER_PG_PASSWORD=ROLE_PASSWORD)
    daemon_log = tmp_path / "daemon.log"
    with open(daemon_log, "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-c", DAEMON, "run", "-m", "near_dedup_assets.definitions"],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with running_webserver(env, cwd, tmp_path / "webserver.log") as base, \
                chromium() as driver:
            backfill = launch_backfill(base, DAYS)  # the daemon works while the page loads
            nodes = graphql(base, "{ assetNodes { assetKey { path } kinds } }")["assetNodes"]
            kinds = {"/".join(n["assetKey"]["path"]): n["kinds"] for n in nodes}
            assert kinds["index_append"] == ["postgres"]  # badged by the index's backend
            wait_for_page(driver, f"{base}/assets/scan_report", "scan_report",
                          "Latest materialization")
            deadline = time.monotonic() + BACKFILL_TIMEOUT
            status = backfill_status(base, backfill)
            while status == "REQUESTED" and time.monotonic() < deadline:
                assert daemon.poll() is None, daemon_log.read_text(errors="replace")[-3000:]
                time.sleep(2)
                status = backfill_status(base, backfill)
            assert status in ("COMPLETED", "COMPLETED_SUCCESS"), \
                (status, daemon_log.read_text(errors="replace")[-3000:])
            wait_for_page(driver, f"{base}/assets/scan_report", "Latest materialization",
                          "records_in", absent=("Never materialized",))
            # the check's history: one row per day, each with its day, no "Skipped" rows
            history = graphql(base, CHECK_EXECUTIONS,
                              {"check": "exclusion_rates"})["assetCheckExecutions"]
            assert sorted((e["partition"], e["status"]) for e in history) == \
                [(day, "SUCCEEDED") for day in DAYS]
    finally:
        stop(daemon)

    out = tmp_path / "out"
    for day in DAYS:  # the whole day was released, on the server's index
        assert (out / "mixtures" / f"cpt-mix-{day}" / "manifest.json").is_file()
        assert (out / "releases" / f"cpt-{day}" / "release.json").is_file()
    teams = {day: tree_bytes(out / "reports" / f"near-cpt-{day}") for day in DAYS}
    assert teams == sqlite_demo_reports(tmp_path)
