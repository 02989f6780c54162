"""`scan` through the CLI: candidates, exact verification, the numeric/unit guard, greedy
decisions, the report files, refusals, limits, determinism, and LSH quality on real prose.

Every constructed case is built from real prose (docstrings of the running interpreter's
standard library) and the Jaccard of every pair the test relies on is measured here with the
product's own shingle hashing, so each assertion states which side of the threshold a pair is.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import (
    DEFAULTS,
    HASHER,
    THRESHOLD,
    cli_ok,
    cpt,
    index,
    index_bytes,
    jaccard,
    load_report,
    make_package,
    near_copy,
    plain_prose,
    refused,
    replace_words,
    scan,
    stdlib_docstrings,
    tree_bytes,
)

from near_dedup_core import ALGORITHM_VERSION, __version__
from near_dedup_core.compare import qa_text
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import json_line
from near_dedup_core.guard import guard_for
from near_dedup_core.normalize import normalize
from near_dedup_core.package import open_packages
from near_dedup_core.signature import exact_jaccard

REPORT_FILES = ["checksums.sha256", "decisions.jsonl", "manifest.json", "origins.jsonl",
                "relations.jsonl"]
DECISION_KEYS = {"package_id", "sample_id", "split", "scope", "content_id", "text_sha256",
                 "decision", "kept", "reason", "jaccard"}
RELATION_KEYS = {"sample", "match", "jaccard", "kind", "history_only", "match_sources",
                 "blocked_by"}
ORIGIN_KEYS = {"package_id", "sample_id", "split", "file", "line", "source"}


# --------------------------------------------------------------------------- real prose


def chain(base: str, donor: str) -> tuple[str, str, str]:
    """(A, B, C): A rewrites B's first ``k`` words, C its last ``m`` words, with the smallest
    edits for which J(A, C) falls under the threshold while J(A, B) and J(B, C) stay at or
    above it."""
    limit = len(base.split()) // 4
    for k, m in sorted(itertools.product(range(1, limit), repeat=2), key=lambda km: (sum(km), km)):
        a = replace_words(base, 0, donor, k)
        c = replace_words(base, -m, donor, m)
        if jaccard(a, base) >= THRESHOLD and jaccard(base, c) >= THRESHOLD > jaccard(a, c):
            return a, base, c
    raise AssertionError("no chain found")


# --------------------------------------------------------------------------- CLI helpers


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    """Temporary siblings an interrupted report write would leave behind."""
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def write_config(path: Path, **overrides) -> Path:
    path.write_text(json.dumps({**DEFAULTS.model_dump(mode="json"), **overrides}),
                    encoding="utf-8")
    return path


# --------------------------------------------------------------------------- versions v1/v2


@pytest.fixture(scope="module")
def versions(tmp_path_factory) -> dict:
    """v1 and v2 indexed as two batches, scanned as the pool [v2, v1] (input order reversed on
    purpose: the earlier batch must still win ties)."""
    root = tmp_path_factory.mktemp("versions")
    p = plain_prose()
    x, y, val = p[0], p[1], p[2]
    x_variant = "  " + x.upper().replace(" ", "   \t") + "\n"   # case/whitespace only
    assert normalize(x_variant) == normalize(x)
    y_near = near_copy(y, p[3])
    y_far = replace_words(y, 0, p[3], 12)
    texts = {"x": x, "x_variant": x_variant, "y": y, "y_near": y_near, "y_far": y_far}
    jac = {"y~y_near": jaccard(y, y_near), "y~y_far": jaccard(y, y_far),
           "y_near~y_far": jaccard(y_near, y_far)}
    v1 = make_package(root, "v1", {
        "train": [cpt("x1", x), cpt("y1", y)],
        "validation": [cpt("val1", val)]}, created_at="2026-11-25T00:00:00Z")
    v2 = make_package(root, "v2", {
        "train": [cpt("x2", x), cpt("xv2", x_variant), cpt("yn2", y_near), cpt("yf2", y_far)],
        "validation": [cpt("val2", val)]}, shard_records=2, created_at="2026-11-26T00:00:00Z")
    idx = root / "index" / "cpt.sqlite"
    index(idx, v1)
    index(idx, v2)
    report = scan(idx, [v2, v1], root / "report")
    return {"root": root, "index": idx, "v1": v1, "v2": v2, "report": report, "texts": texts,
            "jaccard": jac}


def test_versions_exact_and_near_duplicates_keep_the_v1_sample(versions):
    jac, rep = versions["jaccard"], versions["report"]
    assert jac["y~y_near"] >= THRESHOLD
    assert 0.8 <= jac["y~y_far"] < THRESHOLD and jac["y_near~y_far"] < THRESHOLD

    assert rep.outcome("v1", "x1") == ("keep", "unique", None)
    assert rep.outcome("v1", "y1") == ("keep", "unique", None)
    assert rep.outcome("v2", "x2") == ("exclude", "exact_duplicate", "v1/x1")
    assert rep.outcome("v2", "xv2") == ("exclude", "exact_duplicate", "v1/x1")
    assert rep.outcome("v2", "yn2") == ("exclude", "near_duplicate", "v1/y1")
    assert rep.outcome("v2", "yf2") == ("keep", "unique", None)  # J in [0.8, 0.9): verified out
    assert rep.outcome("v1", "val1") == ("keep", "retained_split", None)
    assert rep.outcome("v2", "val2") == ("keep", "retained_split", None)

    assert rep.decision("v2", "x2")["jaccard"] == 1.0
    assert rep.decision("v2", "yn2")["jaccard"] == jac["y~y_near"]
    assert rep.decision("v1", "x1")["jaccard"] is None
    # case/whitespace-only variants are the same content, with their own text_sha256
    x1, xv2 = rep.decision("v1", "x1"), rep.decision("v2", "xv2")
    assert xv2["content_id"] == x1["content_id"]
    assert xv2["text_sha256"] != x1["text_sha256"]
    assert xv2["text_sha256"] == hashlib.sha256(versions["texts"]["x_variant"].encode()).hexdigest()

    assert rep.pairs() == {
        ("v2/x2", "v1/x1", "exact", False, None),
        ("v2/xv2", "v1/x1", "exact", False, None),
        ("v2/yn2", "v1/y1", "near", False, None),
        ("v2/val2", "v1/val1", "exact", False, None),
    }
    near = [r for r in rep.relations if r["kind"] == "near"]
    assert near[0]["jaccard"] == jac["y~y_near"]
    assert near[0]["match"]["content_id"] == rep.decision("v1", "y1")["content_id"]
    assert near[0]["match_sources"] == []  # nothing outside the pool


def test_versions_input_order_does_not_change_decisions(versions, tmp_path):
    again = scan(versions["index"], [versions["v1"], versions["v2"]], tmp_path / "report")
    key = lambda d: (d["package_id"], d["sample_id"])  # noqa: E731
    assert sorted(again.decisions, key=key) == sorted(versions["report"].decisions, key=key)
    # lines follow the input order, then each package's record order
    assert [key(d) for d in again.decisions] == [
        ("v1", "x1"), ("v1", "y1"), ("v1", "val1"),
        ("v2", "x2"), ("v2", "xv2"), ("v2", "yn2"), ("v2", "yf2"), ("v2", "val2")]


def test_report_files_fields_and_manifest(versions):
    rep, v1, v2 = versions["report"], versions["v1"], versions["v2"]
    assert sorted(p.name for p in rep.path.iterdir()) == REPORT_FILES
    assert all(set(d) == DECISION_KEYS for d in rep.decisions)
    assert all(set(r) == RELATION_KEYS for r in rep.relations)
    assert all(set(o) == ORIGIN_KEYS for o in rep.origins)
    assert len(rep.decisions) == len(rep.origins) == 8
    assert [(d["package_id"], d["sample_id"]) for d in rep.decisions] == \
        [(o["package_id"], o["sample_id"]) for o in rep.origins]

    # origins: file and line inside the package (v2 train is cut into shards of 2 lines)
    origin = {(o["package_id"], o["sample_id"]): o for o in rep.origins}
    assert origin[("v2", "xv2")]["file"] == "data/train/part-00000.jsonl"
    assert origin[("v2", "xv2")]["line"] == 2
    assert origin[("v2", "yn2")]["file"] == "data/train/part-00001.jsonl"
    assert origin[("v2", "yn2")]["line"] == 1
    assert origin[("v1", "val1")] == {"package_id": "v1", "sample_id": "val1",
                                      "split": "validation", "file":
                                      "data/validation/part-00000.jsonl", "line": 1,
                                      "source": {"dataset": "stdlib-docs", "row": "val1"}}
    assert rep.decision("v1", "x1")["scope"] == "tokenizer:qwen2-tok@r3"

    m = rep.manifest
    assert m["format"] == "near-dedup-report" and m["format_version"] == 1
    assert m["algorithm_version"] == ALGORITHM_VERSION and m["tool_version"] == __version__
    assert m["config"] == DEFAULTS.model_dump(mode="json")
    assert m["config_fingerprint"] == DEFAULTS.fingerprint()
    assert [(i["package_id"], i["kind"], i["manifest_sha256"], i["records"])
            for i in m["inputs"]] == [
        ("v2", "cpt", file_sha256(v2 / "manifest.json"), 5),
        ("v1", "cpt", file_sha256(v1 / "manifest.json"), 3)]
    assert [(p["package_id"], p["batch"]) for p in m["index"]["packages"]] == [("v1", 1), ("v2", 2)]
    assert m["index"]["batches"] == 2
    c = m["counts"]
    assert (c["samples"], c["keep"], c["exclude"]) == (8, 5, 3)
    assert c["by_split"] == {"train": {"keep": 3, "exclude": 3},
                             "validation": {"keep": 2, "exclude": 0}}
    assert c["by_reason"] == {"exact_duplicate": 2, "near_duplicate": 1, "retained_split": 2,
                              "unique": 3}
    assert (c["relations"], c["history_only_relations"], c["blocked_relations"]) == (4, 0, 0)
    assert m["files"] == {"decisions.jsonl": {"lines": 8}, "relations.jsonl": {"lines": 4},
                          "origins.jsonl": {"lines": 8}}


@pytest.mark.parametrize("odd", [
    ['q"uote', "back\\slash", "tab\there", "é-ü-中文", "emoji-😀", "ctl\x01", "nb\u00a0sp"],
    ["中文-1", "é-ü", "emoji-😀", "nb\u00a0sp", "del\x7f", "line\u2028sep", "plain"],
    ["plain", "with space", "tilde~", "x/y:z", "{brace}", "0", "'apostrophe'"],
], ids=["escaped", "unescaped-non-ascii", "plain-ascii"])
def test_report_lines_are_canonical_json_also_for_unusual_strings(tmp_path, odd):
    """The scan assembles each line from pieces rendered once (`scan.write`; decision lines
    by a compiled kernel, sample ids that need no escaping by one join); every line must be
    exactly `json_line` of the object it holds, for every kind of row and for sample ids and
    sources that need escaping, ids that are not ASCII but need no escaping, and plain ASCII
    ids."""
    p = plain_prose()
    source = {"zeta": [1, "二", None], "alpha": {"y": 'a"b', "x": 1.5}, "é": True}
    old = make_package(tmp_path, "old", {"train": [cpt("h" + odd[0], near_copy(p[40], p[41])),
                                                   cpt("h" + odd[1], p[42])]})
    pool = make_package(tmp_path, "pool", {
        "train": [cpt(odd[0], p[40], source=source), cpt(odd[1], p[40]),
                  cpt(odd[2], near_copy(p[40], p[43])), cpt(odd[3], p[42]),
                  cpt(odd[4], p[44], domain="ドメイン")],
        "validation": [cpt(odd[5], p[44]), cpt(odd[6], p[44])]})
    idx = tmp_path / "odd.sqlite"
    index(idx, old)
    index(idx, pool)
    rep = scan(idx, [pool], tmp_path / "report", workers=2)
    kinds = {(r["kind"], r["history_only"]) for r in rep.relations}
    assert kinds == {("exact", False), ("exact", True), ("near", False), ("near", True)}
    assert {d["reason"] for d in rep.decisions} >= {"unique", "exact_duplicate",
                                                    "near_duplicate", "retained_split"}
    for name in ("decisions.jsonl", "relations.jsonl", "origins.jsonl"):
        lines = (rep.path / name).read_bytes().splitlines(keepends=True)
        assert lines
        for line in lines:
            assert line == json_line(orjson.loads(line)), line
    assert {d["sample_id"] for d in rep.decisions} == set(odd)


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_report_checksums_pass_sha256sum_and_verify(versions):
    path = versions["report"].path
    listed = sorted(line.split("  ", 1)[1] for line in
                    (path / "checksums.sha256").read_text(encoding="utf-8").splitlines())
    assert listed == [f for f in REPORT_FILES if f != "checksums.sha256"]
    done = subprocess.run(["sha256sum", "-c", "checksums.sha256"], cwd=path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    out = cli_ok("report", "verify", path)
    assert "OK" in out and "8 decisions" in out


# --------------------------------------------------------------------------- decision rules


def test_non_transitive_chain_keeps_a_and_c(tmp_path):
    a, b, c = chain(*plain_prose()[4:6])
    j_ab, j_bc, j_ac = jaccard(a, b), jaccard(b, c), jaccard(a, c)
    assert j_ab >= THRESHOLD and j_bc >= THRESHOLD and j_ac < THRESHOLD
    pa = make_package(tmp_path, "pa", {"train": [cpt("a", a)]})
    pb = make_package(tmp_path, "pb", {"train": [cpt("b", b)]})
    pc = make_package(tmp_path, "pc", {"train": [cpt("c", c)]})
    idx = tmp_path / "chain.sqlite"
    for pkg in (pa, pb, pc):  # first-ingest order A, B, C: one batch each
        index(idx, pkg)
    rep = scan(idx, [pc, pb, pa], tmp_path / "report")
    assert rep.outcome("pa", "a") == ("keep", "unique", None)
    assert rep.outcome("pb", "b") == ("exclude", "near_duplicate", "pa/a")
    assert rep.decision("pb", "b")["jaccard"] == j_ab
    assert rep.outcome("pc", "c") == ("keep", "match_not_kept", None)
    assert rep.pairs() == {("pb/b", "pa/a", "near", False, None),
                           ("pc/c", "pb/b", "near", False, None)}
    assert {r["jaccard"] for r in rep.relations} == {j_ab, j_bc}


def test_excluded_sample_names_the_earliest_kept_match(tmp_path):
    a, b, c = chain(*plain_prose()[4:6])
    pa = make_package(tmp_path, "pa", {"train": [cpt("a", a)]})
    pc = make_package(tmp_path, "pc", {"train": [cpt("c", c)]})
    pb = make_package(tmp_path, "pb", {"train": [cpt("b", b)]})
    idx = tmp_path / "order.sqlite"
    for pkg in (pa, pc, pb):  # A and C (J < 0.9) both come before B, which matches both
        index(idx, pkg)
    rep = scan(idx, [pb, pc, pa], tmp_path / "report")
    assert rep.outcome("pa", "a") == ("keep", "unique", None)
    assert rep.outcome("pc", "c") == ("keep", "unique", None)
    assert rep.outcome("pb", "b") == ("exclude", "near_duplicate", "pa/a")
    assert rep.decision("pb", "b")["jaccard"] == jaccard(a, b)
    assert rep.pairs() == {("pb/b", "pa/a", "near", False, None),
                           ("pb/b", "pc/c", "near", False, None)}


def test_ties_in_one_batch_follow_input_position_then_sample_id(tmp_path):
    x = plain_prose()[6]
    p = make_package(tmp_path, "p", {"train": [cpt("s2", x), cpt("s1", x.upper())]})
    q = make_package(tmp_path, "q", {"train": [cpt("s1", " " + x)]})
    idx = tmp_path / "ties.sqlite"
    index(idx, p, q)  # one batch: the same content, three samples
    rep = scan(idx, [q, p], tmp_path / "qp")
    assert rep.outcome("q", "s1") == ("keep", "unique", None)
    assert rep.outcome("p", "s1") == ("exclude", "exact_duplicate", "q/s1")
    assert rep.outcome("p", "s2") == ("exclude", "exact_duplicate", "q/s1")
    rep = scan(idx, [p, q], tmp_path / "pq")
    assert rep.outcome("p", "s1") == ("keep", "unique", None)  # sample id before file position
    assert rep.outcome("p", "s2") == ("exclude", "exact_duplicate", "p/s1")
    assert rep.outcome("q", "s1") == ("exclude", "exact_duplicate", "p/s1")


def test_number_and_unit_changes_are_never_merged(tmp_path):
    p = plain_prose()
    numbers_a = p[7] + " The cache keeps at most 128 entries."
    numbers_b = p[7] + " The cache keeps at most 256 entries."
    units_a = p[8] + " Each call takes about 40 ms on a warm cache."
    units_b = p[8] + " Each call takes about 40 s on a warm cache."
    percent_a = p[9] + " The hit rate rose by 3% in the last release."
    percent_b = p[9] + " The hit rate rose by 3 points in the last release."
    same_a = p[10] + " The cache keeps at most 128 entries."
    same_b = near_copy(p[10], p[11]) + " The cache keeps at most 128 entries."
    for one, two in ((numbers_a, numbers_b), (units_a, units_b), (percent_a, percent_b),
                     (same_a, same_b)):
        assert THRESHOLD <= jaccard(one, two) < 1.0
    v1 = make_package(tmp_path, "v1", {"train": [cpt("n", numbers_a), cpt("u", units_a),
                                                 cpt("pct", percent_a), cpt("s", same_a)]})
    v2 = make_package(tmp_path, "v2", {"train": [cpt("n", numbers_b), cpt("u", units_b),
                                                 cpt("pct", percent_b), cpt("s", same_b)]})
    idx = tmp_path / "guard.sqlite"
    index(idx, v1)
    index(idx, v2)
    rep = scan(idx, [v1, v2], tmp_path / "report")
    for sid in ("n", "u", "pct"):
        assert rep.outcome("v1", sid) == ("keep", "unique", None)
        assert rep.outcome("v2", sid) == ("keep", "guard_blocked", None)
    assert rep.outcome("v2", "s") == ("exclude", "near_duplicate", "v1/s")
    assert rep.pairs() == {("v2/n", "v1/n", "near", False, "numbers"),
                           ("v2/u", "v1/u", "near", False, "units"),
                           ("v2/pct", "v1/pct", "near", False, "units"),
                           ("v2/s", "v1/s", "near", False, None)}
    by_sample = {r["sample"]["sample_id"]: r["jaccard"] for r in rep.relations}
    assert by_sample == {"n": jaccard(numbers_a, numbers_b), "u": jaccard(units_a, units_b),
                         "pct": jaccard(percent_a, percent_b), "s": jaccard(same_a, same_b)}
    assert rep.manifest["counts"]["blocked_relations"] == 3
    assert rep.manifest["counts"]["by_reason"]["guard_blocked"] == 3


def test_extra_units_apply_to_their_domain_only(tmp_path):
    p = plain_prose()
    barrels, oil_equivalent = " Output was 5 bbl per day.", " Output was 5 boe per day."
    energy_a, energy_b = p[12] + barrels, p[12] + oil_equivalent
    web_a, web_b = p[13] + barrels, p[13] + oil_equivalent
    for one, two in ((energy_a, energy_b), (web_a, web_b)):
        assert THRESHOLD <= jaccard(one, two) < 1.0
    config = write_config(tmp_path / "config.json",
                          extra_units=[{"tokens": ["bbl"], "domains": ["energy"]}])
    v1 = make_package(tmp_path, "v1", {"train": [cpt("e", energy_a, "energy"),
                                                 cpt("w", web_a, "web")]})
    v2 = make_package(tmp_path, "v2", {"train": [cpt("e", energy_b, "energy"),
                                                 cpt("w", web_b, "web")]})
    idx = tmp_path / "units.sqlite"
    index(idx, v1, config=config)
    index(idx, v2, config=config)
    rep = scan(idx, [v1, v2], tmp_path / "report", config=config)
    assert rep.outcome("v2", "e") == ("keep", "guard_blocked", None)
    assert rep.outcome("v2", "w") == ("exclude", "near_duplicate", "v1/w")
    assert rep.pairs() == {("v2/e", "v1/e", "near", False, "units"),
                           ("v2/w", "v1/w", "near", False, None)}


def test_short_texts_match_only_exactly(tmp_path):
    prose = normalize(plain_prose()[14])
    short, l79, l80 = (prose[:n - 1] + "." for n in (60, 79, 80))  # normalized prose prefixes
    for text, n in ((short, 60), (l79, 79), (l80, 80)):
        assert normalize(text) == text and len(text) == n
    assert DEFAULTS.min_chars == 80
    edited = {t: t[:-1] + "!" for t in (short, l79, l80)}  # one character changed at the end
    for t, e in edited.items():
        assert THRESHOLD <= jaccard(t, e) < 1.0, (t, e)
    variant = "  " + short.upper().replace(" ", "\n ")  # same content as `short`
    assert normalize(variant) == short
    v1 = make_package(tmp_path, "v1", {"train": [cpt("s", short), cpt("l79", l79),
                                                 cpt("l80", l80)]})
    v2 = make_package(tmp_path, "v2", {"train": [
        cpt("s", edited[short]), cpt("sv", variant), cpt("l79", edited[l79]),
        cpt("l80", edited[l80])]})
    idx = tmp_path / "short.sqlite"
    index(idx, v1)
    index(idx, v2)
    rep = scan(idx, [v1, v2], tmp_path / "report")
    assert rep.outcome("v2", "s") == ("keep", "unique", None)
    assert rep.outcome("v2", "sv") == ("exclude", "exact_duplicate", "v1/s")
    assert rep.outcome("v2", "l79") == ("keep", "unique", None)
    assert rep.outcome("v2", "l80") == ("exclude", "near_duplicate", "v1/l80")
    assert rep.pairs() == {("v2/sv", "v1/s", "exact", False, None),
                           ("v2/l80", "v1/l80", "near", False, None)}


def test_retained_split_always_kept_and_splits_never_compared(tmp_path):
    p = plain_prose()
    x = p[15]
    xn = near_copy(x, p[16])
    p1 = make_package(tmp_path, "p1", {"train": [cpt("t", x)],
                                       "validation": [cpt("v", x), cpt("vn", xn)],
                                       "test": [cpt("e", xn)]})
    p2 = make_package(tmp_path, "p2", {"train": [cpt("tn", xn)], "validation": [cpt("v", x)]})
    idx = tmp_path / "splits.sqlite"
    index(idx, p1)
    index(idx, p2)
    rep = scan(idx, [p1, p2], tmp_path / "report")
    assert rep.outcome("p1", "t") == ("keep", "unique", None)
    assert rep.outcome("p1", "e") == ("keep", "unique", None)  # "test" is not retained
    for pkg, sid in (("p1", "v"), ("p1", "vn"), ("p2", "v")):
        assert rep.outcome(pkg, sid) == ("keep", "retained_split", None)
    assert rep.outcome("p2", "tn") == ("exclude", "near_duplicate", "p1/t")
    assert rep.involving("p1", "e") == []
    split_of = {(d["package_id"], d["sample_id"]): d["split"] for d in rep.decisions}
    for r in rep.relations:
        s, m = r["sample"], r["match"]
        assert (split_of[(s["package_id"], s["sample_id"])]
                == split_of[(m["package_id"], m["sample_id"])])
    assert ("p2/tn", "p1/t", "near", False, None) in rep.pairs()
    assert ("p2/v", "p1/v", "exact", False, None) in rep.pairs()
    assert rep.manifest["counts"]["by_split"] == {
        "test": {"keep": 1, "exclude": 0}, "train": {"keep": 1, "exclude": 1},
        "validation": {"keep": 3, "exclude": 0}}


def test_tokenizer_scopes_are_never_compared(tmp_path):
    p = plain_prose()
    x = p[17]
    xn = near_copy(x, p[18])
    pa = make_package(tmp_path, "pa", {"train": [cpt("a", x)]}, tokenizer="tok@r1")
    pb = make_package(tmp_path, "pb", {"train": [cpt("b", x)]}, tokenizer="tok@r2")
    pc = make_package(tmp_path, "pc", {"train": [cpt("c", xn)]}, tokenizer="tok@r1")
    pd = make_package(tmp_path, "pd", {"train": [cpt("d", xn)]}, tokenizer="tok@r2")
    idx = tmp_path / "scopes.sqlite"
    for pkg in (pa, pb, pc, pd):
        index(idx, pkg)
    rep = scan(idx, [pa, pb, pc, pd], tmp_path / "report")
    assert rep.outcome("pa", "a") == ("keep", "unique", None)
    assert rep.outcome("pb", "b") == ("keep", "unique", None)
    assert rep.decision("pa", "a")["content_id"] != rep.decision("pb", "b")["content_id"]
    assert rep.decision("pa", "a")["scope"] == "tokenizer:tok@r1"
    assert rep.decision("pb", "b")["scope"] == "tokenizer:tok@r2"
    assert rep.outcome("pc", "c") == ("exclude", "near_duplicate", "pa/a")
    assert rep.outcome("pd", "d") == ("exclude", "near_duplicate", "pb/b")
    assert rep.pairs() == {("pc/c", "pa/a", "near", False, None),
                           ("pd/d", "pb/b", "near", False, None)}
    # against history too: only the same tokenizer's content is a relation
    alone = scan(idx, [pd], tmp_path / "alone")
    b_content = rep.decision("pb", "b")["content_id"]
    assert alone.pairs() == {("pd/d", b_content, "near", True, None)}
    assert alone.relations[0]["match_sources"] == [{"package_id": "pb", "sample_id": "b",
                                                   "split": "train"}]


def test_sft_scopes_task_system_material_images(tmp_path):
    p = plain_prose()
    answer, material = p[19], p[20]
    h1, h2 = hashlib.sha256(b"image-1").hexdigest(), hashlib.sha256(b"image-2").hexdigest()

    def sft(sample_id: str, reply: str = answer, *, task: str = "summarize",
            system: str = "You are a careful technical writer.", material_text: str = material,
            images: tuple[str, ...] = (h1,)) -> dict:
        return {"id": sample_id, "domain": "docs", "task": task, "system": system,
                "material": {"text": material_text, "images": [{"sha256": h} for h in images]},
                "messages": [{"role": "user", "content": "Summarize the material."},
                             {"role": "assistant", "content": reply}],
                "source": {"row": sample_id}}

    near_answer = near_copy(answer, p[21])
    compared = lambda rec: qa_text(rec["messages"])  # noqa: E731
    assert jaccard(compared(sft("x")), compared(sft("x", near_answer))) >= THRESHOLD
    s1 = make_package(tmp_path, "s1", {"train": [sft("k0"), sft("img2", images=(h1, h2))]},
                      kind="sft")
    s2 = make_package(tmp_path, "s2", {"train": [
        sft("sys_case", system="  you are a CAREFUL technical   writer. "),  # same scope
        sft("near", near_answer),
        sft("task", task="explain"),
        sft("system", system="You are a terse technical writer."),
        sft("material", material_text=replace_words(material, 0, p[22], 3)),
        sft("image", images=(h2,)),
        sft("no_image", images=()),
        sft("img2r", images=(h2, h1)),  # image order does not matter
    ]}, kind="sft")
    idx = tmp_path / "sft.sqlite"
    index(idx, s1)
    index(idx, s2)
    rep = scan(idx, [s1, s2], tmp_path / "report")
    assert rep.outcome("s1", "k0") == ("keep", "unique", None)
    assert rep.outcome("s1", "img2") == ("keep", "unique", None)
    assert rep.outcome("s2", "sys_case") == ("exclude", "exact_duplicate", "s1/k0")
    assert rep.outcome("s2", "near") == ("exclude", "near_duplicate", "s1/k0")
    assert rep.outcome("s2", "img2r") == ("exclude", "exact_duplicate", "s1/img2")
    for sid in ("task", "system", "material", "image", "no_image"):
        assert rep.outcome("s2", sid) == ("keep", "unique", None), sid
    assert rep.pairs() == {("s2/sys_case", "s1/k0", "exact", False, None),
                           ("s2/near", "s1/k0", "near", False, None),
                           ("s2/img2r", "s1/img2", "exact", False, None)}
    scopes = {d["sample_id"]: d["scope"] for d in rep.decisions}
    assert len({scopes[s] for s in ("k0", "task", "system", "material", "image", "no_image",
                                    "img2")}) == 7
    assert all(s.startswith("sft:") for s in scopes.values())


def test_history_only_matches_are_relations_never_exclusions(index_location, tmp_path):
    p = plain_prose()
    x, y, w, z = p[23], p[24], p[25], p[26]
    yn, wn = near_copy(y, p[27]), near_copy(w, p[27])
    v1 = make_package(tmp_path, "v1", {"train": [cpt("x", x), cpt("y", y)],
                                       "validation": [cpt("w", w)]})
    v2 = make_package(tmp_path, "v2", {"train": [cpt("x2", x), cpt("yn", yn), cpt("wn", wn),
                                                 cpt("z", z)]})
    idx = index_location
    index(idx, v1)
    index(idx, v2)
    rep = scan(idx, [v2], tmp_path / "v2-only")
    for sid in ("x2", "yn", "wn", "z"):
        assert rep.outcome("v2", sid) == ("keep", "unique", None)
    x_content = rep.decision("v2", "x2")["content_id"]
    full = scan(idx, [v1, v2], tmp_path / "v1-v2")
    y_content = full.decision("v1", "y")["content_id"]
    assert rep.pairs() == {("v2/x2", x_content, "exact", True, None),
                           ("v2/yn", y_content, "near", True, None)}
    by_sample = {r["sample"]["sample_id"]: r for r in rep.relations}
    assert by_sample["x2"]["match"] == {"content_id": x_content, "package_id": None,
                                        "sample_id": None}
    assert by_sample["x2"]["match_sources"] == [{"package_id": "v1", "sample_id": "x",
                                                 "split": "train"}]
    assert by_sample["yn"]["jaccard"] == jaccard(y, yn)
    assert by_sample["yn"]["match_sources"] == [{"package_id": "v1", "sample_id": "y",
                                                 "split": "train"}]
    assert [i["package_id"] for i in rep.manifest["inputs"]] == ["v2"]
    assert {q["package_id"] for q in rep.manifest["index"]["packages"]} == {"v1", "v2"}
    assert rep.manifest["counts"]["history_only_relations"] == 2
    # with v1 in the pool the same matches exclude
    assert full.outcome("v2", "x2") == ("exclude", "exact_duplicate", "v1/x")
    assert full.outcome("v2", "yn") == ("exclude", "near_duplicate", "v1/y")
    assert full.outcome("v2", "wn") == ("keep", "unique", None)


def test_history_match_of_a_content_the_pool_holds_in_another_split(tmp_path):
    """History is every indexed (content, split) the pool does not hold: v1 has X in train;
    the pool has X only in validation and a near copy of X in train, which relates to v1's X."""
    p = plain_prose()
    x = p[28]
    xn = near_copy(x, p[29])
    assert jaccard(x, xn) >= THRESHOLD
    v1 = make_package(tmp_path, "v1", {"train": [cpt("x", x)]})
    v2 = make_package(tmp_path, "v2", {"train": [cpt("xn", xn)], "validation": [cpt("x", x)]})
    idx = tmp_path / "mixed.sqlite"
    index(idx, v1)
    index(idx, v2)
    rep = scan(idx, [v2], tmp_path / "v2-only")
    x_content = rep.decision("v2", "x")["content_id"]
    assert rep.pairs() == {("v2/xn", x_content, "near", True, None)}
    (rel,) = rep.relations
    assert rel["match_sources"] == [{"package_id": "v1", "sample_id": "x", "split": "train"}]
    assert rep.outcome("v2", "xn") == ("keep", "unique", None)


# --------------------------------------------------------------------------- determinism, read-only


def _pool(tmp_path: Path) -> list[Path]:
    """Two versions of 40 real documents: v2 reprints half of them, exactly or nearly."""
    docs = stdlib_docstrings()[:40]
    v1 = make_package(tmp_path, "d1", {"train": [cpt(f"d{i}", t) for i, t in enumerate(docs)],
                                       "validation": [cpt("val", docs[0])]})
    reprints = []
    for i, t in enumerate(docs[::2]):
        reprints.append(cpt(f"r{i}", t if i % 3 == 0 else replace_words(t, 3, docs[-1], 2)))
    v2 = make_package(tmp_path, "d2", {"train": reprints}, shard_records=7)
    return [v1, v2]


@pytest.mark.slow
def test_same_inputs_give_byte_identical_reports_whatever_the_workers(tmp_path, monkeypatch):
    from near_dedup_core.scan import run as scan_run
    from near_dedup_core.scan import verify as verify_stage

    pkgs = _pool(tmp_path)
    idx1, idx2 = tmp_path / "one.sqlite", tmp_path / "two.sqlite"
    index(idx1, pkgs[0], workers=1)
    index(idx1, pkgs[1], workers=1)
    index(idx2, pkgs[0], workers=2)
    index(idx2, pkgs[1], workers=2)
    outs = [scan(idx1, pkgs, tmp_path / "r1", workers=1).path,
            scan(idx1, pkgs, tmp_path / "r2", workers=2).path,
            scan(idx2, pkgs, tmp_path / "r3", workers=2).path,
            scan(idx1, pkgs, tmp_path / "r4", workers=1).path]
    # a process pool however small the pool (a worker re-hashes the files and writes
    # origins.jsonl), and small verification chunks: the pairs are spread over the workers
    monkeypatch.setattr(scan_run, "POOL_RECORDS", 0)
    monkeypatch.setattr(verify_stage, "VERIFY_CHUNK", 3)
    outs += [scan(idx1, pkgs, tmp_path / "r5", workers=2).path,
             scan(idx2, pkgs, tmp_path / "r6", workers=1).path]
    first = tree_bytes(outs[0])
    assert load_report(outs[0]).manifest["counts"]["exclude"] >= 10
    for out in outs[1:]:
        assert tree_bytes(out) == first, out


def test_a_scan_asks_the_kernel_to_read_the_index_ahead(tmp_path, monkeypatch):
    """`index_store.read_ahead` is asked for the index a scan reads, once the index is known
    to hold the inputs (not for a refused scan, nor by `index`, which reads little of it): it
    hints a file that fits the memory share, and nothing else (no file, a PostgreSQL URL, a
    file over the share), and changes no file."""
    from near_dedup_core import index_store

    pkgs = _pool(tmp_path)
    idx = tmp_path / "index.sqlite"
    asked: list[tuple[str, bool]] = []
    real = index_store.sqlite.snapshot.read_ahead

    def spy(path):
        asked.append((str(path), real(path)))
        return asked[-1][1]

    monkeypatch.setattr(index_store.sqlite.snapshot, "read_ahead", spy)
    index(idx, pkgs[0])
    index(idx, pkgs[1])
    other = make_package(tmp_path, "d3", {"train": [cpt("z", stdlib_docstrings()[50])]})
    refused(["--quiet", "--index", idx, "scan", "--inputs", other,
             "--output", tmp_path / "refused"])
    assert asked == []
    before = (file_sha256(idx), idx.stat().st_mtime_ns)
    scan(idx, pkgs, tmp_path / "report")
    assert asked == [(str(idx), True)]
    assert (file_sha256(idx), idx.stat().st_mtime_ns) == before
    assert not real(tmp_path / "none.sqlite")
    assert not index_store.open_index("postgresql://localhost/none").read_ahead()
    monkeypatch.setattr(index_store.sqlite.snapshot, "READ_AHEAD_SHARE", idx.stat().st_size / 2**50)
    assert not real(idx)


def test_verify_chunks_shrink_towards_the_end():
    """Pairs of 10,000 two-content components: a million pairs start with chunks of
    VERIFY_CHUNK, and 40,000 pairs for two workers with chunks of 2,500 (a sixteenth); once
    fewer pairs remain than sixteen chunks, chunks shrink to a sixteenth of the rest, down to
    MIN_VERIFY_CHUNK; 1,000 pairs make one chunk. Every pair is in exactly one chunk, and no
    component is cut."""
    from near_dedup_core.scan import verify as verify_stage

    def sizes(m: int, workers: int) -> list[int]:
        first = np.arange(m, dtype=np.int64) % 10_000 * 2
        pairs = np.stack([first, first + 1], axis=1)
        out = verify_stage.component_chunks(pairs, workers)
        assert np.array_equal(np.sort(np.concatenate(out)), np.arange(m))
        owner = {}  # component (its first content) -> chunk
        for k, c in enumerate(out):
            for comp in set(pairs[c, 0].tolist()):
                assert owner.setdefault(comp, k) == k, comp
        return [len(c) for c in out]

    smallest, full = verify_stage.MIN_VERIFY_CHUNK, verify_stage.VERIFY_CHUNK
    assert sizes(1_000, 2) == [1_000]
    for m, first in ((40_000, 2_500), (1_000_000, full)):
        got = sizes(m, 2)
        assert got[0] == first and got == sorted(got, reverse=True)
        assert min(got[:-1]) >= smallest and got[-1] <= smallest + 100
        # each chunk is at least a sixteenth of what was left (rounded up to whole components)
        left = m - np.cumsum([0, *got[:-1]])
        assert all(n >= min(full, -(-rest // 16), rest) for n, rest in zip(got, left.tolist(), strict=False))
    # full chunks until 16 × 20,000 pairs remain, and one of those
    assert sizes(1_000_000, 2)[:36] == [full] * 35 + [18_800]


def test_verify_chunks_run_costliest_first():
    """A chunk's cost counts each distinct text's size once and each pair's mean size at
    PAIR_COST: three pairs of two long texts run first, then forty pairs around one short
    text (41 texts), then ten pairs of twenty short texts, then two one-pair chunks of equal
    cost in their order. By pair count the long texts' chunk would run third."""
    from near_dedup_core.scan import verify as verify_stage

    star = np.array([[0, k] for k in range(1, 41)], dtype=np.int64)  # 40 pairs, 41 texts
    short = np.array([[100 + 2 * k, 101 + 2 * k] for k in range(10)], dtype=np.int64)
    long_ = np.array([[200, 201], [200, 201], [201, 200]], dtype=np.int64)
    twin = np.array([[300, 301]], dtype=np.int64)
    content_pairs = np.concatenate([star, short, long_, twin, twin + 2])
    size_of = {c: 10 for c in np.unique(content_pairs).tolist()}
    size_of.update({200: 1_000, 201: 1_000})
    sizes = np.vectorize(size_of.__getitem__)(content_pairs)
    bounds = np.cumsum([0, 40, 10, 3, 1, 1])
    chunks = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert verify_stage._chunk_cost(content_pairs[chunks[2]], sizes[chunks[2]]) == \
        2_000 + verify_stage.PAIR_COST * 3_000
    assert verify_stage._chunk_cost(content_pairs[chunks[0]], sizes[chunks[0]]) == \
        410 + verify_stage.PAIR_COST * 400
    got = verify_stage.costliest_first(chunks, content_pairs, sizes)
    assert [int(c[0]) for c in got] == [50, 0, 40, 53, 54]


def test_scan_leaves_the_index_file_unchanged(tmp_path):
    pkgs = _pool(tmp_path)
    idx = tmp_path / "ro.sqlite"
    index(idx, *pkgs)
    before = file_sha256(idx)
    scan(idx, pkgs, tmp_path / "report")
    assert file_sha256(idx) == before
    refused(["--quiet", "--index", idx, "scan", "--inputs", *pkgs, "--output", tmp_path / "report"])
    assert file_sha256(idx) == before


def test_report_write_failure_leaves_nothing_behind(tmp_path, monkeypatch):
    from near_dedup_core.scan import write as write_stage

    pkgs = _pool(tmp_path)
    idx = tmp_path / "idx.sqlite"
    index(idx, *pkgs)

    def fail_after_writing(folder: Path, *_known) -> None:
        (folder / "checksums.sha256").write_text("partial", encoding="utf-8")
        raise NearDedupError("simulated write failure")

    monkeypatch.setattr(write_stage, "write_checksums", fail_after_writing)
    out = tmp_path / "reports" / "near"
    assert "simulated write failure" in refused(["--quiet", "--index", idx, "scan",
                                                 "--inputs", *pkgs, "--output", out])
    assert not out.exists()
    assert leftovers(out.parent) == []


# --------------------------------------------------------------------------- refusals


@pytest.fixture(scope="module")
def indexed_once(tmp_path_factory, backend, new_index_location) -> dict:
    """v1 indexed into an index of the module's backend, once: the refusals leave it as it
    was (each test asserts so)."""
    root = tmp_path_factory.mktemp(f"indexed-{backend}")
    p = plain_prose()
    v1 = make_package(root / "pkgs", "v1", {"train": [cpt("a", p[28]), cpt("b", p[29])]})
    v2 = make_package(root / "pkgs", "v2", {"train": [cpt("c", p[30])]})
    idx = new_index_location(root / "index")
    index(idx, v1)
    return {"index": idx, "v1": v1, "v2": v2, "backend": backend,
            "new_index_location": new_index_location}


@pytest.fixture
def indexed(tmp_path, indexed_once) -> dict:
    """The indexed v1 (and v2, not indexed) as packages of this test (copies: a case may
    change them), the index, and a reports folder."""
    for name in ("v1", "v2"):
        shutil.copytree(indexed_once[name], tmp_path / "pkgs" / name)
    (tmp_path / "reports").mkdir()
    return {**indexed_once, "root": tmp_path, "v1": tmp_path / "pkgs" / "v1",
            "v2": tmp_path / "pkgs" / "v2"}


def _not_an_index(env: dict) -> str:
    """A location of the module's backend that holds something else than an index."""
    root, backend = env["root"], env["backend"]
    if backend == "postgresql":
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        url = env["new_index_location"](root)
        engine = create_engine("postgresql+psycopg://" + url.split("://", 1)[1],
                               poolclass=NullPool)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE pipeline (id int)"))
        return url
    other = root / "index" / "notes.sqlite"
    other.parent.mkdir(parents=True, exist_ok=True)
    if backend == "iceberg":
        other.mkdir()
        (other / "notes.txt").write_text("not an index", encoding="utf-8")
        return f"iceberg://{other}"
    other.write_text("not a database", encoding="utf-8")
    return str(other)


def _missing_index(env: dict) -> tuple[str, str]:
    """A location of the module's backend where no index is, and the refusal's words."""
    if env["backend"] == "postgresql":
        return env["index"].rsplit("/", 1)[0] + "/no_such_db", \
            'database "no_such_db" does not exist'
    if env["backend"] == "iceberg":
        return f"iceberg://{env['root'] / 'index' / 'none'}", "not found"
    return str(env["root"] / "index" / "none.sqlite"), "not found"


def _refusal(env: dict, case: str) -> tuple[list, str]:
    """Arrange one refused scan: (argv, expected message fragment)."""
    root, idx, v1, v2 = env["root"], env["index"], env["v1"], env["v2"]
    out = root / "reports" / "near"
    if case == "not indexed":
        return ["--index", idx, "scan", "--inputs", v1, v2, "--output", out], \
            "package v2: not in index"
    if case == "other manifest":
        changed = make_package(root / "changed", "v1", {"train": [cpt("a", plain_prose()[31])]})
        return ["--index", idx, "scan", "--inputs", changed, "--output", out], \
            "package v1, manifest.json: indexed with manifest sha256"
    if case == "data changed":
        shard = v1 / "data/train/part-00000.jsonl"
        data = shard.read_bytes()
        assert b"the" in data
        shard.write_bytes(data.replace(b"the", b"thy", 1))  # same size, same manifest
        return ["--index", idx, "scan", "--inputs", v1, "--output", out], \
            "package v1, data/train/part-00000.jsonl: sha256 does not match"
    if case == "output exists":
        out.mkdir()
        return ["--index", idx, "scan", "--inputs", v1, "--output", out], "already exists"
    if case == "output inside package":
        return ["--index", idx, "scan", "--inputs", v1, "--output", v1 / "report"], \
            "inside input package"
    if case == "index missing":
        missing, fragment = _missing_index(env)
        return ["--index", missing, "scan", "--inputs", v1, "--output", out], fragment
    if case == "other config":
        cfg = write_config(root / "strict.json", threshold=0.8)
        return ["--index", idx, "--config", cfg, "scan", "--inputs", v1, "--output", out], \
            "use a new index path"
    if case == "not an index":
        return ["--index", _not_an_index(env), "scan", "--inputs", v1, "--output", out], \
            "not a near-dedup index"
    if case == "no index option":
        return ["scan", "--inputs", v1, "--output", out], "needs --index"
    if case == "mixed kinds":
        sft = make_package(root / "pkgs", "s1", {"train": [{
            "id": "q", "task": "t", "messages": [{"role": "user", "content": "hello"}]}]},
            kind="sft")
        return ["--index", idx, "scan", "--inputs", v1, sft, "--output", out], "kind sft differs"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["not indexed", "other manifest", "data changed",
                                  "output exists", "output inside package", "index missing",
                                  "other config", "not an index", "no index option",
                                  "mixed kinds"])
def test_scan_refusals_exit_1_and_publish_nothing(indexed, case):
    argv, fragment = _refusal(indexed, case)
    before_index = index_bytes(indexed["index"])
    before_pkgs = {k: tree_bytes(indexed[k]) for k in ("v1", "v2")}
    out = argv[argv.index("--output") + 1]
    existed = out.exists()
    message = refused(["--quiet", *argv])
    assert fragment in message, message
    assert index_bytes(indexed["index"]) == before_index
    if case != "data changed":
        assert {k: tree_bytes(indexed[k]) for k in ("v1", "v2")} == before_pkgs
    if existed:
        assert list(out.iterdir()) == []
    else:
        assert not out.exists()
    assert leftovers(out.parent) == []


def test_a_pooled_scan_reports_a_changed_file_and_its_side_work_stops_there(indexed,
                                                                               monkeypatch):
    """With a process pool, one worker does the side work in one task (`run.side_work`, so
    that none of it can wait behind the verify chunks): it re-hashes the data files and, when
    one differs from its manifest, returns without writing ``origins.jsonl`` or reading the
    text digests; the scan names the changed file, as it does inline."""
    from near_dedup_core.scan import pool as pool_stage
    from near_dedup_core.scan import run as scan_run

    monkeypatch.setattr(scan_run, "POOL_RECORDS", 0)
    argv, fragment = _refusal(indexed, "data changed")
    out = argv[argv.index("--output") + 1]
    assert fragment in refused(["--quiet", *argv, "--workers", 2])
    assert not out.exists() and leftovers(out.parent) == []

    pkgs = open_packages([indexed["v1"]])
    paths, expected = pool_stage.data_files(pkgs), pool_stage.expected_digests(pkgs)
    origins = indexed["root"] / "origins.jsonl"
    digests, written, texts = scan_run.side_work(paths, expected, str(indexed["index"]), [1],
                                                 ["v1"], origins)
    assert digests != expected and written is None and texts is None
    assert not origins.exists()
    expected[0] = digests[0]
    digests, written, texts = scan_run.side_work(paths, expected, str(indexed["index"]), [1],
                                                 ["v1"], origins)
    assert written is not None and written[0] == len(origins.read_bytes().splitlines())
    assert texts is not None and len(texts.start) - 1 == written[0] > 0


# --------------------------------------------------------------------------- limits


def test_max_candidates_exceeded_exits_2_without_report(tmp_path):
    p = plain_prose()
    config = write_config(tmp_path / "config.json", max_candidates=3)

    def copies(base: str, donor: str, n: int, prefix: str) -> list[dict]:
        texts = [replace_words(base, 2 * i + 1, donor, 1) for i in range(n)]
        for one, two in itertools.combinations(texts, 2):
            assert jaccard(one, two) >= 0.95  # an LSH candidate but for ~1e-7
        return [cpt(f"{prefix}{i}", t) for i, t in enumerate(texts)]

    four = make_package(tmp_path, "four", {"train": copies(p[32], p[33], 4, "f")})
    six = make_package(tmp_path, "six", {"train": copies(p[34], p[33], 6, "s")})
    history = make_package(tmp_path, "history", {"train": copies(p[35], p[33], 4, "h")})
    single = make_package(tmp_path, "single", {"train": copies(p[35], p[36], 1, "one")})
    idx = tmp_path / "cand.sqlite"
    index(idx, four, six, config=config)
    index(idx, history, config=config)
    index(idx, single, config=config)
    before = file_sha256(idx)

    # exactly max_candidates candidates per sample is allowed
    rep = scan(idx, [four], tmp_path / "four-report", config=config)
    assert rep.manifest["counts"]["exclude"] == 3

    for pkgs, name in (([six], "six-report"), ([single], "single-report")):
        out = tmp_path / name
        message = refused(["--quiet", "--index", idx, "--config", config, "scan",
                           "--inputs", *pkgs, "--output", out], code=2)
        assert "over max_candidates 3" in message and "no report written" in message
        assert re.search(r"package (six|single), data/train/part-00000\.jsonl:\d+", message)
        assert not out.exists()
        assert leftovers(tmp_path) == []
    assert file_sha256(idx) == before


def _lsh_reference(keys: np.ndarray, groups: np.ndarray, limit: int):
    """Band by band: slots sorted by (group, key), stably; the first run over the limit
    names its first slot; otherwise every pair within a run, and each run member's count."""
    pairs, counts = set(), np.zeros(len(groups), dtype=np.int64)
    for b in range(keys.shape[1]):
        order = sorted(range(len(groups)), key=lambda i: (groups[i], keys[i, b]))
        runs = [list(g) for _, g in itertools.groupby(order, lambda i: (groups[i], keys[i, b]))]
        for run in runs:
            if len(run) - 1 > limit:
                return ("too many", run[0], len(run) - 1), None
        for run in runs:
            for i in run:
                counts[i] += len(run) - 1
            pairs.update((min(i, j), max(i, j)) for i, j in itertools.combinations(run, 2))
    return pairs, counts


@pytest.mark.parametrize("limit", [1, 3, 1000])
def test_lsh_pairs_and_the_limit_are_those_of_sorted_runs(limit):
    """The candidate stage groups band keys through hash tables; pairs, per-slot counts and
    the slot named by an exceeded limit are those of sorting each band by (group, key)."""
    from near_dedup_core.scan.candidates import _pool_lsh_pairs

    rng = np.random.default_rng(limit)
    keys = rng.integers(0, 12, size=(400, 4)).astype(np.int64) * 10**15  # many collisions
    groups = rng.integers(0, 3, size=400).astype(np.int64)
    expected, counts = _lsh_reference(keys, groups, limit)

    def too_many(slot: int, count: int) -> Exception:
        return ValueError(("too many", slot, count))

    got_counts = np.zeros(400, dtype=np.int64)
    try:
        got = _pool_lsh_pairs(keys, groups, got_counts, limit, too_many)
    except ValueError as exc:
        assert exc.args[0] == expected
        return
    assert counts is not None and {tuple(p) for p in got.tolist()} == expected
    assert len(got) == len(expected) and got_counts.tolist() == counts.tolist()


def test_max_candidates_counts_only_the_same_scope_and_split(tmp_path):
    """Indexed copies in another split or tokenizer scope are never candidates, so they do not
    count towards max_candidates."""
    p = plain_prose()
    config = write_config(tmp_path / "config.json", max_candidates=3)
    texts = [replace_words(p[37], 2 * i + 1, p[33], 1) for i in range(8)]
    for one, two in itertools.combinations(texts, 2):
        assert jaccard(one, two) >= 0.93  # an LSH candidate but for ~1e-5
    elsewhere = make_package(tmp_path, "elsewhere", {
        "validation": [cpt(f"v{i}", t) for i, t in enumerate(texts[4:])]})
    other_scope = make_package(tmp_path, "other-scope", {
        "train": [cpt(f"o{i}", t) for i, t in enumerate(texts[4:])]}, tokenizer="tok@r9")
    pool = make_package(tmp_path, "pool",
                        {"train": [cpt(f"t{i}", t) for i, t in enumerate(texts[:4])]})
    idx = tmp_path / "cand.sqlite"
    index(idx, elsewhere, other_scope, config=config)
    index(idx, pool, config=config)
    rep = scan(idx, [pool], tmp_path / "report", config=config)
    assert rep.manifest["counts"]["exclude"] == 3
    assert all(not r["history_only"] for r in rep.relations)


def test_max_pool_records_exceeded_exits_2_without_report(tmp_path):
    p = plain_prose()
    config = write_config(tmp_path / "config.json", max_pool_records=3)
    a = make_package(tmp_path, "a", {"train": [cpt("1", p[37]), cpt("2", p[38])]})
    b = make_package(tmp_path, "b", {"train": [cpt("3", p[39]), cpt("4", p[0])]})
    idx = tmp_path / "pool.sqlite"
    index(idx, a, config=config)
    index(idx, b, config=config)
    out = tmp_path / "report"
    message = refused(["--quiet", "--index", idx, "--config", config, "scan",
                       "--inputs", a, b, "--output", out], code=2)
    assert "input pool has 4 records, over max_pool_records 3" in message
    assert not out.exists() and leftovers(tmp_path) == []
    scan(idx, [a], tmp_path / "a-report", config=config)  # under the limit: fine


def test_sample_over_max_chars_exits_2_and_nothing_is_indexed_or_reported(tmp_path):
    p = plain_prose()
    config = write_config(tmp_path / "config.json", max_chars=1000)
    long_text = next(t for t in p if len(t) > 1000)
    ok = make_package(tmp_path, "ok", {"train": [cpt("a", p[0][:900])]})
    big = make_package(tmp_path, "big", {"train": [cpt("a", p[1][:900]), cpt("b", long_text)]})
    idx = tmp_path / "chars.sqlite"
    index(idx, ok, config=config)
    before = file_sha256(idx)
    message = refused(["--quiet", "--index", idx, "--config", config, "index", "--inputs", big],
                      code=2)
    assert "package big, data/train/part-00000.jsonl:2" in message
    assert "over max_chars 1,000" in message
    assert file_sha256(idx) == before
    out = tmp_path / "report"
    assert "index it first" in refused(["--quiet", "--index", idx, "--config", config, "scan",
                                        "--inputs", ok, big, "--output", out])
    assert not out.exists() and leftovers(tmp_path) == []


# --------------------------------------------------------------------------- quality on real prose


def _reprint(doc: str, n: int, donor: str) -> str:
    """One of the edits a later release makes to a document, chosen by ``n``."""
    sentences = re.split(r"(?<=[.!?])\s+", doc.strip())
    kind = n % 5
    if kind == 0 and len(sentences) > 3:  # a sentence deleted
        del sentences[len(sentences) // 2]
        return " ".join(sentences)
    if kind == 1:  # a sentence inserted
        extra = re.split(r"(?<=[.!?])\s+", donor.strip())[0][:120]
        sentences.insert(len(sentences) // 2, extra)
        return " ".join(sentences)
    if kind == 2:  # a word changed
        return replace_words(doc, len(doc.split()) // 3, donor, 1)
    if kind == 3:  # a navigation line added
        return f"Home › Library reference › Section {n // 5}\n{doc}"
    return "\n\n" + doc.upper() + "  "  # reformatted only: the same content


def test_quality_on_real_prose_recall_and_no_false_exclusions(tmp_path):
    docs = list(stdlib_docstrings()[:320])
    assert len(docs) == 320
    reprints = [_reprint(doc, i, docs[(i * 7 + 3) % len(docs)]) for i, doc in enumerate(docs[::2])]
    v1 = make_package(tmp_path, "real-v1", {"train": [cpt(f"d{i}", t) for i, t in enumerate(docs)]},
                      shard_records=100)
    v2 = make_package(tmp_path, "real-v2",
                      {"train": [cpt(f"r{i}", t) for i, t in enumerate(reprints)]})
    idx = tmp_path / "real.sqlite"
    index(idx, v1)
    index(idx, v2)
    rep = scan(idx, [v1, v2], tmp_path / "report")

    text_of = {("real-v1", f"d{i}"): t for i, t in enumerate(docs)}
    text_of.update({("real-v2", f"r{i}"): t for i, t in enumerate(reprints)})
    content_of = {(d["package_id"], d["sample_id"]): d["content_id"] for d in rep.decisions}
    norm = {}
    for key, cid in content_of.items():
        norm.setdefault(cid, normalize(text_of[key]))
    cids = sorted(norm)
    sets = dict(zip(cids, HASHER.shingle_sets([norm[c] for c in cids]), strict=True))
    guard = guard_for(DEFAULTS, frozenset({"docs"}))

    # ground truth: exact Jaccard of every pair of distinct contents (all in one split)
    truth = {}
    for a, b in itertools.combinations(cids, 2):
        j = exact_jaccard(sets[a], sets[b])
        if j >= THRESHOLD:
            truth[frozenset((a, b))] = j
    assert len(truth) >= 100

    found = {}
    for r in rep.relations:
        if r["kind"] != "near":
            continue
        assert not r["history_only"]
        pair = frozenset((content_of[(r["sample"]["package_id"], r["sample"]["sample_id"])],
                          r["match"]["content_id"]))
        found[pair] = r
    recall = sum(1 for pair in truth if pair in found) / len(truth)
    assert recall >= 0.99, recall
    for pair, r in found.items():  # every relation is verified and guard-checked correctly
        assert pair in truth and r["jaccard"] == truth[pair]
        a, b = sorted(pair)
        assert r["blocked_by"] == guard.blocked_by(norm[a], norm[b])

    excluded = [d for d in rep.decisions if d["decision"] == "exclude"]
    assert len(excluded) >= 100
    decision_of = {(d["package_id"], d["sample_id"]): d for d in rep.decisions}
    for d in excluded:
        kept_key = (d["kept"]["package_id"], d["kept"]["sample_id"])
        assert decision_of[kept_key]["decision"] == "keep"
        mine, theirs = d["content_id"], content_of[kept_key]
        if d["reason"] == "exact_duplicate":
            assert mine == theirs and d["jaccard"] == 1.0
        else:
            assert d["reason"] == "near_duplicate"
            j = exact_jaccard(sets[mine], sets[theirs])
            assert d["jaccard"] == j and j >= THRESHOLD
            assert guard.blocked_by(norm[mine], norm[theirs]) is None
    # greedy: a kept sample never has an open relation to a kept pool sample
    for r in rep.relations:
        s = decision_of[(r["sample"]["package_id"], r["sample"]["sample_id"])]
        if s["decision"] == "keep" and r["blocked_by"] is None and not r["history_only"]:
            m = decision_of[(r["match"]["package_id"], r["match"]["sample_id"])]
            assert m["decision"] == "exclude", r
