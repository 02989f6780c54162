"""The Dagster UI really serves the release graph: dagster-webserver + headless Chromium.

Marked ``webserver`` (about 30 s: webserver cold start, code location load, page render).
Needs Debian's ``chromium`` and ``chromium-driver``; ``.ci/run`` installs them. The helpers
here (a release's Dagster environment, a running webserver, GraphQL, Chromium) also serve
the team deployment test (test_team_deployment.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ASSETS = ("validated_snapshot", "index_append", "scan_report", "mixture", "index_maintenance")
START_TIMEOUT = 120.0

pytestmark = pytest.mark.webserver


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(base: str, query: str, variables: dict | None = None) -> dict:
    payload: dict[str, Any] = {"query": query}
    if variables is not None:
        payload["variables"] = variables
    request = urllib.request.Request(f"{base}/graphql", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code != 400:
            raise
        body = json.load(exc)  # GraphQL's own errors
    assert "errors" not in body, body
    return body["data"]


def wait_until(what: str, probe: Callable[[], Any], server: subprocess.Popen, log: Path,
               timeout: float = START_TIMEOUT) -> Any:
    """Poll ``probe`` until it returns a true value; fail if ``server`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"{server.args[0]} exited with {server.returncode} while waiting for "
                        f"{what}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            value = probe()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            value = None
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text(errors='replace')[-3000:]}")


def release_env(tmp_path: Path, dagster_yaml: Path, **settings: str) -> tuple[dict, Path]:
    """The environment and working directory of a Dagster process of the release: an empty
    folder (so no project .env overrides the environment), a throwaway DAGSTER_HOME holding
    ``dagster_yaml``, the bundled CPT days as snapshots and outputs under ``tmp_path/out``;
    ``settings`` are further variables (e.g. ``NEAR_DEDUP_INDEX``)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(dagster_yaml, home / "dagster.yaml")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEAR_DEDUP_")}
    env.update({
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        "NEAR_DEDUP_SNAPSHOT_ROOT": str(REPO / "samples" / "cpt"),
        "NEAR_DEDUP_INDEX": str(tmp_path / "out" / "index.sqlite"),
        "NEAR_DEDUP_REPORT_ROOT": str(tmp_path / "out" / "reports"),
        "NEAR_DEDUP_MIXTURE_ROOT": str(tmp_path / "out" / "mixtures"),
        "NEAR_DEDUP_RELEASE_ROOT": str(tmp_path / "out" / "releases"),
        "NEAR_DEDUP_CONFIG": str(REPO / "config" / "near-dedup.json"),
        "NEAR_DEDUP_MIXTURE_TEMPLATE": str(REPO / "config" / "mixture-template.json"),
        "NEAR_DEDUP_WORKERS": "1",
        **settings,
    })
    return env, cwd


def start(tool: str, args: list[str], env: dict, cwd: Path, log: Path) -> subprocess.Popen:
    """``tool`` (an executable of this venv) in its own process group, output to ``log``."""
    executable = Path(sys.executable).with_name(tool)
    with open(log, "wb") as out:
        return subprocess.Popen([str(executable), *args], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop(server: subprocess.Popen) -> None:
    """Stop a process's whole group: SIGINT, then SIGKILL after a grace period."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait(timeout=10)


def location_loaded(base: str) -> bool:
    """Whether the webserver's code location has loaded (fails on a load error)."""
    data = graphql(base, """{ workspaceOrError { ... on Workspace { locationEntries {
        loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }""")
    entries = data["workspaceOrError"]["locationEntries"]
    for entry in entries:
        location = entry["locationOrLoadError"] or {}
        if location.get("__typename") == "PythonError":
            pytest.fail(f"code location failed to load: {location['message']}")
    return bool(entries) and all(e["loadStatus"] == "LOADED" and
                                 e["locationOrLoadError"]["__typename"] == "RepositoryLocation"
                                 for e in entries)


@contextmanager
def running_webserver(env: dict, cwd: Path, log: Path) -> Iterator[str]:
    """dagster-webserver of the release on a free local port, until its code location has
    loaded; yields its base URL and stops it afterwards."""
    port = free_port()
    server = start("dagster-webserver", ["-h", "127.0.0.1", "-p", str(port),
                                         "-m", "near_dedup_assets.definitions"], env, cwd, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("/server_info", lambda: urllib.request.urlopen(
            f"{base}/server_info", timeout=5).status == 200, server, log)
        wait_until("the code location", lambda: location_loaded(base), server, log)
        graphql(base, "mutation { setNuxSeen }")  # no "join the community" modal
        yield base
    finally:
        stop(server)


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium through Selenium (skips without Debian's chromium)."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("Debian chromium and chromium-driver are not installed (.ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--window-size=1600,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for_page(driver: Any, url: str, *texts: str, absent: tuple[str, ...] = (),
                  timeout: float = 60) -> None:
    """Open ``url`` and wait until every one of ``texts`` is on the page and none of
    ``absent`` (e.g. what the page shows while it loads its data)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    try:
        WebDriverWait(driver, timeout, poll_frequency=0.5).until(
            lambda d: all(text in d.page_source for text in texts)
            and not any(text in d.page_source for text in absent))
    except TimeoutException:
        shown = driver.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"{url} did not show {[t for t in texts if t not in driver.page_source]} "
                    f"(or still shows {[t for t in absent if t in driver.page_source]}) "
                    f"within {timeout} s; it shows:\n{shown[:3000]}")
    assert "Internal Server Error" not in driver.page_source


def location_name(base: str) -> str:
    data = graphql(base, "{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")
    [entry] = data["workspaceOrError"]["locationEntries"]
    return entry["name"]


def launch_run(base: str, assets: list[str], checks: list[tuple[str, str]],
               day: str | None) -> str:
    """Launch a run of ``assets`` and ``checks`` ((asset, check name) pairs) for ``day`` (None:
    without a partition), as the UI's Materialize and Execute buttons do; returns its id."""
    params = {"selector": {"repositoryLocationName": location_name(base),
                           "repositoryName": "__repository__", "jobName": "__ASSET_JOB",
                           "assetSelection": [{"path": [a]} for a in assets],
                           "assetCheckSelection": [{"assetKey": {"path": [a]}, "name": name}
                                                   for a, name in checks]},
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": day}]
                                    if day is not None else []}}
    data = graphql(base, """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
        ... on InvalidSubsetError { message } } }""", {"p": params})
    launched = data["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


def run_status(base: str, run_id: str, timeout: float = 300) -> str:
    """The run's final status (SUCCESS, FAILURE, CANCELED)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = graphql(base, 'query($id: ID!) { runOrError(runId: $id) { ... on Run { status } '
                               '} }', {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return status
        time.sleep(0.2)
    pytest.fail(f"run {run_id} did not finish in {timeout} s")


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    """dagster-webserver with the project's own dagster_home/dagster.yaml (SQLite storage),
    launching runs at once (no daemon: the default run coordinator)."""
    tmp_path = tmp_path_factory.mktemp("webserver")
    yaml = tmp_path / "dagster.yaml"
    yaml.write_text((REPO / "dagster_home" / "dagster.yaml").read_text(encoding="utf-8")
                    + "\nrun_coordinator:\n  module: dagster.core.run_coordinator\n"
                      "  class: DefaultRunCoordinator\n", encoding="utf-8")
    env, cwd = release_env(tmp_path, yaml)
    with running_webserver(env, cwd, tmp_path / "webserver.log") as base:
        yield base


def test_webserver_serves_the_asset_graph(webserver, tmp_path):
    nodes = graphql(webserver, """{ assetNodes { assetKey { path } isPartitioned
                                    hasAssetChecks pools groupName kinds } }""")["assetNodes"]
    by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    assert set(by_key) == set(ASSETS)
    assert all(n["isPartitioned"] and n["groupName"] == "release" for n in nodes)
    assert by_key["scan_report"]["hasAssetChecks"] and by_key["mixture"]["hasAssetChecks"]
    assert by_key["index_append"]["pools"] == ["index_writer"]
    assert by_key["index_maintenance"]["pools"] == ["index_writer"]
    assert by_key["index_append"]["kinds"] == ["sqlite"]  # the index's backend

    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium() as driver:
        wait_for_page(driver, f"{webserver}/asset-groups", *ASSETS)
        # The page sets its title ("Global asset lineage") after its graph is on it; under
        # load that can come later than the asset names.
        try:
            WebDriverWait(driver, 30, poll_frequency=0.2).until(
                lambda d: "asset" in d.title.lower())
        except TimeoutException:
            pytest.fail(f"the asset graph page's title is {driver.title!r} after 30 s")
        time.sleep(1.0)  # let the graph layout settle for the screenshot
        screenshot = tmp_path / "asset-graph.png"
        driver.save_screenshot(str(screenshot))
        assert screenshot.stat().st_size > 10_000


CHECK_EXECUTIONS = """query($check: String!) {
    assetCheckExecutions(assetKey: {path: ["scan_report"]}, checkName: $check, limit: 10) {
        runId status partition evaluation { success metadataEntries { label
            ... on FloatMetadataEntry { floatValue } ... on TextMetadataEntry { text } } } } }"""


def test_a_check_executed_for_a_day_reports_that_days_rates_and_without_a_day_the_latest(
        webserver):
    node = graphql(webserver, """{ assetNodeOrError(assetKey: {path: ["scan_report"]}) {
        ... on AssetNode { assetChecksOrError { ... on AssetChecks {
            checks { name blocking partitionDefinition { type } } } } } } }""")
    checks = node["assetNodeOrError"]["assetChecksOrError"]["checks"]
    by_name = {c["name"]: c for c in checks}
    # warns by default: not badged blocking; partitioned by release day like its asset
    assert by_name["exclusion_rates"]["blocking"] is False
    assert by_name["report_checksums"]["blocking"] is True
    assert by_name["exclusion_rates"]["partitionDefinition"]["type"] == "TIME_WINDOW"

    day = "2026-11-25"
    every_check = [("scan_report", "report_checksums"), ("scan_report", "exclusion_rates"),
                   ("mixture", "mixture_verify"), ("mixture", "no_taken_down_content")]
    released = launch_run(webserver, list(ASSETS), every_check, day)
    assert run_status(webserver, released) == "SUCCESS"

    # "Execute" of the check for one day: that day's rates
    alone = launch_run(webserver, [], [("scan_report", "exclusion_rates")], day)
    assert run_status(webserver, alone) == "SUCCESS"
    executions = graphql(webserver, CHECK_EXECUTIONS,
                         {"check": "exclusion_rates"})["assetCheckExecutions"]
    latest = executions[0]
    assert (latest["runId"], latest["status"], latest["partition"]) == \
        (alone, "SUCCEEDED", day)
    entries = {e["label"]: e.get("floatValue", e.get("text"))
               for e in latest["evaluation"]["metadataEntries"]}
    assert entries["day"] == day and latest["evaluation"]["success"] is True
    rates = {k: v for k, v in entries.items() if k.startswith("exclusion_rate_")}
    assert set(rates) == {"exclusion_rate_books", "exclusion_rate_code_docs",
                          "exclusion_rate_news", "exclusion_rate_web"}
    assert all(isinstance(v, float) and 0 <= v <= 1 for v in rates.values())

    # a day without a snapshot: released as "no release", every asset and check green
    empty = "2026-11-28"
    nothing = launch_run(webserver, list(ASSETS), every_check, empty)
    assert run_status(webserver, nothing) == "SUCCESS"
    statuses = graphql(webserver, PARTITION_STATUSES)["assetNodes"]
    for node in statuses:  # the UI's partition bars: both days materialized, none failed
        ranges = node["assetPartitionStatuses"]["ranges"]
        assert [(r["startKey"], r["endKey"], r["status"]) for r in ranges] == \
            [(day, day, "MATERIALIZED"), (empty, empty, "MATERIALIZED")], node

    # "Execute all" on the checks tab (no day): each check verifies the latest released day
    # and records it for that day; the check's latest result is that real result
    every = launch_run(webserver, [], every_check, None)
    assert run_status(webserver, every) == "SUCCESS"
    executions = graphql(webserver, CHECK_EXECUTIONS,
                         {"check": "exclusion_rates"})["assetCheckExecutions"]
    latest = executions[0]
    assert (latest["runId"], latest["status"], latest["partition"]) == \
        (every, "SUCCEEDED", day)
    entries = {e["label"]: e.get("text") for e in latest["evaluation"]["metadataEntries"]}
    assert entries["executed"] == ("without a release day: checked the latest released day, "
                                   f"{day}")

    with chromium() as driver:  # what the lead sees: the empty day's page, the checks tab
        wait_for_page(driver, f"{webserver}/assets/scan_report?view=partitions&partition={empty}",
                      "no_release", f"no release on {empty}")
        wait_for_page(driver, f"{webserver}/assets/scan_report?view=checks", "exclusion_rates",
                      "report_checksums", "Passed", absent=("Execution failed", "Failed"))


PARTITION_STATUSES = """{ assetNodes { assetKey { path } assetPartitionStatuses {
    ... on TimePartitionStatuses { ranges { startKey endKey status } } } } }"""


def test_the_readme_ui_command_serves_the_projects_instance_as_dagster_recommends(tmp_path):
    """The README's UI command (`dg dev`, what Dagster 1.13 recommends) in the root of a copy
    of the project after `cp .env.example .env`: the UI serves the release on the instance
    that .env names (``dagster_home/``), with no SupersessionWarning in its output."""
    from test_readme import README, project_copy

    [line] = [row.split("#")[0].strip() for row in README.splitlines() if "bin/dg dev" in row]
    assert line == ".venv/bin/dg dev"
    root = project_copy(tmp_path)
    for name in ("pyproject.toml", ".env.example", "dagster_home/dagster.yaml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    (root / "near_dedup_assets").symlink_to(REPO / "near_dedup_assets")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEAR_DEDUP_", "DAGSTER_", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(REPO)
    port = free_port()
    log = tmp_path / "dg-dev.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(["bash", "-e", "-c", f"cp .env.example .env\n{line} -p {port}"],
                                  cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("/server_info", lambda: urllib.request.urlopen(
            f"{base}/server_info", timeout=5).status == 200, server, log)
        wait_until("the code location", lambda: location_loaded(base), server, log)
        nodes = graphql(base, "{ assetNodes { assetKey { path } } }")["assetNodes"]
        assert {"/".join(n["assetKey"]["path"]) for n in nodes} == set(ASSETS)
    finally:
        stop(server)
    assert (root / "dagster_home" / "history" / "runs.db").is_file()  # .env's DAGSTER_HOME
    output = log.read_text(errors="replace")
    assert "SupersessionWarning" not in output and "superseded" not in output, output[-3000:]
