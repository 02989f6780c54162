"""A report whose input packages were given by relative paths, read from another folder or
after the folder it was scanned in moved (docs/audit.md, "Where the packages are found"):
`report explain`, `report diff` and `report html` find the packages below the folders that
hold the report, or in the folders given with ``--packages``; otherwise each says, in one
note per package, what to pass. The report's bytes never depend on where it is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import SAMPLES, run_cli, tree_bytes

pytestmark = pytest.mark.slow  # two scans and three sites

DAYS = {"2026-11-25": "cpt-v1", "2026-11-26": "cpt-v2"}
RELATIVE = [f"samples/cpt/{day}/{name}" for day, name in DAYS.items()]


def ok(*argv: object) -> tuple[str, str]:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out, err


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout holding two sample packages, scanned from its top with relative paths
    into ``reports/near`` (as the README's commands run)."""
    root = tmp_path / "clone"
    for rel in RELATIVE:
        shutil.copytree(SAMPLES / Path(rel).relative_to("samples"), root / rel)
    monkeypatch.chdir(root)
    ok("--index", "index.sqlite", "index", "--inputs", *RELATIVE, "--workers", 1)
    ok("--index", "index.sqlite", "scan", "--inputs", *RELATIVE, "--output", "reports/near",
       "--workers", 1)
    recorded = json.loads((root / "reports/near/manifest.json").read_text())["inputs"]
    assert [i["path"] for i in recorded] == RELATIVE  # as given: the same on every machine
    return root


def excluded(report: Path) -> tuple[str, str]:
    for line in (report / "decisions.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["reason"] == "near_duplicate":
            return d["package_id"], d["sample_id"]
    raise AssertionError("no near duplicate")


def test_a_report_in_a_moved_checkout_finds_its_packages_from_any_folder(
        clone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid, sid = excluded(clone / "reports/near")
    explained, _ = ok("report", "explain", "reports/near", pid, sid, "--json")
    diffed, _ = ok("report", "diff", "reports/near", "reports/near", "--json")
    ok("report", "html", "reports/near", "--output", tmp_path / "site-in-place")
    report_bytes = tree_bytes(clone / "reports/near")

    moved = clone.rename(tmp_path / "elsewhere")  # another folder, or machine
    somewhere = tmp_path / "somewhere"
    somewhere.mkdir()
    monkeypatch.chdir(somewhere)
    report = moved / "reports/near"
    out, err = ok("report", "explain", report, pid, sid, "--json")
    assert (json.loads(out), err) == (json.loads(explained), "")
    assert json.loads(out)["sample"]["text_available"] and json.loads(out)["diff"]
    out, err = ok("report", "diff", report, report, "--json")
    assert (out, err) == (diffed.replace("reports/near", str(report)), "")
    out, err = ok("report", "html", report, "--output", tmp_path / "site-moved")
    assert err == ""
    assert tree_bytes(tmp_path / "site-moved") == tree_bytes(tmp_path / "site-in-place")
    assert tree_bytes(report) == report_bytes


def test_a_report_away_from_its_packages_says_what_to_pass_and_takes_packages(
        clone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = shutil.copytree(clone / "reports/near", tmp_path / "copied" / "near")
    pid, sid = excluded(report)
    monkeypatch.chdir(tmp_path)
    _, err = ok("report", "explain", report, pid, sid)
    notes = err.strip().splitlines()
    assert notes[:2] == [
        f"near-dedup: note: package {name} is no longer readable at {rel} (package {rel}: "
        f"no such package directory; nor below the folders holding the report or "
        f"--packages): the path is relative to the folder the scan ran in; run there, or "
        f"pass --packages DIR, that folder or one that holds {name}/; its texts are not shown"
        for rel, name in zip(RELATIVE, DAYS.values(), strict=True)]
    _, err = ok("report", "diff", report, report)
    assert "counted with domain null" in err

    with_root, err = ok("report", "explain", report, pid, sid, "--packages", clone)
    assert err == "" and "text diff:" in with_root
    folders = [clone / Path(rel).parent for rel in RELATIVE]
    by_name, err = ok("report", "explain", report, pid, sid, "--packages", *folders)
    assert (by_name, err) == (with_root, "")
    _, err = ok("report", "diff", report, report, "--packages", clone)
    assert err == ""
    _, err = ok("report", "html", report, "--output", tmp_path / "site", "--packages", clone)
    assert err == ""

    # a folder of the same name holding another package is not taken for it
    other = tmp_path / "other" / "cpt-v1"
    shutil.copytree(clone / RELATIVE[0], other)
    (other / "manifest.json").write_text((other / "manifest.json").read_text() + "\n")
    _, err = ok("report", "explain", report, pid, sid, "--packages", other.parent)
    assert f"package cpt-v1 at {other} has changed since the report was frozen" in err
