"""What users read speaks their language: counts agree with their nouns, durations are echoed
as written, the reviewer site names no module, and `report explain`'s "why" is one plain
sentence naming the decision, the partner, the similarity and the rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SAMPLES, run_cli

from near_dedup_core.wording import count, duration

CPT_V1 = SAMPLES / "cpt" / "2026-11-25" / "cpt-v1"
CPT_V2 = SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"


def ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out


@pytest.mark.parametrize("n, noun, said", [
    (1, "batch", "1 batch"), (2, "batch", "2 batches"), (0, "record", "0 records"),
    (1_204, "record", "1,204 records"), (1, "new text", "1 new text"),
    (3, "unreferenced data file", "3 unreferenced data files"),
])
def test_counts_agree_with_their_nouns(n, noun, said):
    assert count(n, noun) == said


@pytest.mark.parametrize("seconds, said", [
    (259200, "3 days"), (86400, "1 day"), (5400, "90 minutes"), (7200, "2 hours"),
    (90, "90 seconds"), (1, "1 second"), (1.5, "1.5 seconds"),
])
def test_durations_in_the_largest_unit_that_divides_them(seconds, said):
    assert duration(seconds) == said


def test_one_batch_is_one_batch_and_the_index_speaks_of_texts_and_records(tmp_path):
    index = tmp_path / "idx.sqlite"
    out = ok("--index", index, "index", "--inputs", CPT_V1)
    assert out == (f"index {index}: batch 1 added cpt-v1: 49 records, 46 new texts, 3 repeats "
                   f"of texts seen before\n")
    out = ok("--index", index, "index", "check")
    assert out.startswith(f"index {index}: OK (1 batch, 1 package, 46 distinct texts, "
                          f"49 records)"), out


def test_expire_echoes_the_retention_as_a_reader_writes_it(tmp_path):
    pytest.importorskip("pyiceberg")
    index = f"iceberg://{tmp_path / 'ice'}"
    ok("--index", index, "index", "--inputs", CPT_V1)
    out = ok("--index", index, "index", "expire", "--older-than", "3d")
    assert out.endswith("(kept what was made or published in the last 3 days)\n"), out
    assert "259200" not in out


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wording")
    for package in (CPT_V1, CPT_V2):
        ok("--index", root / "idx.sqlite", "index", "--inputs", package)
    ok("--index", root / "idx.sqlite", "scan", "--inputs", CPT_V1, CPT_V2,
       "--output", root / "report")
    return root / "report"


def test_the_reviewer_site_names_no_module(report, tmp_path):
    ok("report", "html", report, "--output", tmp_path / "site")
    for page in sorted((tmp_path / "site").rglob("*.html")):
        assert "near_dedup_core" not in page.read_text(encoding="utf-8"), page


def test_why_is_one_sentence_with_decision_partner_similarity_and_rule(report):
    seen = set()
    for line in (report / "decisions.jsonl").read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        if d["reason"] in seen:
            continue
        seen.add(d["reason"])
        code, out, err = run_cli("report", "explain", report, d["package_id"], d["sample_id"],
                                 "--json")
        assert code == 0, err
        why = json.loads(out)["why"]
        assert why.startswith("Excluded " if d["decision"] == "exclude" else "Kept because ")
        assert why.endswith(".") and ". " not in why, why  # one sentence
        assert "_" not in why, why  # no reason codes or field names
        if d["decision"] == "exclude":
            kept = f"{d['kept']['package_id']}/{d['kept']['sample_id']}"
            assert kept in why or d["reason"] == "exact_duplicate", why
            assert f"Jaccard {d['jaccard']:.4f}" in why or "Jaccard 1.0000" in why, why
    assert seen >= {"unique", "retained_split", "exact_duplicate", "near_duplicate",
                    "guard_blocked"}


def test_summaries_of_one_say_one():
    from near_dedup_core.contamination.run import ContaminationResult
    from near_dedup_core.scan.run import ScanResult

    one = ContaminationResult("c", {"items_leaked": 1, "items_checked": 1,
                                    "items_skipped_short": 0,
                                    "training_samples_contaminated": 1,
                                    "training_samples": 1, "pairs": 1,
                                    "items_set_aside": 1}).summary()
    assert one.endswith("into 1 of 1 training sample; 1 pair; 1 item set aside as common, "
                        "template or allowlisted"), one
    scan = ScanResult("r", {"samples": 1, "keep": 1, "exclude": 0, "by_reason": {"unique": 1},
                            "relations": 1, "history_only_relations": 0,
                            "blocked_relations": 0}).summary()
    assert scan.startswith("report r: 1 sample, keep 1 (unique 1), exclude 0; 1 relation, "), scan
