"""Mistakes a new user makes on the command line, each one line naming the thing and the
fix: a folder of another kind, a day folder instead of its packages, an unsupported index
scheme, a misspelled or abbreviated option."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, refused, run_cli, tree_bytes

CPT_V1 = SAMPLES / "cpt" / "2026-11-25" / "cpt-v1"
CPT_V2 = SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"
DAY = SAMPLES / "cpt" / "2026-11-25"


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> dict[str, Path]:
    """An index, a report and a mixture built on it from the sample packages."""
    root = tmp_path_factory.mktemp("released")
    idx, report, mixture = root / "idx.sqlite", root / "report", root / "mixture"
    for package in (CPT_V1, CPT_V2):
        assert run_cli("--quiet", "--index", idx, "index", "--inputs", package)[0] == 0
    assert run_cli("--quiet", "--index", idx, "scan", "--inputs", CPT_V1, CPT_V2,
                   "--output", report)[0] == 0
    config = json.loads((REPO / "config" / "mixture-example.json").read_text(encoding="utf-8"))
    config.update(inputs=[str(CPT_V1), str(CPT_V2)], near_dedup_report=str(report))
    (root / "mix.json").write_text(json.dumps(config), encoding="utf-8")
    assert run_cli("--quiet", "mixture", "build", root / "mix.json", "--output", mixture)[0] == 0
    return {"index": idx, "report": report, "mixture": mixture}


def test_report_commands_given_a_mixture_say_to_use_mixture_verify(released):
    mixture = released["mixture"]
    before = tree_bytes(mixture)
    refused(["report", "verify", mixture], f"report {mixture}: this folder is a mixture package",
            f"`near-dedup mixture verify {mixture}`")
    refused(["report", "explain", mixture, "cpt-v2", "web-0009"], "is a mixture package")
    assert tree_bytes(mixture) == before


def test_report_html_given_a_package_says_it_is_a_snapshot_package(tmp_path):
    refused(["report", "html", CPT_V1, "--output", tmp_path / "site"],
            f"report {CPT_V1}: this folder is a snapshot package, not a near-dedup report")
    refused(["report", "diff", CPT_V1, CPT_V2], "is a snapshot package, not a near-dedup report")
    assert not (tmp_path / "site").exists()


def test_mixture_verify_given_a_report_and_validate_given_a_report(released):
    report = released["report"]
    refused(["mixture", "verify", report], "this folder is a near-dedup report, not a mixture",
            f"`near-dedup report verify {report}`")
    refused(["snapshot", "validate", report], "this folder is a near-dedup report, not a "
            "snapshot package")


def test_a_day_folder_is_named_with_the_packages_to_pass(tmp_path):
    refused(["snapshot", "validate", DAY],
            f"package {DAY}: a folder holding snapshot packages (cpt-v1), not a package",
            f"pass the package folders themselves: {DAY}/cpt-v1")
    refused(["--index", tmp_path / "idx.sqlite", "index", "--inputs", DAY],
            f"{DAY}/cpt-v1")
    err = refused(["report", "verify", DAY], f"report {DAY}")  # not a place for packages
    assert "pass the package folders" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_report_is_still_reported_as_damaged(released, tmp_path):
    """A report whose manifest claims another format holds none of that kind's files: the
    verifier's own message stands."""
    import shutil

    copy = tmp_path / "report"
    shutil.copytree(released["report"], copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["format"] = "mixture-package"
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    refused(["report", "verify", copy], "manifest.json")
    assert "mixture verify" not in run_cli("report", "verify", copy)[2]


@pytest.mark.parametrize("url, shown", [
    ("mysql://h/db", "index mysql://h/db"),
    ("mysql+pymysql://user:secret@h/db", "index mysql+pymysql://user@h/db"),
])
def test_an_unsupported_index_scheme_names_it_and_the_supported_ones(url, shown):
    err = refused(["--index", url, "index", "--inputs", CPT_V1],
                  f"{shown}: the scheme {url.split('://')[0]}:// is not supported",
                  "SQLite file path", "postgresql://", "iceberg:///", "iceberg+s3://")
    assert "secret" not in err


def test_a_misspelled_option_is_named_before_the_required_one(released, tmp_path):
    out = tmp_path / "r"
    refused(["--index", released["index"], "scan", "--inputs", CPT_V1, "--ouptut", out],
            "unrecognized argument: --ouptut (did you mean --output?)")
    refused(["--index", released["index"], "scan", "--input", CPT_V1, "--output", out],
            "unrecognized argument: --input (did you mean --inputs?)")
    refused(["--ind", released["index"], "index", "check"], "unrecognized argument: --ind")
    assert not out.exists()


def test_a_missing_required_option_is_still_named():
    refused(["--index", "x.sqlite", "scan", "--output", "r"],
            "the following arguments are required: --inputs")


def test_every_argument_parser_of_the_project_takes_full_option_names_only():
    """No abbreviations anywhere (``--input`` would otherwise be ``--inputs``): every
    ``ArgumentParser(...)`` of the project passes allow_abbrev=False."""
    found = []
    for folder in ("near_dedup_core", "near_dedup_assets", "bench", "samples", "scripts"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "attr",
                                                          getattr(node.func, "id", "")) \
                        == "ArgumentParser":
                    found.append(path)
                    flags = {k.arg: k.value for k in node.keywords}
                    assert isinstance(flags.get("allow_abbrev"), ast.Constant) \
                        and flags["allow_abbrev"].value is False, path
    assert len(found) > 10
