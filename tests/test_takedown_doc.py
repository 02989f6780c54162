"""docs/takedowns.md's commands, verbatim in bash in a folder holding the samples, with this
venv's near-dedup first on PATH: every command exits 0 and does what the page says."""

from __future__ import annotations

import json

from helpers import run_doc_block

from near_dedup_core.takedown.record import default_by


def test_the_commands_of_docs_takedowns_run_as_written(tmp_path):
    run, _ = run_doc_block("takedowns.md", "## Commands", tmp_path)
    out = run.stdout
    assert "takedown DSR-2026-0142 recorded in index data/takedown-demo/index.sqlite (act 1, " \
           "1 text)" in out
    assert "takedown LEAK-7 recorded" in out and "takedown LEAK-7 lifted" in out
    listed = [line.split("\t") for line in out.splitlines() if line.startswith(("DSR-", "LEAK-"))]
    assert [(r[0], r[1], r[4], r[5]) for r in listed] == [
        ("DSR-2026-0142", "in force", "privacy@example.com", "erasure request: personal data"),
        ("LEAK-7", "in force", default_by(), "leaked evaluation item")]
    assert ("Excluded: taken down by request DSR-2026-0142 (exact copy of cpt-v1/web-0010, "
            "J=1.0000)") in out
    assert "(exact copies only (under min_chars))" in out
    report = tmp_path / "data" / "takedown-demo" / "report-v2"
    manifest = json.loads((report / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert [(t["request_id"], t["samples"]) for t in manifest["takedowns"]] == [
        ("DSR-2026-0142", 1), ("LEAK-7", 0)]
    decisions = [json.loads(line) for line in (report / "decisions.jsonl").read_text().splitlines()]
    down = [(d["sample_id"], d["split"]) for d in decisions if d["reason"] == "takedown"]
    assert down == [("web-0010", "validation")]
