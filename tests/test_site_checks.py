"""`report html`: the reports shown beside the main one are verified as `report verify`
verifies them, a contamination report must be of the report's pool, and a stopped build
(SIGTERM, Ctrl-C) leaves no temporary folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, make_package, refused, run_cli
from tamper import report_semantic_cases
from test_contamination_tamper import recounted
from test_site import scan_days

from near_dedup_core.fsutil import write_checksums
from near_dedup_core.site import build, diffs
from near_dedup_core.site.render import Writer

pytestmark = pytest.mark.slow  # whole reports scanned and built per module

DAYS = ["2026-11-25", "2026-11-26", "2026-11-27"]
POOL = SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("site-checks")
    return {"new": scan_days(root, DAYS, "rep3"), "old": scan_days(root, DAYS[:2], "rep2"),
            "root": root}


def item_of(pool: Path) -> str:
    """An eval item cut from the first training sample of ``pool``."""
    shard = sorted((pool / "data" / "train").glob("*.jsonl"))[0]
    return " ".join(json.loads(shard.read_text().splitlines()[0])["text"].split(" ")[3:40])


@pytest.fixture(scope="module")
def contaminations(reports) -> dict[str, Path]:
    """A contamination report of cpt-v2 (an input of the report) and one of a package that
    holds the same text but is no input of it."""
    root = reports["root"] / "contam"
    item = item_of(POOL)
    evals = make_package(root, "evals-v1", {"test": [{"id": "q1", "text": item,
                                                      "domain": "eval"}]})
    other = make_package(root, "cpt-other", {"train": [
        {"id": "o1", "text": f"Another pool's text, then {item} and more.", "domain": "web"}]})
    out = {}
    for name, pool in (("own", POOL), ("other", other)):
        code, _, err = run_cli("--quiet", "contamination", "--evals", evals, "--inputs", pool,
                               "--output", root / name, "--workers", 1)
        assert code == 0, err
        out[name] = root / name
    return out


def test_a_contamination_report_of_another_pool_is_refused(reports, contaminations,
                                                           tmp_path):
    refused(["--quiet", "report", "html", reports["new"], "--contamination",
             contaminations["other"], "--output", tmp_path / "site"],
            f"contamination report {contaminations['other']} is of another pool than "
            f"report {reports['new']}: its package cpt-other is not an input of the "
            f"report (inputs: cpt-v1, cpt-v2, cpt-v3)")
    assert not (tmp_path / "site").exists() and list(tmp_path.iterdir()) == []
    # the report's own pool (here one of its three inputs) is shown
    code, _, err = run_cli("--quiet", "report", "html", reports["new"], "--contamination",
                           contaminations["own"], "--output", tmp_path / "site")
    assert code == 0, err


def test_a_contamination_report_of_another_version_of_a_package_is_refused(
        reports, contaminations, tmp_path):
    """The same package id with another manifest: not the pool the report was made of."""
    forged = tmp_path / "forged"
    shutil.copytree(contaminations["own"], forged)
    manifest = json.loads((forged / "manifest.json").read_text())
    manifest["inputs"][0]["manifest_sha256"] = "0" * 64
    (forged / "manifest.json").write_text(json.dumps(manifest))
    (forged / "checksums.sha256").unlink()
    write_checksums(forged)
    refused(["--quiet", "report", "html", reports["new"], "--contamination", forged,
             "--output", tmp_path / "site"], f"contamination report {forged} is of another "
            f"pool than report {reports['new']}: its package cpt-v2 has manifest sha256 "
            f"000000000000…, the report recorded")
    assert not (tmp_path / "site").exists()


def test_a_resealed_contamination_report_is_verified_as_report_verify_does(
        reports, contaminations, tmp_path):
    """Its pair removed and every count recomputed: only its packages tell, and `report
    verify` reads them at the paths it records; so does `report html`."""
    forged = tmp_path / "forged"
    shutil.copytree(contaminations["own"], forged)
    recounted(lambda rows: rows[1:])(forged)
    (forged / "checksums.sha256").unlink()
    write_checksums(forged)
    code, _, verify_err = run_cli("--quiet", "report", "verify", forged)
    assert code == 1, verify_err
    line = refused(["--quiet", "report", "html", reports["new"], "--contamination", forged,
                    "--output", tmp_path / "site"])
    assert line + "\n" == verify_err
    assert not (tmp_path / "site").exists()


def test_a_resealed_previous_report_is_verified_as_report_verify_does(reports, contaminations,
                                                                       tmp_path):
    """--against: an exclusion flipped to keep, the counts recomputed and the folder resealed
    is refused in the line `report verify` gives; a contamination report is no previous
    report."""
    case = next(c for c in report_semantic_cases() if "flipped to keep" in c.name)
    forged = tmp_path / "old-forged"
    shutil.copytree(reports["old"], forged)
    case.edit(forged, tmp_path)
    code, _, verify_err = run_cli("--quiet", "report", "verify", forged)
    assert code == 1, verify_err
    line = refused(["--quiet", "report", "html", reports["new"], "--against", forged,
                    "--output", tmp_path / "site"])
    assert line + "\n" == verify_err
    refused(["--quiet", "report", "html", reports["new"], "--against",
             contaminations["own"], "--output", tmp_path / "site"],
            f"--against {contaminations['own']}: a contamination report; --against takes a "
            f"near-dedup report")
    assert not (tmp_path / "site").exists()


# --------------------------------------------------------------------------- stopped builds


def test_a_stop_inside_a_task_of_the_build_stops_it_there(reports, tmp_path, monkeypatch):
    """Ctrl-C (or the CLI's SIGTERM) landing in a diff page's task, run in this process for
    a small report: the build stops there (no page is written after it) and its temporary
    folder is removed."""
    written: list[str] = []
    page = Writer.page

    def recording(self, rel, *args, **kwargs):
        written.append(rel)
        return page(self, rel, *args, **kwargs)

    def stopped(*_args, **_kwargs):
        written.append("<stop>")
        raise KeyboardInterrupt

    monkeypatch.setattr(Writer, "page", recording)
    monkeypatch.setattr(diffs, "write_part", stopped)
    with pytest.raises(KeyboardInterrupt):
        build.build_site(reports["new"], tmp_path / "site")
    assert written == ["<stop>"]
    assert list(tmp_path.iterdir()) == []


def paused_build(report: Path, output: Path, flag: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NEAR_DEDUP_PAUSE": f"site-pages:{flag}"}
    return subprocess.Popen([sys.executable, "-m", "near_dedup_core", "--quiet", "report",
                             "html", str(report), "--output", str(output)], env=env,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_build_removes_its_temporary_folder(reports, tmp_path, sig):
    """The command paused while it writes the pages into its temporary folder, then
    stopped: it exits at once with its one line, and nothing is left beside the output."""
    out, flag = tmp_path / "out" / "site", tmp_path / "paused"
    proc = paused_build(reports["new"], out, flag)
    try:
        deadline = time.monotonic() + 300
        while not flag.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "never paused"
            time.sleep(0.05)
        assert [p.name for p in out.parent.iterdir()] == [f".site.tmp-{proc.pid}"]
        proc.send_signal(sig)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr else ""
    stopped = {signal.SIGTERM: (143, "terminated"), signal.SIGINT: (130, "interrupted")}[sig]
    assert (proc.returncode, err) == (stopped[0], f"paused at site-pages\n"
                                                  f"near-dedup: {stopped[1]}\n")
    assert list(out.parent.iterdir()) == []
