"""Every long command shows progress on stderr: with stderr a file (a log), throttled lines
naming the command; ``--quiet`` none. ``NEAR_DEDUP_PROGRESS_INTERVAL=0`` lowers the throttle
and the delay so that the small sample packages show every step."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, refused, run_cli

from near_dedup_core.progress import INTERVAL_ENV

CPT_V1 = SAMPLES / "cpt" / "2026-11-25" / "cpt-v1"
CPT_V2 = SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"


@pytest.fixture
def every_step(monkeypatch):
    monkeypatch.setenv(INTERVAL_ENV, "0")


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("progress")
    idx, report = root / "idx.sqlite", root / "report"
    for package in (CPT_V1, CPT_V2):
        assert run_cli("--quiet", "--index", idx, "index", "--inputs", package)[0] == 0
    assert run_cli("--quiet", "--index", idx, "scan", "--inputs", CPT_V1, CPT_V2,
                   "--output", report)[0] == 0
    config = json.loads((REPO / "config" / "mixture-example.json").read_text(encoding="utf-8"))
    config.update(inputs=[str(CPT_V1), str(CPT_V2)], near_dedup_report=str(report))
    (root / "mix.json").write_text(json.dumps(config), encoding="utf-8")
    assert run_cli("--quiet", "mixture", "build", root / "mix.json", "--output",
                   root / "mixture")[0] == 0
    return {"index": idx, "report": report, "mix": root / "mix.json", "mixture": root / "mixture"}


def shows(argv: list, *labels: str) -> list[str]:
    """Run ``argv`` (stderr is not a terminal): it succeeds, and its stderr is progress
    lines, each of one of ``labels``, every label shown; the same with --quiet: no stderr."""
    code, out, err = run_cli(*argv)
    assert code == 0, err
    lines = err.splitlines()
    assert lines and "\r" not in err, err
    assert all(line.startswith(labels) for line in lines), err
    for label in labels:
        assert any(line.startswith(label) for line in lines), (label, err)
    return lines


def quiet(argv: list) -> None:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0 and out and err == "", err


def test_index_shows_its_records(every_step, tmp_path):
    lines = shows(["--index", tmp_path / "a.sqlite", "index", "--inputs", CPT_V1],
                  "index: records: ")
    assert lines[-1].startswith("index: records: 49/49 (100%)")
    quiet(["--index", tmp_path / "b.sqlite", "index", "--inputs", CPT_V1])


def test_scan_shows_its_stages_and_pairs(every_step, released, tmp_path):
    lines = shows(["--index", released["index"], "scan", "--inputs", CPT_V1, CPT_V2,
                   "--output", tmp_path / "r1"], "scan: ")
    assert "scan: 1/6 (17%) pool loaded; finding candidate pairs" in lines[0]
    assert any(line.startswith("scan: verify pairs: ") for line in lines)
    assert lines[-1].startswith("scan: 6/6 (100%)")
    quiet(["--index", released["index"], "scan", "--inputs", CPT_V1, CPT_V2,
           "--output", tmp_path / "r2"])


def test_contamination_shows_its_items_and_records(every_step, tmp_path):
    evals = shutil.copytree(CPT_V1, tmp_path / "evals")
    manifest = json.loads((evals / "manifest.json").read_text(encoding="utf-8"))
    manifest["package_id"] = "evals-v1"
    (evals / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    shows(["contamination", "--evals", evals, "--inputs", CPT_V2, "--output", tmp_path / "c1"],
          "contamination: ")
    quiet(["contamination", "--evals", evals, "--inputs", CPT_V2, "--output", tmp_path / "c2"])


def test_report_html_shows_its_stages(every_step, released, tmp_path):
    lines = shows(["report", "html", released["report"], "--output", tmp_path / "s1"],
                  "report html: ")
    assert lines[-1].startswith("report html: 6/6 (100%) writing checksums.sha256")
    quiet(["report", "html", released["report"], "--output", tmp_path / "s2"])


def test_mixture_plan_build_and_verify_show_their_records(every_step, released, tmp_path):
    shows(["mixture", "plan", released["mix"]], "mixture: reading inputs: ")
    shows(["mixture", "build", released["mix"], "--output", tmp_path / "m1"],
          "mixture: reading inputs: ", "mixture: writing records: ")
    lines = shows(["mixture", "verify", released["mixture"]], "mixture verify: records: ")
    assert lines[-1].startswith("mixture verify: records: 43/43 (100%)")
    quiet(["mixture", "build", released["mix"], "--output", tmp_path / "m2"])
    quiet(["mixture", "verify", released["mixture"]])


def test_index_compact_shows_its_stages(every_step, tmp_path):
    pytest.importorskip("pyiceberg")
    index = f"iceberg://{tmp_path / 'ice'}"
    for package in (CPT_V1, CPT_V2):
        assert run_cli("--quiet", "--index", index, "index", "--inputs", package)[0] == 0
    lines = shows(["--index", index, "index", "compact", "--full"], "index compact: ")
    assert lines[-1].startswith("index compact: 4/4 (100%) committing")
    assert run_cli("--quiet", "--index", index, "index", "--inputs", CPT_V1)[0] == 0


def test_without_the_setting_quick_work_prints_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv(INTERVAL_ENV, "1000")
    code, out, err = run_cli("--index", tmp_path / "a.sqlite", "index", "--inputs", CPT_V1)
    assert code == 0 and err == ""


def test_a_bad_interval_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    refused(["--index", tmp_path / "a.sqlite", "index", "--inputs", CPT_V1],
            f"{INTERVAL_ENV}='soon' is not a number of seconds")
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
    quiet(["--index", tmp_path / "a.sqlite", "index", "--inputs", CPT_V1])  # not used


def test_the_corpus_generator_shows_its_records(every_step, tmp_path, monkeypatch):
    from bench.build_corpus import make_package

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    records = ({"id": f"r{i}", "text": f"record number {i} " * 20, "domain": "web",
                "source": {"site": "bench"}} for i in range(30))
    make_package(records, "corpus-30", tmp_path / "pkg", tmp_path / "work", total=30)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("corpus corpus-30: records: 1/30 (3%)")
    assert "corpus corpus-30: records: 30/30 (100%)" in "\n".join(lines)
    quiet_err = io.StringIO()
    monkeypatch.setattr("sys.stderr", quiet_err)
    records = ({"id": f"r{i}", "text": f"record number {i} " * 20, "domain": "web",
                "source": {"site": "bench"}} for i in range(30))
    make_package(records, "corpus-q", tmp_path / "pkg-q", tmp_path / "work", total=30,
                 progress=False)
    assert not any(line.startswith("corpus corpus-q: records") for line in
                   quiet_err.getvalue().splitlines())


def test_the_history_generator_shows_its_band_rows(every_step, tmp_path, capsys, monkeypatch):
    pytest.importorskip("pyiceberg")
    from bench import scale_history

    scale_history.bands_only(tmp_path / "bands", contents=200, buckets=4)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith("history: band rows: ") for line in lines), lines
    assert lines[-1].startswith("history: band rows: 3,200/3,200 (100%)")
    monkeypatch.setitem(scale_history.PROGRESS, "enabled", False)  # as --quiet sets it
    scale_history.bands_only(tmp_path / "quiet", contents=200, buckets=4)
    assert capsys.readouterr().err == ""
