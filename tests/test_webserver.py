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
ASSETS = ("validated_snapshot", "index_append", "scan_report", "mixture")
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
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.load(response)
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
        time.sleep(0.5)
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


def _loaded(base: str) -> bool:
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
        wait_until("the code location", lambda: _loaded(base), server, log)
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


@pytest.fixture
def webserver(tmp_path):
    """dagster-webserver with the project's own dagster_home/dagster.yaml (SQLite storage)."""
    env, cwd = release_env(tmp_path, REPO / "dagster_home" / "dagster.yaml")
    with running_webserver(env, cwd, tmp_path / "webserver.log") as base:
        yield base


def test_webserver_serves_the_asset_graph(webserver, tmp_path):
    nodes = graphql(webserver, """{ assetNodes { assetKey { path } isPartitioned
                                    hasAssetChecks pools groupName } }""")["assetNodes"]
    by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    assert set(by_key) == set(ASSETS)
    assert all(n["isPartitioned"] and n["groupName"] == "release" for n in nodes)
    assert by_key["scan_report"]["hasAssetChecks"] and by_key["mixture"]["hasAssetChecks"]
    assert by_key["index_append"]["pools"] == ["sqlite_index_writer"]

    with chromium() as driver:
        wait_for_page(driver, f"{webserver}/asset-groups", *ASSETS)
        time.sleep(1.0)  # let the graph layout settle for the screenshot
        screenshot = tmp_path / "asset-graph.png"
        driver.save_screenshot(str(screenshot))
        assert screenshot.stat().st_size > 10_000
        assert "Global asset lineage" in driver.title or "asset" in driver.title.lower()
