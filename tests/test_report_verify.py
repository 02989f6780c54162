"""`near-dedup report verify`: a frozen report passes as written and fails, with one line
naming the file, on any tampering — with the checksums left stale, and with checksums.sha256
rewritten to match, where the manifest and the decision/origin consistency checks must catch it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import (
    REPO,
    THRESHOLD,
    cli_ok,
    cpt,
    index,
    jaccard,
    make_package,
    near_copy,
    plain_prose,
    refused,
    scan,
    tree_bytes,
)

from near_dedup_core.fsutil import json_line, write_checksums


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report with every kind of line: exact, near, guard-blocked and history-only
    relations, exclusions, retained samples. Pool v1 + v2; v0 is indexed history only."""
    root = tmp_path_factory.mktemp("verify")
    p = plain_prose()
    a, b, v, h = p[40], p[41], p[42], p[43]
    b_near, h_near = near_copy(b, p[44]), near_copy(h, p[44])
    g1 = p[45] + " The table holds 512 rows."
    g2 = p[45] + " The table holds 640 rows."
    assert jaccard(g1, g2) >= THRESHOLD
    v0 = make_package(root, "v0", {"train": [cpt("h", h)]})
    v1 = make_package(root, "v1", {"train": [cpt("a", a), cpt("b", b), cpt("g", g1)],
                                   "validation": [cpt("v", v)]})
    v2 = make_package(root, "v2", {"train": [cpt("a2", a), cpt("bn", b_near), cpt("g2", g2),
                                             cpt("hn", h_near)],
                                   "validation": [cpt("v", v)]})
    idx = root / "cpt.sqlite"
    for pkg in (v0, v1, v2):
        index(idx, pkg)
    rep = scan(idx, [v1, v2], root / "report")
    outcomes = {(d["package_id"], d["sample_id"]): (d["decision"], d["reason"])
                for d in rep.decisions}
    assert outcomes == {
        ("v1", "a"): ("keep", "unique"), ("v1", "b"): ("keep", "unique"),
        ("v1", "g"): ("keep", "unique"), ("v1", "v"): ("keep", "retained_split"),
        ("v2", "a2"): ("exclude", "exact_duplicate"), ("v2", "bn"): ("exclude", "near_duplicate"),
        ("v2", "g2"): ("keep", "guard_blocked"), ("v2", "hn"): ("keep", "unique"),
        ("v2", "v"): ("keep", "retained_split")}
    assert {(r["kind"], r["history_only"], r["blocked_by"]) for r in rep.relations} == {
        ("exact", False, None), ("near", False, None), ("near", False, "numbers"),
        ("near", True, None)}
    return rep.path


@pytest.fixture
def copy(report, tmp_path) -> Path:
    target = tmp_path / "report"
    shutil.copytree(report, target)
    return target


def test_untouched_report_verifies(report):
    before = tree_bytes(report)
    out = cli_ok("report", "verify", report)
    assert out.startswith(f"report {report}: OK") and "9 decisions" in out
    assert tree_bytes(report) == before


# --------------------------------------------------------------------------- tampering


def _edit_jsonl(name: str, change: Callable[[list[dict]], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / name
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        change(rows)
        path.write_bytes(b"".join(json_line(r) for r in rows))
    return edit


def _edit_manifest(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        change(manifest)
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return edit


def _row(rows: list[dict], package_id: str, sample_id: str) -> dict:
    return next(r for r in rows
                if (r.get("package_id"), r.get("sample_id")) == (package_id, sample_id))


def _keep_instead(rows: list[dict]) -> None:
    row = _row(rows, "v2", "bn")
    row.update(decision="keep", kept=None, reason="unique", jaccard=None)


def _kept_is_excluded(rows: list[dict]) -> None:
    _row(rows, "v2", "bn")["kept"] = {"package_id": "v2", "sample_id": "a2"}


def _exclude_retained(rows: list[dict]) -> None:
    _row(rows, "v2", "v").update(decision="exclude", reason="exact_duplicate", jaccard=1.0,
                                 kept={"package_id": "v1", "sample_id": "v"})


def _rename_sample(rows: list[dict]) -> None:
    _row(rows, "v2", "hn")["sample_id"] = "hx"


def _kept_not_an_object(rows: list[dict]) -> None:
    _row(rows, "v2", "bn")["kept"] = "v1/b"


def _drop_reason(rows: list[dict]) -> None:
    del _row(rows, "v2", "hn")["reason"]


def _unknown_decision(rows: list[dict]) -> None:
    _row(rows, "v2", "hn")["decision"] = "maybe"


def _swap_first_two(rows: list[dict]) -> None:
    rows[0], rows[1] = rows[1], rows[0]


def _relation(rows: list[dict], **where) -> dict:
    return next(r for r in rows if all(r[k] == v for k, v in where.items()))


def _unblock(rows: list[dict]) -> None:
    _relation(rows, blocked_by="numbers")["blocked_by"] = None


def _not_history(rows: list[dict]) -> None:
    _relation(rows, history_only=True)["history_only"] = False


def _drop_jaccard(rows: list[dict]) -> None:
    del _relation(rows, kind="near", blocked_by=None, history_only=False)["jaccard"]


def _edit_text(name: str, line: int, new: bytes) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        lines = (folder / name).read_bytes().splitlines(keepends=True)
        lines[line - 1] = new
        (folder / name).write_bytes(b"".join(lines))
    return edit


def _counts_changed(m: dict) -> None:
    m["counts"]["exclude"] += 1
    m["counts"]["keep"] -= 1


def _records_changed(m: dict) -> None:
    m["inputs"][1]["records"] += 1


def _lines_changed(m: dict) -> None:
    m["files"]["origins.jsonl"]["lines"] += 1
    m["files"]["decisions.jsonl"]["lines"] += 1


def _input_dropped(m: dict) -> None:
    del m["inputs"][1]


def _format_changed(m: dict) -> None:
    m["format"] = "mixture-package"


def _by_reason_changed(m: dict) -> None:
    m["counts"]["by_reason"]["unique"] += 1


# (id, edit, rewrite checksums.sha256 afterwards, expected fragment(s) of the error line)
CASES = [
    # stale checksums: the edited file is named
    ("decisions edited", _edit_jsonl("decisions.jsonl", _keep_instead), False,
     "decisions.jsonl does not match its sha256 in checksums.sha256"),
    ("relations edited", _edit_jsonl("relations.jsonl", _unblock), False,
     "relations.jsonl does not match its sha256 in checksums.sha256"),
    ("origins edited", _edit_jsonl("origins.jsonl", lambda rows: rows[0].update(line=99)), False,
     "origins.jsonl does not match its sha256 in checksums.sha256"),
    ("manifest edited", _edit_manifest(_counts_changed), False,
     "manifest.json does not match its sha256 in checksums.sha256"),
    ("unlisted file", lambda f: (f / "notes.txt").write_text("hello\n", encoding="utf-8"), False,
     "notes.txt is not listed in checksums.sha256"),
    ("file deleted", lambda f: (f / "origins.jsonl").unlink(), False,
     "origins.jsonl is listed in checksums.sha256 but missing"),
    ("checksums deleted", lambda f: (f / "checksums.sha256").unlink(), False,
     "checksums.sha256 is missing"),
    ("checksums malformed", _edit_text("checksums.sha256", 1, b"not a checksum line\n"), False,
     "checksums.sha256:1: malformed line"),
    ("checksums not UTF-8", lambda f: (f / "checksums.sha256").write_bytes(b"\xff\xfe\n"), False,
     "checksums.sha256 is not UTF-8 text"),
    # checksums rewritten to match: consistency checks catch the edit
    ("file and its checksum deleted", lambda f: (f / "relations.jsonl").unlink(), True,
     "relations.jsonl is not listed in checksums.sha256"),
    ("exclusion flipped to keep", _edit_jsonl("decisions.jsonl", _keep_instead), True,
     "decisions.jsonl:6: v2/bn is keep (unique) but relations.jsonl and the earlier decisions "
     "give exclude (near_duplicate of v1/b"),
    ("kept names an excluded sample", _edit_jsonl("decisions.jsonl", _kept_is_excluded), True,
     "decisions.jsonl:6: excluded sample's kept sample is not a kept sample"),
    ("retained sample excluded", _edit_jsonl("decisions.jsonl", _exclude_retained), True,
     "decisions.jsonl:9: a sample of retained split validation is excluded"),
    ("decision renamed", _edit_jsonl("decisions.jsonl", _rename_sample), True,
     "relations.jsonl:5: sample v2/hn is not in decisions.jsonl"),
    ("decision line deleted", _edit_jsonl("decisions.jsonl", lambda rows: rows.pop(3)), True,
     "decisions.jsonl has 8 lines, manifest.json says 9"),
    ("decision not JSON", _edit_text("decisions.jsonl", 2, b"{not json\n"), True,
     "decisions.jsonl:2: not valid JSON"),
    ("unknown decision", _edit_jsonl("decisions.jsonl", _unknown_decision), True,
     "decisions.jsonl:8: decision: Input should be 'keep' or 'exclude', found 'maybe'"),
    ("kept not an object", _edit_jsonl("decisions.jsonl", _kept_not_an_object), True,
     "decisions.jsonl:6: kept: Input should be an object, found 'v1/b'"),
    ("decision field missing", _edit_jsonl("decisions.jsonl", _drop_reason), True,
     "decisions.jsonl:8: missing field 'reason'"),
    ("origins line deleted", _edit_jsonl("origins.jsonl", lambda rows: rows.pop()), True,
     "origins.jsonl and decisions.jsonl differ in length"),
    ("origins lines swapped", _edit_jsonl("origins.jsonl", _swap_first_two), True,
     "origins.jsonl:1 does not describe the sample of decisions.jsonl:1"),
    ("relation line deleted", _edit_jsonl("relations.jsonl", lambda rows: rows.pop(0)), True,
     "relations.jsonl has 4 lines, manifest.json says 5"),
    ("relation unblocked", _edit_jsonl("relations.jsonl", _unblock), True,
     "decisions.jsonl:7: v2/g2 is keep (guard_blocked) but relations.jsonl and the earlier "
     "decisions give exclude (near_duplicate of v1/g"),
    ("relation history flag flipped", _edit_jsonl("relations.jsonl", _not_history), True,
     "relations.jsonl:5: match is not a sample in decisions.jsonl"),
    ("relation field missing", _edit_jsonl("relations.jsonl", _drop_jaccard), True,
     ("relations.jsonl:", ": missing field 'jaccard'")),
    ("relation not JSON", _edit_text("relations.jsonl", 1, b"[1, 2]\n"), True,
     "relations.jsonl:1: not a JSON object"),
    ("manifest counts changed", _edit_manifest(_counts_changed), True,
     "counts in manifest.json do not match decisions.jsonl"),
    ("manifest reasons changed", _edit_manifest(_by_reason_changed), True,
     "counts in manifest.json do not match decisions.jsonl"),
    ("manifest records changed", _edit_manifest(_records_changed), True,
     "decisions.jsonl has 5 samples of v2, manifest.json says 6"),
    ("manifest line counts changed", _edit_manifest(_lines_changed), True,
     "decisions.jsonl has 9 lines, manifest.json says 10"),
    ("manifest input dropped", _edit_manifest(_input_dropped), True,
     "decisions.jsonl:5: package v2 is not among the inputs"),
    ("manifest format changed", _edit_manifest(_format_changed), True,
     "manifest.json is not a near-dedup report manifest"),
    ("manifest not JSON", lambda f: (f / "manifest.json").write_text("{", encoding="utf-8"), True,
     "manifest.json is not valid JSON"),
]


@pytest.mark.parametrize("edit, fix_checksums, fragment", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_tampered_report_fails_with_one_line_naming_the_file(copy, edit, fix_checksums, fragment):
    edit(copy)
    if fix_checksums:
        write_checksums(copy)
    before = tree_bytes(copy)
    message = refused(["--quiet", "report", "verify", copy])
    assert message.startswith(f"near-dedup: error: report {copy}: "), message
    for part in (fragment,) if isinstance(fragment, str) else fragment:
        assert part in message, message
    assert tree_bytes(copy) == before


def test_verify_refuses_a_path_that_is_not_a_report(tmp_path):
    assert "not a directory" in refused(["--quiet", "report", "verify", tmp_path / "missing"])
    pkg = make_package(tmp_path, "p", {"train": [cpt("a", plain_prose()[0])]})
    assert "this folder is a snapshot package, not a near-dedup report" in \
        refused(["--quiet", "report", "verify", pkg])


def test_verify_as_a_process_exit_codes_and_one_line(copy):
    """The installed entry point behaves the same: exit 0 on the report, exit 1 and one
    stderr line (no traceback) once a line is edited."""
    command = [sys.executable, "-m", "near_dedup_core", "report", "verify", str(copy)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    _edit_jsonl("decisions.jsonl", _keep_instead)(copy)
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "decisions.jsonl does not match its sha256" in done.stderr


def test_summary_lists_keep_reasons_with_keep_and_exclude_reasons_with_exclude():
    from near_dedup_core.report import REASONS, decision_summary
    from near_dedup_core.scan import ScanResult

    counts = {"samples": 10, "keep": 7, "exclude": 3, "relations": 4,
              "history_only_relations": 1, "blocked_relations": 1,
              "by_reason": {"exact_duplicate": 1, "guard_blocked": 1, "match_not_kept": 1,
                            "near_duplicate": 2, "retained_split": 1, "unique": 4}}
    assert decision_summary(counts) == (
        "keep 7 (guard_blocked 1, match_not_kept 1, retained_split 1, unique 4), "
        "exclude 3 (exact_duplicate 1, near_duplicate 2)")
    assert ScanResult(Path("r"), counts).summary() == (
        "report r: 10 samples, keep 7 (guard_blocked 1, match_not_kept 1, retained_split 1, "
        "unique 4), exclude 3 (exact_duplicate 1, near_duplicate 2); 4 relations, "
        "1 history-only, 1 blocked by the numeric/unit guard")
    assert decision_summary({**counts, "exclude": 0, "by_reason": {"unique": 7}}) == \
        "keep 7 (unique 7), exclude 0"
    assert {decision for decision, _ in REASONS.values()} == {"keep", "exclude"}


def test_jaccard_histogram_bins_follow_the_threshold_and_keep_the_default_labels():
    from near_dedup_core.report import bin_labels, jaccard_edges, jaccard_histogram

    assert jaccard_edges(0.9) == [0.9, 0.92, 0.94, 0.96, 0.98, 1.0]  # manifest bytes unchanged
    assert jaccard_histogram([0.9, 0.92, 0.935, 1.0], 0.9) == {
        "0.90-0.92": 1, "0.92-0.94": 2, "0.94-0.96": 0, "0.96-0.98": 0, "0.98-1.00": 1}
    # a lower threshold: values below 0.9 get their own bins instead of "0.90-0.92"
    assert jaccard_histogram([0.81, 0.85, 0.97], 0.8) == {
        "0.80-0.84": 1, "0.84-0.88": 1, "0.88-0.92": 0, "0.92-0.96": 0, "0.96-1.00": 1}
    assert bin_labels(jaccard_edges(0.875))[0] == "0.875-0.900"


def test_ui_histogram_uses_the_report_bins_in_a_table_of_bins():
    from near_dedup_assets.summaries import histogram_table, similarity_histogram

    relations = [{"jaccard": 0.85, "kind": "near", "history_only": False, "blocked_by": None},
                 {"jaccard": 0.99, "kind": "near", "history_only": True, "blocked_by": None},
                 {"jaccard": 0.95, "kind": "near", "history_only": False,
                  "blocked_by": "numbers"},
                 {"jaccard": 1.0, "kind": "exact", "history_only": False, "blocked_by": None}]
    rows = similarity_histogram(relations, 0.8)
    assert [r[0] for r in rows] == ["0.80–0.84", "0.84–0.88", "0.88–0.92", "0.92–0.96",
                                    "0.96–1.00", "1.000 (exact)"]
    assert [r[1:] for r in rows] == [[0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 1],
                                     [0, 1, 0, 1], [1, 0, 0, 1]]
    table = histogram_table(rows)  # the UI's table: typed columns, one record per bin
    assert [(c.name, c.type) for c in table.schema.columns] == [
        ("jaccard", "string"), ("pool", "int"), ("history_only", "int"),
        ("guard_blocked", "int"), ("total", "int")]
    assert [r.data for r in table.records][1] == {
        "jaccard": "0.84–0.88", "pool": 1, "history_only": 0, "guard_blocked": 0, "total": 1}


# --------------------------------------------------------------------------- --inputs


def _inputs(report: Path) -> list[Path]:
    manifest = json.loads((report / "manifest.json").read_text())
    return [Path(i["path"]) for i in manifest["inputs"]]


def test_verify_with_inputs_passes_on_the_report_as_written(report):
    out = cli_ok("report", "verify", report, "--inputs", *_inputs(report))
    assert out.startswith(f"report {report}: OK")
    assert "texts and origins of 9 samples match the input packages" in out


def _new_text_sha256(rows: list[dict]) -> None:
    _row(rows, "v2", "hn")["text_sha256"] = "ab" * 32


def _moved_source(rows: list[dict]) -> None:
    _row(rows, "v1", "a")["source"] = {"dataset": "elsewhere"}


@pytest.mark.parametrize("name, edit, fragment", [
    ("decisions.jsonl", _new_text_sha256, "decisions.jsonl:8: text_sha256 of v2/hn is not"),
    ("origins.jsonl", _moved_source, "origins.jsonl:1: split, file, line or source of v1/a"),
])
def test_verify_with_inputs_catches_resealed_edits_the_files_cannot(copy, name, edit, fragment):
    """A changed text_sha256 (or origin source) with every checksum regenerated is consistent
    as far as the report's own files go; the input packages prove it wrong."""
    _edit_jsonl(name, edit)(copy)
    write_checksums(copy)
    cli_ok("report", "verify", copy)  # the documented limit of the files alone
    message = refused(["report", "verify", copy, "--inputs", *_inputs(copy)])
    assert fragment in message, message


def test_verify_with_inputs_needs_exactly_the_reports_inputs(report, tmp_path):
    inputs = _inputs(report)
    assert "input package v2 of the report is not among --inputs" in \
        refused(["report", "verify", report, "--inputs", inputs[0]])
    v0 = inputs[0].parent / "v0"
    assert "package v0" in refused(["report", "verify", report, "--inputs", *inputs, v0])
    changed = tmp_path / "v1"
    shutil.copytree(inputs[0], changed)
    (changed / "manifest.json").write_text((changed / "manifest.json").read_text() + "\n")
    assert "is not the report's input (manifest sha256" in \
        refused(["report", "verify", report, "--inputs", changed, inputs[1]])


def test_verify_with_inputs_refuses_a_redirected_input_path(report, copy, tmp_path):
    """A resealed manifest whose inputs[].path names another folder (here a copy of the same
    package) is consistent as far as the report's own files go; with the packages given, the
    path that does not name them is one line."""
    inputs = _inputs(report)
    elsewhere = tmp_path / "elsewhere" / "v1"
    shutil.copytree(inputs[0], elsewhere)

    def redirect(manifest: dict) -> None:
        manifest["inputs"][0]["path"] = str(elsewhere)

    _edit_manifest(redirect)(copy)
    write_checksums(copy)
    cli_ok("report", "verify", copy)  # the files alone cannot tell (docs/tamper.md)
    message = refused(["report", "verify", copy, "--inputs", *inputs])
    assert f"manifest.json: inputs[0].path of package v1 is {str(elsewhere)!r}, the package " \
           f"was given at {str(inputs[0])!r}" in message, message
    # given where the report says it is, the same bytes verify
    cli_ok("report", "verify", copy, "--inputs", elsewhere, inputs[1])


# --------------------------------------------------------------------------- the models


def test_written_files_round_trip_through_their_models(report):
    """The scan's byte writer and the format models agree: every line of every file parses
    into its model and the model dumps back to the same bytes; the manifest likewise."""
    from near_dedup_core.formats.report import ROW_MODELS, ReportManifest

    for name, model in ROW_MODELS.items():
        lines = (report / name).read_bytes().splitlines(keepends=True)
        assert lines
        for raw in lines:
            row = model.model_validate_json(raw)
            assert json_line(row.model_dump(mode="json")) == raw, (name, raw)
    manifest = json.loads((report / "manifest.json").read_text())
    model = ReportManifest.model_validate_json((report / "manifest.json").read_bytes())
    assert model.model_dump(mode="json", by_alias=True) == manifest


@pytest.mark.parametrize("line, problem", [
    (b'{"a": 1}, {"b": 2}\n', "not valid JSON"),
    (b"\n", "not valid JSON"),
    (b"[]\n", "not a JSON object"),
])
def test_rows_are_validated_line_by_line_even_in_batches(copy, line, problem):
    """Lines are validated a batch at a time; a line holding two objects or none cannot
    shift the others: the bad line is named."""
    lines = (copy / "origins.jsonl").read_bytes().splitlines(keepends=True)
    lines[2] = line
    (copy / "origins.jsonl").write_bytes(b"".join(lines))
    write_checksums(copy)
    assert f"origins.jsonl:3: {problem}" in refused(["report", "verify", copy])


def test_verified_report_has_the_shared_result_shape(report):
    from near_dedup_core.report import verify_report
    from near_dedup_core.results import FolderResult

    verified = verify_report(report)
    assert isinstance(verified, FolderResult) and verified.path == report
    assert verified.counts == json.loads((report / "manifest.json").read_text())["counts"]
    assert verified.summary() == cli_ok("report", "verify", report).strip()


def test_verify_with_inputs_rederives_a_contamination_report(report, tmp_path):
    inputs = _inputs(report)
    out = tmp_path / "contamination"
    cli_ok("contamination", "--evals", inputs[0], "--inputs", inputs[1], "--output", out,
           "--workers", 1)
    # the packages are at the paths the report records: both re-derive its pairs
    plain = cli_ok("report", "verify", out)
    rederived = cli_ok("report", "verify", out, "--inputs", *inputs)
    assert plain == rederived and "the same pairs re-derived from its packages" in plain
