"""The tamper suite (tests/tamper.py) against both verifiers, on a real report of the bundled
cpt samples (index v1, index v2, scan v1 + v2) and a real mixture built from it.

Every case must make `report verify` / `mixture verify` exit 1 with exactly one stderr line
(``near-dedup: error: …``, no traceback); the untouched folders verify. The case ids carry
their family (``byte``, ``line``, ``listing``, ``tree``, ``semantic``), so
``pytest --collect-only -q tests/test_tamper.py`` counts the cases tried.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, refused, run_cli
from tamper import Case, files_of, mixture_cases, report_cases

from near_dedup_core.fsutil import CHECKSUMS

# The whole tamper catalogue (about 200 cases); test_report_verify.py and test_mixture.py
# keep tampering cases of both verifiers in the fast run.
pytestmark = pytest.mark.slow

CONFIG = REPO / "config" / "near-dedup.json"
INPUTS = [SAMPLES / "cpt/2026-11-25/cpt-v1", SAMPLES / "cpt/2026-11-26/cpt-v2"]
REPORT_CASES = report_cases()
MIXTURE_CASES = mixture_cases()


def _ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def frozen(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tamper")
    index = root / "cpt.sqlite"
    for pkg in INPUTS:
        _ok("--index", index, "--config", CONFIG, "index", "--inputs", pkg, "--workers", 1)
    report = root / "report"
    _ok("--index", index, "--config", CONFIG, "scan", "--inputs", *INPUTS, "--output", report,
        "--workers", 1)
    cfg = root / "mix.json"
    cfg.write_text(json.dumps({
        "name": "mix", "kind": "cpt", "inputs": [str(p) for p in INPUTS],
        "target_records": 10, "group_by": "domain",
        "strategy": {"type": "temperature", "temperature": 2.0},
        "quality": {"min_chars": 0}, "redistribute": True, "seed": 7,
        "near_dedup_report": str(report)}), encoding="utf-8")
    mixture = root / "mixture"
    _ok("mixture", "build", cfg, "--output", mixture)
    return {"report": report, "mixture": mixture}


def test_the_suite_knows_every_file_of_both_folders(frozen):
    """The case lists are written against the folders' file lists; a new file in either
    format must get its cases."""
    from tamper import MIXTURE_FILES, REPORT_FILES
    assert files_of(frozen["report"]) == REPORT_FILES
    assert files_of(frozen["mixture"]) == MIXTURE_FILES


def test_untouched_folders_verify(frozen):
    assert "OK" in _ok("report", "verify", frozen["report"])
    assert "OK" in _ok("mixture", "verify", frozen["mixture"])
    assert "OK" in _ok("report", "verify", frozen["mixture"] / "near-dedup")


def _refused(kind: str, source: Path, case: Case, tmp_path: Path) -> str:
    folder, outside = tmp_path / kind, tmp_path / "outside"
    shutil.copytree(source, folder)
    outside.mkdir()
    case.edit(folder, outside)
    line = refused(["--quiet", kind, "verify", folder])
    # The embedded report of a mixture is named as ``report <mixture>/near-dedup``.
    assert str(folder) in line, (case.id, line)
    return line


@pytest.mark.parametrize("case", REPORT_CASES, ids=[c.id for c in REPORT_CASES])
def test_report_tampering_is_refused_in_one_line(frozen, case, tmp_path):
    _refused("report", frozen["report"], case, tmp_path)


@pytest.mark.parametrize("case", MIXTURE_CASES, ids=[c.id for c in MIXTURE_CASES])
def test_mixture_tampering_is_refused_in_one_line(frozen, case, tmp_path):
    _refused("mixture", frozen["mixture"], case, tmp_path)


def test_verify_never_reads_outside_the_folder(frozen, tmp_path, monkeypatch):
    """An extra ``../evil.txt`` line is refused before any file is opened for hashing."""
    folder = tmp_path / "report"
    shutil.copytree(frozen["report"], folder)
    (tmp_path / "evil.txt").write_text("x\n", encoding="utf-8")
    with open(folder / CHECKSUMS, "a", encoding="utf-8") as fh:
        fh.write(f"{'0' * 64}  ../evil.txt\n")
    opened: list[str] = []
    real_open = __import__("os").open

    def spy(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("near_dedup_core.fsutil.os.open", spy)
    code, _, err = run_cli("--quiet", "report", "verify", folder)
    assert code == 1 and "../evil.txt" in err and "not a plain relative path" in err
    assert not any("evil" in p for p in opened)
