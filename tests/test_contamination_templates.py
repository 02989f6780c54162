"""Lines of a template of the pool (report format 4): an item matched in part (a word
changed) in several training samples (a changelog entry whose file name differs) is set aside
as ``template``, not reported as contamination; its whole copies, and a one-word edit of an
item found in fewer samples, still are. A word of letters and digits (``reference1.f90``) is,
like a number, what a short item says, and never differs in a match (docs/contamination.md,
"Short items" and "Common text and the allowlist"). A format 3 report, made before these
rules, still verifies (tests/data/contamination-v3: ``contamination`` of the packages below,
run by the tool at format 3)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import orjson
import pytest
from helpers import make_package, refused, run_cli

from near_dedup_core.contamination.report import AllowEntry
from near_dedup_core.contamination.setaside import Allowlist, Matched, set_aside
from near_dedup_core.fsutil import write_checksums

LICENCE = "Permission is hereby granted, free of charge, to any person obtaining a copy"
FILLER = (
    "The build system reads its configuration from the environment and writes the "
    "objects next to their sources; see the manual for the options it accepts."
)

ITEMS = [
    {"id": "template", "text": "config/linux/mutex.h: new file"},
    {"id": "template-copied", "text": "testsuite/libgomp.c/loop-10.c: new test"},
    {"id": "identifier", "text": "testsuite/libgomp.fortran/reference1.f90: new test"},
    {"id": "leak", "text": "Which planet has the largest number of known moons?"},
    {"id": "edited", "text": "Which river flows through the ancient city of Baghdad in Iraq"},
    {"id": "licence", "text": LICENCE},
]


def template_docs() -> list[str]:
    """Three changelogs holding lines of templates (a new file, a new test, its name
    changed), a whole copy of one such line, a leaked item, a one-word edit of another, and
    a licence header in ten documents."""
    docs = [f"{FILLER} (part {k})" for k in range(16)]
    for k, (header, c, fortran) in enumerate(
        [
            ("ptrlock", "places", "doacross2"),
            ("futex", "member", "task1"),
            ("proc", "udr", "lastprivate1"),
        ]
    ):
        docs[k] = (
            f"2019-05-1{k}  Jakub Jelinek\n\n"
            f"\t* config/linux/{header}.h: New file.\n"
            f"\t* testsuite/libgomp.c/{c}-10.c: New test.\n"
            f"\t* testsuite/libgomp.fortran/{fortran}.f90: New test.\n\n" + docs[k]
        )
    docs[3] += "\n\t* testsuite/libgomp.c/loop-10.c: New test."
    docs[4] += " Quiz: which planet has the largest number of known moons? Saturn."
    docs[5] += " Which river flows through the old city of Baghdad in Iraq? The Tigris."
    for k in range(6, 16):
        docs[k] = f"# {LICENCE} of this software.\n" + docs[k]
    return docs


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contam-templates")
    pool = make_package(
        tmp,
        "pool-v3",
        {"train": [{"id": f"d{i}", "text": t} for i, t in enumerate(template_docs())]},
    )
    evals = make_package(tmp, "quiz-v3", {"test": ITEMS})
    out = tmp / "report"
    code, _, err = run_cli(
        "--quiet",
        "contamination",
        "--evals",
        evals,
        "--inputs",
        pool,
        "--output",
        out,
        "--workers",
        1,
    )
    assert code == 0, err
    return {"tmp": tmp, "pool": pool, "evals": evals, "report": out}


def _rows(path: Path, name: str) -> list[dict]:
    return [orjson.loads(x) for x in (path / name).read_bytes().splitlines()]


def _reseal(path: Path, name: str, rows: list[dict]) -> None:
    (path / name).write_bytes(
        b"".join(
            orjson.dumps(r, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE) for r in rows
        )
    )
    (path / "checksums.sha256").unlink()
    write_checksums(path)


def test_a_template_line_matched_with_a_word_changed_in_three_samples_is_set_aside(templates):
    pairs = {
        (r["eval"]["sample_id"], r["training"]["sample_id"]): r
        for r in _rows(templates["report"], "contamination.jsonl")
    }
    aside = {r["eval"]["sample_id"]: r for r in _rows(templates["report"], "set_aside.jsonl")}
    # the file name differs in each of three changelogs: a template of the pool
    assert not {k for k in pairs if k[0] == "template"}
    assert aside["template"]["reason"] == "template"
    assert aside["template"]["training_samples"] == 3
    assert aside["template"]["allowlist_entry"] is None
    assert aside["template"]["example"]["sample_id"] == "d0"
    assert aside["template"]["training_text"] == "config/linux/ptrlock.h: new file"
    # a file name with a digit never differs: reference1.f90 is not doacross2.f90
    assert not {k for k in pairs if k[0] == "identifier"} and "identifier" not in aside
    # a whole copy of a template's line is still a leak; its near copies are set aside
    assert {k for k in pairs if k[0] == "template-copied"} == {("template-copied", "d3")}
    assert pairs[("template-copied", "d3")]["common_shingles"] == 8
    assert aside["template-copied"]["reason"] == "template"
    assert aside["template-copied"]["training_samples"] == 3
    # a leaked item, and a one-word edit of an item found in one sample, are contamination
    assert ("leak", "d4") in pairs
    edited = pairs[("edited", "d5")]
    assert edited["method"] == "exact" and edited["common_shingles"] == 10
    assert edited["training_text"] == "which river flows through the old city of baghdad in iraq"
    assert aside["licence"]["reason"] == "common" and aside["licence"]["training_samples"] == 10
    manifest = orjson.loads((templates["report"] / "manifest.json").read_bytes())
    assert manifest["format_version"] == 4
    assert manifest["config"]["contamination_template_samples"] == 3
    code, out, err = run_cli("report", "verify", templates["report"])
    assert code == 0 and "the same pairs re-derived" in out, err
    code, out, err = run_cli("report", "explain", templates["report"], "quiz-v3", "template")
    assert code == 0 and "a template of the pool, with a word changed, in 3 training" in out, err


def test_the_template_setting_decides_from_how_many_samples(templates, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"contamination_template_samples": 4}')
    out = tmp_path / "four"
    code, _, err = run_cli(
        "--quiet",
        "--config",
        cfg,
        "contamination",
        "--evals",
        templates["evals"],
        "--inputs",
        templates["pool"],
        "--output",
        out,
        "--workers",
        1,
    )
    assert code == 0, err
    pairs = {
        (r["eval"]["sample_id"], r["training"]["sample_id"])
        for r in _rows(out, "contamination.jsonl")
    }
    assert {k for k in pairs if k[0] == "template"} == {("template", f"d{k}") for k in range(3)}
    assert [r["reason"] for r in _rows(out, "set_aside.jsonl")] == ["common"]


def test_set_aside_by_template():
    allow = Allowlist([])
    near = [Matched(0, (0, k), "a b c d e", False, True) for k in range(3)]
    kept, aside = set_aside(near, allow, 10, 3)
    assert kept == [] and [(a.reason, a.samples, a.first) for a in aside] == [("template", 3, 0)]
    # the same matches without the rule (formats before 4) are contamination
    assert set_aside(near, allow, 10) == ([0, 1, 2], [])
    # two samples are not a template; a whole copy is still contamination
    assert set_aside(near[:2], allow, 10, 3) == ([0, 1], [])
    mixed = [
        Matched(0, (0, 0), "a b c d e", True, True),
        *near,
        Matched(1, (0, 5), "f g h", False, True),
    ]
    kept, aside = set_aside(mixed, allow, 10, 3)
    assert kept == [0, 4] and [(a.item, a.reason, a.samples, a.first) for a in aside] == [
        (0, "template", 3, 1)
    ]
    # near copies of a longer item (found by its shingles) in three documents are leaks
    passage = [Matched(0, (0, k), "a passage of twenty words", False, False) for k in range(3)]
    assert set_aside(passage, allow, 10, 3) == ([0, 1, 2], [])


V3 = Path(__file__).parent / "data" / "contamination-v3"


def test_a_format_3_report_still_verifies(templates, tmp_path):
    """Format 3 (made before the template rule): the template line is contamination there,
    and its files verify; its pairs are not re-derived."""
    code, out, err = run_cli("report", "verify", V3)
    assert code == 0 and "OK" in out and "format 3" in out, err
    pairs = {
        (r["eval"]["sample_id"], r["training"]["sample_id"])
        for r in _rows(V3, "contamination.jsonl")
    }
    for item in ("template", "identifier"):
        assert {k for k in pairs if k[0] == item} == {(item, f"d{k}") for k in range(3)}
    manifest = orjson.loads((V3 / "manifest.json").read_bytes())
    assert "contamination_template_samples" not in manifest["config"]
    refused(
        ["report", "verify", V3, "--inputs", templates["evals"], templates["pool"]],
        "format 3 report",
        "run contamination again",
    )
    # a format 3 report has no reason template, nor the config key of format 4
    forged = tmp_path / "forged"
    shutil.copytree(V3, forged)
    rows = _rows(forged, "set_aside.jsonl")
    rows[0]["reason"] = "template"
    _reseal(forged, "set_aside.jsonl", rows)
    refused(["report", "verify", forged], "set_aside.jsonl:1", "reason template", "format 3 report")
    shutil.rmtree(forged)
    shutil.copytree(V3, forged)
    manifest["config"]["contamination_template_samples"] = 3
    (forged / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    (forged / "checksums.sha256").unlink()
    write_checksums(forged)
    refused(["report", "verify", forged], "manifest.json", "keys of format 4")


def test_a_template_line_below_the_setting_is_refused(templates, tmp_path):
    forged = tmp_path / "forged"
    shutil.copytree(templates["report"], forged)
    rows = _rows(forged, "set_aside.jsonl")
    at = next(n for n, r in enumerate(rows) if r["reason"] == "template")
    rows[at]["training_samples"] = 2
    _reseal(forged, "set_aside.jsonl", rows)
    refused(
        ["report", "verify", forged],
        f"set_aside.jsonl:{at + 1}",
        "below contamination_template_samples 3",
    )


def _set_aside_match_by_match(matches, allowlist, common_samples, template_samples=None):
    """The set-aside rule of docs/contamination.md as it reads, one match at a time: the
    reference `set_aside` (counted over columns) must agree with."""
    by_item: dict[int, list[int]] = {}
    for k, m in enumerate(matches):
        by_item.setdefault(m.item, []).append(k)
    kept, aside = [], []
    for item, ks in by_item.items():
        allowed = [(k, allowlist.entry_of(matches[k].text) if allowlist.entries else None)
                   for k in ks]
        listed = [(k, e) for k, e in allowed if e is not None]
        if listed:
            aside.append((item, "allowlist", len({matches[k].sample for k, _ in listed}),
                          listed[0][1], listed[0][0]))
        rest = [k for k, e in allowed if e is None]
        if not rest:
            continue
        samples = {matches[k].sample for k in rest}
        whole = [k for k in rest if matches[k].whole]
        partial = [k for k in rest if not matches[k].whole]
        n_partial = len({matches[k].sample for k in partial})
        if len(samples) < common_samples:
            if template_samples is None or n_partial < template_samples or \
                    not matches[rest[0]].short:
                kept.extend(rest)
            else:
                aside.append((item, "template", n_partial, None, partial[0]))
                kept.extend(whole)
        elif len({matches[k].sample for k in whole}) >= common_samples:
            aside.append((item, "common", len(samples), None, rest[0]))
        else:
            aside.append((item, "common", len(samples), None, partial[0]))
            kept.extend(whole)
    return sorted(kept), aside


def test_set_aside_counted_over_columns_is_the_rule_match_by_match():
    """`set_aside` groups and counts with arrays (a pool's common text is millions of
    matches); on random matches (repeated samples, allowlisted texts, whole and partial
    copies, short items, any order) it gives what the rule gives one match at a time."""
    rng = random.Random(5)
    texts = ["the mit license", "a leaked question", "free software foundation", "x y"]
    allow = Allowlist([AllowEntry(text="The MIT License, Copyright (c)", reason="licence"),
                       AllowEntry(text="Free Software Foundation, Inc.", reason="licence")])
    nothing = Allowlist([])
    for trial in range(400):
        short = {i: rng.random() < 0.5 for i in range(6)}
        matches = []
        for _ in range(rng.randint(0, 40)):
            item = rng.randrange(6)
            matches.append(Matched(item, (rng.randrange(2), rng.randrange(8)),
                                   rng.choice(texts), rng.random() < 0.4, short[item]))
        if trial % 2:
            matches.sort(key=lambda m: (m.item, m.sample))
        common, template = rng.choice([2, 3, 5]), rng.choice([None, 2, 3])
        for allowlist in (allow, nothing):
            kept, aside = set_aside(matches, allowlist, common, template)
            assert (kept, [(a.item, a.reason, a.samples, a.entry, a.first) for a in aside]) \
                == _set_aside_match_by_match(matches, allowlist, common, template), trial
