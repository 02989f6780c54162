"""Contamination of every kind of eval item: short items found as one exact run of whole words,
multiple-choice stems with and without their options, one-line code, numbers (no item), and
what is set aside: text common in the pool and allowlisted public text (docs/contamination.md,
"Short items" and "Common text and the allowlist")."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import make_package, refused, run_cli, stdlib_paragraphs, tree_bytes

from near_dedup_core.contamination import exact, probe
from near_dedup_core.contamination.items import EvalItem, SampleRef
from near_dedup_core.contamination.report import AllowEntry
from near_dedup_core.contamination.setaside import Allowlist, Matched, set_aside
from near_dedup_core.fsutil import write_checksums
from near_dedup_core.signature import code_points

LICENCE = "Permission is hereby granted, free of charge, to any person obtaining a copy"
QUOTE = "Four score and seven years ago our fathers brought forth on this continent"

EVAL = [
    {"id": "short", "text": "What is the capital of Burkina Faso?"},
    {"id": "mc-stem", "text": "Which gas do green plants mostly absorb from the air?",
     "choices": ["A. Oxygen", "B. Carbon dioxide", "C. Nitrogen", "D. Helium"], "answer": "B"},
    {"id": "mc-options", "text": "Which metal is liquid at room temperature?",
     "choices": ["A. Iron", "B. Mercury", "C. Copper", "D. Zinc"], "answer": "B"},
    {"id": "code", "text": "print(sum(map(int, input().split())))"},
    {"id": "number", "text": "42"},
    {"id": "inside", "text": "cat sat"},
    {"id": "digits", "text": "3 apples"},
    {"id": "licence", "text": LICENCE},
    {"id": "quote", "text": QUOTE},
    {"id": "clean", "text": "Name the longest river of the Iberian peninsula."},
    {"id": "one-word", "text": "Which planet has the largest number of known moons?"},
    {"id": "three", "text": "Boil the water"},
    {"id": "train", "text": "A train leaves the station at 3 pm"},
    {"id": "two-words", "text": "Which river flows through the ancient city of Baghdad in Iraq"},
    {"id": "version", "text": "rhash (1.3.2-2) unstable; urgency=low"},
    {"id": "date", "text": "2001-12-14 Hrvoje Niksic <hniksic@arsdigita.com>"},
]


def _docs() -> list[str]:
    paras = stdlib_paragraphs()
    docs = [paras[i] + " " + paras[i + 1] for i in range(0, 80, 2)]
    docs[0] += " Quiz: WHAT is the capital of Burkina-Faso ? Ouagadougou."
    docs[1] = "Which gas do green plants mostly absorb from the air... " + docs[1]
    docs[2] += ("\nWhich metal is liquid at room temperature?\nA. Iron\nB. Mercury\n"
                "C. Copper\nD. Zinc")
    docs[3] += " Solution: print(sum(map(int, input().split()))) and done."
    docs[4] += " The concatenated sat down; 13 apples fell."
    for k in range(5, 17):  # a licence header in twelve documents: common in the pool
        docs[k] = f"# {LICENCE} of this software.\n" + docs[k]
    docs[17] += f" As the speech says, {QUOTE}."
    docs[18] = f"{QUOTE}, a new nation. " + docs[18]
    docs[19] += " The answer is 42."
    docs[20] += " Which planet has the biggest number of known moons today?"
    docs[21] += " Boil some water."
    docs[22] += " Trivia: a train leaves the station at 5 pm."
    docs[23] += " Which river runs through the old city of Baghdad in Iraq? The Tigris."
    docs[24] = "gzip (1.3.2-2) unstable; urgency=low\n" + docs[24]
    docs[25] = "2001-12-02 Hrvoje Niksic <hniksic@arsdigita.com>\n" + docs[25]
    return docs


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contam-kinds")
    pool = make_package(tmp, "pool", {"train": [{"id": f"d{i}", "text": t}
                                                for i, t in enumerate(_docs())]})
    evals = make_package(tmp, "quiz", {"test": EVAL}, kind="cpt")
    allow = tmp / "allowlist.jsonl"
    allow.write_text(json.dumps({"text": QUOTE + ", a new nation",
                                 "reason": "Gettysburg address, public domain"}) + "\n")
    out = tmp / "report"
    code, stdout, err = run_cli("--quiet", "contamination", "--evals", evals, "--inputs", pool,
                                "--output", out, "--workers", 1, "--allowlist", allow)
    assert code == 0, err
    return {"tmp": tmp, "pool": pool, "evals": evals, "report": out, "allow": allow,
            "stdout": stdout}


def _rows(path: Path, name: str) -> list[dict]:
    return [orjson.loads(x) for x in (path / name).read_bytes().splitlines()]


def _pairs(report: Path) -> dict[tuple[str, str], dict]:
    return {(r["eval"]["sample_id"], r["training"]["sample_id"]): r
            for r in _rows(report, "contamination.jsonl")}


def test_short_items_are_found_as_whole_words_with_their_spans(kinds):
    pairs = _pairs(kinds["report"])
    short = pairs[("short", "d0")]
    assert short["method"] == "exact" and short["field"] == "text"
    assert short["training_text"] == "what is the capital of burkina-faso"
    assert short["item_text"] == "what is the capital of burkina faso"
    assert short["item_shingles"] == short["common_shingles"] == 7
    assert short["containment"] == 1.0
    code = pairs[("code", "d3")]
    assert code["method"] == "exact"
    assert code["training_text"] == "print(sum(map(int, input().split"
    # not inside a longer word or number; a number alone is no item
    assert not {k for k in pairs if k[0] in ("inside", "digits", "number", "clean")}
    summary = json.loads((kinds["report"] / "summary.json").read_text())["evals"][0]
    assert summary["items"] == len(EVAL) and summary["items_skipped_short"] == 1
    assert summary["items_checked"] == len(EVAL) - 1


def test_words_with_a_letter_may_differ_where_the_rest_still_reach_the_threshold(kinds):
    pairs = _pairs(kinds["report"])
    moons = pairs[("one-word", "d20")]
    assert moons["method"] == "exact" and moons["common_shingles"] == 8
    assert moons["item_shingles"] == 9 and moons["containment"] == 8 / 9
    assert moons["training_text"] == "which planet has the biggest number of known moons"
    assert not moons["numbers_differ"]
    # 11 words: two may differ (9 / 11 ≥ 0.8); an item of 16 words or fewer is found by its
    # words, not by its shingles
    river = pairs[("two-words", "d23")]
    assert river["method"] == "exact" and river["common_shingles"] == 9
    assert river["item_shingles"] == 11
    assert river["training_text"] == "which river runs through the old city of baghdad in iraq"
    assert not any(k[0] == "three" for k in pairs)  # 2 of 3 words is below 0.8
    # the numbers of a short item are what it says: another time, version or date is another
    # line, and they do not count among the words that may differ (rhash, unstable, urgency,
    # low: four, none may differ)
    assert not {k for k in pairs if k[0] in ("train", "version", "date")}


def test_the_tolerance_of_an_item_counts_its_words_with_a_letter():
    assert [probe.tolerance_of(w, 0.8) for w in (0, 1, 4, 5, 9, 10, 15, 16)] == \
        [0, 0, 0, 1, 1, 2, 3, 3]
    assert probe.tolerance_of(10, 1.0) == 0 and probe.tolerance_of(200, 0.5) == \
        exact.MAX_TOLERANCE
    items = [EvalItem(SampleRef(0, k, "", "", "", "", 0, None), text) for k, text in
             enumerate(["rhash 1 3 2 2 unstable urgency low", "a b c d e 1 2",
                        "x" * 60 + " two words"])]
    state = probe._exact_state(items, np.asarray([True, True, False]), 0.8)
    assert state["tolerance"].tolist() == [0, 1, 0]
    assert [sorted(c.elements()) if c is not None else None
            for c in state["short_numbers"]] == [["1", "2", "2", "3"], ["1", "2"], []]
    # a span found by shingles holds every number of an item found by its words
    assert probe.holds_numbers(state["short_numbers"][0], "gzip 1 3 2 2 unstable")
    assert not probe.holds_numbers(state["short_numbers"][0], "gzip 1 3 2 1 unstable")
    assert probe.holds_numbers(None, "any numbers 4 5")
    # nor its identifiers (a file, a test, a version), since format 4
    state = probe._exact_state([EvalItem(SampleRef(0, 0, "", "", "", "", 0, None),
                                         "testsuite/libgomp.fortran/task1.f90: ditto")],
                               np.asarray([True]), 0.8)
    assert sorted(state["short_numbers"][0].elements()) == ["f90", "task1"]
    assert state["tolerance"].tolist() == [1]  # six words with a letter: one may differ
    assert state["word_fixed"][:6].tolist() == [False, False, False, True, True, False]
    assert not probe.holds_numbers(state["short_numbers"][0], "libgomp fortran task3 f90")
    # a run of another script holding a digit (Chinese has no spaces) is no identifier
    assert probe.fixed_words("第3章 task1 42 x86_64 ⅷ") == ["task1", "42", "x86", "64"]


def test_a_multiple_choice_item_is_its_stem_with_and_without_its_options(kinds):
    pairs = _pairs(kinds["report"])
    stem = pairs[("mc-stem", "d1")]  # the stem alone, without its options
    assert stem["method"] == "exact" and stem["field"] == "text"  # 10 words
    options = pairs[("mc-options", "d2")]  # one pair per record and sample: the stem first
    assert options["field"] == "text"
    assert sum(1 for k in pairs if k[0] == "mc-options") == 1
    assert not any(k[0] in ("mc-stem", "mc-options") and k[1] not in ("d1", "d2")
                   for k in pairs)  # never the answer letter alone


def test_common_and_allowlisted_text_is_set_aside_and_listed(kinds):
    pairs = _pairs(kinds["report"])
    assert not {k for k in pairs if k[0] in ("licence", "quote")}
    aside = {r["eval"]["sample_id"]: r for r in _rows(kinds["report"], "set_aside.jsonl")}
    assert aside["licence"]["reason"] == "common"
    assert aside["licence"]["training_samples"] == 12
    assert aside["licence"]["allowlist_entry"] is None
    assert aside["quote"]["reason"] == "allowlist" and aside["quote"]["allowlist_entry"] == 0
    assert aside["quote"]["training_samples"] == 2
    manifest = json.loads((kinds["report"] / "manifest.json").read_text())
    assert manifest["format_version"] == 4
    assert manifest["allowlist"] == [{"text": QUOTE + ", a new nation",
                                      "reason": "Gettysburg address, public domain"}]
    assert manifest["counts"]["items_set_aside"] == 2
    assert "2 items set aside" in kinds["stdout"]
    code, out, err = run_cli("report", "verify", kinds["report"])
    assert code == 0 and "the same pairs re-derived" in out, err


def test_the_allowlist_setting_gives_the_same_report(kinds):
    cfg = kinds["tmp"] / "cfg.json"
    cfg.write_text(json.dumps({"contamination_allowlist": str(kinds["allow"])}))
    again = kinds["tmp"] / "again"
    code, _, err = run_cli("--quiet", "--config", cfg, "contamination", "--evals",
                           kinds["evals"], "--inputs", kinds["pool"], "--output", again,
                           "--workers", 2)
    assert code == 0, err
    mine = tree_bytes(again)
    theirs = tree_bytes(kinds["report"])
    assert mine.keys() == theirs.keys()
    assert all(mine[k] == theirs[k] for k in mine if k not in ("manifest.json",
                                                               "checksums.sha256"))
    # without the allowlist, the quote is contamination
    plain = kinds["tmp"] / "plain"
    code, _, err = run_cli("--quiet", "contamination", "--evals", kinds["evals"], "--inputs",
                           kinds["pool"], "--output", plain, "--workers", 1)
    assert code == 0, err
    assert {k for k in _pairs(plain) if k[0] == "quote"} == {("quote", "d17"), ("quote", "d18")}


@pytest.mark.parametrize("content, fragment", [
    (b'{"text": "x"}\n', "allowlist.bad:1: reason"),
    (b'{"text": "x", "reason": "r", "url": "u"}\n', "allowlist.bad:1: url"),
    (b'{"text": "x", "reason": "r"}\n\n', "allowlist.bad:2: empty line"),
    (b"oops\n", "allowlist.bad:1: not valid JSON"),
    (b"", "no entries"),
])
def test_a_bad_allowlist_is_one_line_and_writes_nothing(kinds, content, fragment):
    bad = kinds["tmp"] / "allowlist.bad"
    bad.write_bytes(content)
    out = kinds["tmp"] / "never"
    refused(["contamination", "--evals", kinds["evals"], "--inputs", kinds["pool"],
             "--output", out, "--allowlist", bad], fragment)
    assert not out.exists()


def test_words_and_runs():
    table = exact.word_table()
    assert table[ord("a")] and table[ord("7")] and table[ord("é")]
    assert not table[ord("-")] and not table[ord(" ")] and not table[ord("_")]
    allow = Allowlist([AllowEntry(text="The MIT License, Copyright (c)", reason="licence")])
    assert allow.entry_of("the mit license") == 0
    assert allow.entry_of("mit licenses") is None  # whole words only
    matches = [Matched(0, (0, k), "the mit license") for k in range(3)] + \
        [Matched(1, (0, k), "a leaked question") for k in range(3)] + \
        [Matched(2, (0, 0), "another leaked question")]
    kept, aside = set_aside(matches, allow, 3)
    assert kept == [6]
    assert [(a.item, a.reason, a.samples, a.entry) for a in aside] == [
        (0, "allowlist", 3, 0), (1, "common", 3, None)]
    # an instance of a template common in the pool: its partial matches are set aside, its
    # whole copy is still a leak
    template = [Matched(0, (0, 0), "gzip 1 3 2 unstable urgency low", True)] + \
        [Matched(0, (0, k), "gzip 1 3 2 unstable urgency low", False) for k in range(1, 4)]
    kept, aside = set_aside(template, allow, 3)
    assert kept == [0] and [(a.reason, a.samples, a.first) for a in aside] == [("common", 4, 1)]


V1 = Path(__file__).parent / "data" / "contamination-v1"


def test_a_format_1_report_still_verifies(tmp_path, kinds):
    code, out, err = run_cli("report", "verify", V1)
    assert code == 0 and "OK" in out and "format 1" in out, err
    refused(["report", "verify", V1, "--inputs", kinds["evals"], kinds["pool"]],
            "format 1 report", "run contamination again")
    forged = tmp_path / "forged"
    shutil.copytree(V1, forged)
    rows = _rows(forged, "contamination.jsonl")
    rows[0]["common_shingles"] -= 1
    (forged / "contamination.jsonl").write_bytes(b"".join(
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE) for r in rows))
    (forged / "checksums.sha256").unlink()
    write_checksums(forged)
    refused(["report", "verify", forged], "contamination.jsonl:1", "containment")
    (forged / "set_aside.jsonl").write_bytes(b"")
    (forged / "checksums.sha256").unlink()
    write_checksums(forged)
    refused(["report", "verify", forged], "set_aside.jsonl", "no file")


def test_report_explain_shows_every_flag_with_its_spans_and_method(kinds):
    code, out, err = run_cli("report", "explain", kinds["report"], "quiz", "short")
    assert code == 0, err
    assert "eval item quiz/short" in out and "1 pair(s) of contamination" in out
    assert "method: exact" in out and "7 of 7 words" in out
    assert "item     [0, 35): 'what is the capital of burkina faso'" in out
    assert "'what is the capital of burkina-faso'" in out
    code, out, err = run_cli("report", "explain", kinds["report"], "quiz", "licence")
    assert code == 0 and "set aside" in out and "common in the pool, in 12 training" in out, err
    code, out, err = run_cli("report", "explain", kinds["report"], "pool", "d3", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["role"] == "training" and [p["eval"]["sample_id"] for p in got["pairs"]] == \
        ["code"]
    refused(["report", "explain", kinds["report"], "nope", "x"], "no eval or input package")


def test_report_diff_lists_newly_contaminated_and_cleared_items_per_benchmark(kinds):
    plain = kinds["tmp"] / "plain-diff"
    code, _, err = run_cli("--quiet", "contamination", "--evals", kinds["evals"], "--inputs",
                           kinds["pool"], "--output", plain, "--workers", 1)
    assert code == 0, err
    code, out, err = run_cli("report", "diff", kinds["report"], plain, "--json")
    assert code == 0, err
    (bench,) = json.loads(out)["benchmarks"]
    assert bench["package_id"] == "quiz"
    assert bench["newly_contaminated"] == ["quote"] and bench["cleared"] == []
    code, out, err = run_cli("report", "diff", plain, kinds["report"])
    assert code == 0 and "1 cleared" in out and "  - quote" in out, err


V2 = Path(__file__).parent / "data" / "contamination-v2"


def test_a_format_2_report_still_verifies(tmp_path, kinds):
    """Format 2 (made before short items were judged by the words with a letter, their
    numbers kept): its files verify, with an exact pair whose number differs; its pairs are
    not re-derived."""
    code, out, err = run_cli("report", "verify", V2)
    assert code == 0 and "OK" in out and "format 2" in out, err
    rows = _rows(V2, "contamination.jsonl")
    assert rows[0]["method"] == "exact" and rows[0]["numbers_differ"]
    refused(["report", "verify", V2, "--inputs", kinds["evals"], kinds["pool"]],
            "format 2 report", "run contamination again")


@pytest.mark.parametrize("sample, change, fragment", [
    ("two-words", lambda r: r.update(common_shingles=10, containment=10 / 11),
     "item_shingles − common_shingles words"),
    ("one-word", lambda r: r.update(item_text=r["item_text"].replace("largest", "1234567")),
     "every number of its item"),
    ("one-word", lambda r: r.update(item_text=r["item_text"].replace("largest", "larg3st")),
     "every identifier of its item"),
    ("one-word", lambda r: r.update(training_text=r["training_text"].replace(" ", "x")),
     "each hold item_shingles words"),
])
def test_an_exact_match_is_checked_word_by_word(kinds, tmp_path, sample, change, fragment):
    forged = tmp_path / "forged"
    shutil.copytree(kinds["report"], forged)
    rows = _rows(forged, "contamination.jsonl")
    at = next(n for n, r in enumerate(rows) if r["eval"]["sample_id"] == sample)
    change(rows[at])
    (forged / "contamination.jsonl").write_bytes(b"".join(
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE) for r in rows))
    (forged / "checksums.sha256").unlink()
    write_checksums(forged)
    refused(["report", "verify", forged], f"contamination.jsonl:{at + 1}", fragment)


def texts_with_copies(rng: random.Random, vocab: list[str], items: list[str], count: int,
                      filler: tuple[int, int], replaced: int) -> list[str]:
    """``count`` texts of random ``vocab`` words (``filler``: how many, at least and at
    most), each holding a copy of one of ``items`` with up to ``replaced`` words replaced."""
    texts = []
    for _ in range(count):
        words = [rng.choice(vocab) for _ in range(rng.randint(*filler))]
        copy = rng.choice(items).split()
        for _ in range(rng.randint(0, replaced)):
            copy[rng.randrange(len(copy))] = rng.choice(vocab)
        at = rng.randint(0, len(words))
        texts.append(" ".join(words[:at] + copy + words[at:]))
    return texts


def test_the_word_run_kernel_agrees_with_a_plain_search():
    """`exact.exact_batch` against a word-by-word search of every place, on random items of
    3–16 words (some of them numbers, some of letters and digits) and texts holding copies
    with words replaced."""
    rng = random.Random(5)
    vocab = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "12", "7", "2024",
             "task1", "x86"]
    items = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 16))) for _ in range(60)]
    texts = texts_with_copies(rng, vocab, items, 120, (0, 30), 3)
    refs = [EvalItem(SampleRef(0, k, "", "", "", "", 0, None), t) for k, t in enumerate(items)]
    st = probe._exact_state(refs, np.ones(len(items), dtype=bool), 0.8)
    cps, offsets = code_points(texts)
    got = sorted(exact.exact_batch(cps, offsets, st["words"], st["max_words"],
                                   st["has_length"], st["run_table"], st["run_vals"],
                                   st["run_postings"], st["word_flat"], st["word_fixed"],
                                   st["word_start"], st["tolerance"], st["run_bits"],
                                   st["prefix_bits"]))
    want = []
    for i, text in enumerate(texts):
        spans = [(m.start(), m.end(), m.group()) for m in re.finditer(r"[^\W_]+", text)]
        for it, item in enumerate(items):
            words = item.split()
            if all(w.isdigit() for w in words):
                continue  # numbers alone are no item
            k = probe.tolerance_of(sum(not w.isdigit() for w in words), 0.8)
            places = []
            for at in range(len(spans) - len(words) + 1):
                differ = [a for a, (_, _, b) in zip(words, spans[at:at + len(words)],
                                                    strict=True) if a != b]
                if len(differ) <= k and not any(c.isdigit() for a in differ for c in a):
                    places.append((len(differ), at))
            if places:
                bad, at = min(places) if min(places)[0] == 0 else \
                    min(places, key=lambda p: p[1])
                want.append((i, it, spans[at][0], spans[at + len(words) - 1][1],
                             len(words) - bad))
    assert [tuple(int(x) for x in g) for g in got] == sorted(want)
    assert any(w[4] < len(items[w[1]].split()) - 1 for w in want)  # two words or more differ


def test_the_prefixes_of_a_run_hash_as_the_run_grows():
    """`exact.prefix_hashes`: every prefix of each run, hashed as `exact_batch` chains it."""
    flat = np.asarray([11, 22, 33, 44, 55], dtype=np.uint64)
    starts, ends = np.asarray([0, 2, 4]), np.asarray([3, 5, 4])
    want = [exact.run_hashes(flat, np.asarray([s]), np.asarray([e]))[0]
            for s, e0 in zip(starts, ends, strict=True) for e in range(s + 1, e0 + 1)]
    assert exact.prefix_hashes(flat, starts, ends).tolist() == want
    assert len(want) == 6  # 3 + 3 + none of an empty run


def test_late_anchors_looked_up_give_the_candidates_of_all_anchors_posted(monkeypatch):
    """`kernels.probe_batch` with each item's last anchors looked up instead of posted finds
    the same candidates per text and the same pairs as with every anchor posted."""
    from near_dedup_core.config import NearDedupConfig
    from near_dedup_core.contamination.kernels import POSTED_HITS, probe_batch
    from near_dedup_core.signature import MinHasher

    rng = random.Random(3)
    vocab = ["the", "of", "and", "value", "returns", "file", "option", "sets", "when", "list",
             "table", "a", "is", "to", "config", "mode", "index", "new", "read", "write"]
    items = [" ".join(rng.choice(vocab) for _ in range(rng.randint(15, 40)))
             for _ in range(80)]
    texts = texts_with_copies(rng, vocab, items, 150, (5, 200), 4)
    refs = [EvalItem(SampleRef(0, k, "", "", "", "", 0, None), t) for k, t in enumerate(items)]
    config = NearDedupConfig()
    states = {}
    for name, posted in (("split", POSTED_HITS), ("all posted", 10**6)):
        monkeypatch.setattr(probe, "POSTED_HITS", posted)
        states[name] = probe.build_state(refs, config, texts[:20])
    assert states["split"][1] == states["all posted"][1]  # the same anchors
    assert len(states["all posted"][0].late_flat) == 0 < len(states["split"][0].late_flat)
    cps, offsets = code_points(texts)
    seed = MinHasher(1, config.seed, config.shingle_size).shingle_seed
    got = {}
    for name, (st, _) in states.items():
        per_text = np.zeros(len(texts), dtype=np.int64)
        pairs = probe_batch(cps, offsets, st.shingle_size, seed, st.bits, st.table, st.vals,
                            st.postings, st.need, st.posted_need, st.late_flat, st.late_start,
                            st.item_flat, st.item_start, st.item_chars, st.threshold, per_text)
        got[name] = (per_text.tolist(), sorted(tuple(int(x) for x in p) for p in pairs))
    assert got["split"] == got["all posted"]
    assert sum(got["split"][0]) > len(got["split"][1]) > 0  # candidates beyond the pairs


def test_the_kernels_check_of_a_pair_is_the_one_made_in_python(monkeypatch):
    """`kernels.probe_batch` widens a pair's span and counts its common shingles when the
    characters widening tests are ASCII: the hits and candidates of `probe._probe_points`
    are those of the check made in Python for every pair (``verify=False``), on items and
    texts with words glued to the copy (a span widened) and words past ASCII at its ends."""
    from near_dedup_core.config import NearDedupConfig
    from near_dedup_core.contamination.kernels import probe_batch
    from near_dedup_core.signature import MinHasher

    rng = random.Random(8)
    vocab = ["the", "of", "value", "returns", "file", "option", "sets", "when", "café",
             "naïve", "été", "mode", "index", "x86", "2024", "read", "über", "write"]
    items = [" ".join(rng.choice(vocab) for _ in range(rng.randint(4, 30))) for _ in range(60)]
    texts = []
    for _ in range(600):
        before = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30)))
        after = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30)))
        copy = rng.choice(items).split()
        for _ in range(rng.randint(0, 5)):
            copy[rng.randrange(len(copy))] = rng.choice(vocab)
        if rng.random() < 0.5:  # a third of the copy, scattered: verified, then dropped
            copy = [w if rng.random() < 0.4 else rng.choice(vocab) for w in copy]
        spaced = "".join(w + rng.choice([" ", " ", "  "]) for w in copy)  # longer than it
        texts.append(before + rng.choice([" ", "", "", "-"]) + spaced.strip()
                     + rng.choice([" ", "", "", "."]) + after)
    refs = [EvalItem(SampleRef(0, k, "", "", "", "", 0, None), t) for k, t in enumerate(items)]
    config = NearDedupConfig()
    st, _ = probe.build_state(refs, config, texts[:20])
    monkeypatch.setattr(probe, "_STATE", st)
    cps, offsets = code_points(texts)
    kernel = probe._probe_points(cps, offsets)
    python = probe._probe_points(cps, offsets, verify=False)
    assert [c.tolist() for c in kernel[0][:-1]] + [kernel[0].text] == \
        [c.tolist() for c in python[0][:-1]] + [python[0].text]
    assert kernel[1].tolist() == python[1].tolist()
    assert len(set(kernel[0].sample[~kernel[0].exact].tolist())) > 20
    seed = MinHasher(1, config.seed, config.shingle_size).shingle_seed
    rows = probe_batch(cps, offsets, st.shingle_size, seed, st.bits, st.table, st.vals,
                       st.postings, st.need, st.posted_need, st.late_flat, st.late_start,
                       st.item_flat, st.item_start, st.item_chars, st.threshold,
                       np.zeros(len(texts), dtype=np.int64))
    checked = [r for r in rows if r[8] != -1]
    assert 0 < len(checked) < len(rows)  # some left to Python: a boundary past ASCII
    assert any(r[6] < r[3] or r[7] > r[4] for r in checked)  # some spans widened
    assert len(rows) < sum(kernel[1])  # candidates the kernel dropped


def _ring_packages(tmp_path: Path) -> tuple[Path, Path]:
    """Five eval items and a pool of three documents, each holding one of them: the bench
    tests' packages (evals, pool)."""
    items = [{"id": f"q{k}", "text": f"which planet of the system has the ring number {k}"}
             for k in range(5)]
    docs = [{"id": f"d{k}", "text": f"page {k}: which planet of the system has the ring "
             f"number {k} is asked often"} for k in range(3)]
    return (make_package(tmp_path, "evals", {"test": items}, tokenizer="any@1"),
            make_package(tmp_path, "pool", {"train": docs}))


@pytest.mark.slow  # five `contamination` processes and an `index` and two `scan`s
def test_the_contamination_ab_bench_compares_two_checkouts_on_the_same_report(tmp_path):
    """`bench.contamination_ab` (docs/measurements/2026-12-06-contamination-4.md): the same
    checkout as before and now gives one report, measured in turns; a folder without the
    package is refused in one line."""
    from bench import contamination_ab

    root = Path(__file__).resolve().parent.parent
    evals, pool = _ring_packages(tmp_path)
    out = tmp_path / "ab"
    contamination_ab.main(["--before", str(root), "--evals", str(evals), "--pool", str(pool),
                           "--rounds", "1", "--scan", "--out", str(out)])
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["reports_identical"] and len(result["runs"]["before"]) == 1
    assert all(r["cpu_s"] > 0 for side in ("before", "now") for r in result["runs"][side])
    assert len(result["scan"]) == 2 and result["cpu_now_over_scan"] > 0
    assert len(_rows(out / "now-0", "contamination.jsonl")) == 3
    # the pool's texts read from the index the scan built, no untimed run first: the same
    # report
    again = tmp_path / "ab-index"
    contamination_ab.main(["--before", str(root), "--evals", str(evals), "--pool", str(pool),
                           "--index", str(out / "index.sqlite"), "--no-warm", "--rounds", "1",
                           "--out", str(again)])
    assert not list(again.glob("warm-*"))
    assert "--index" in (again / "now-0.log").read_text()
    for name in contamination_ab.SAME:
        assert (again / "now-0" / name).read_bytes() == (out / "now-0" / name).read_bytes()
    with pytest.raises(SystemExit, match="holds no near_dedup_core"):
        contamination_ab.main(["--before", str(tmp_path), "--evals", str(evals), "--pool",
                               str(pool), "--out", str(out)])


@pytest.mark.slow  # an `index`, two `contamination --index` and two `scan` processes
def test_the_contamination_scan_bench_times_contamination_on_the_scans_index(tmp_path):
    """`bench.contamination_scan` (docs/measurements/2026-12-06-contamination-6.md):
    `contamination --index` and `scan` of one index in alternating rounds, the report the
    same bytes in each; a folder that is no package is refused in one line."""
    from bench import contamination_scan

    evals, pool = _ring_packages(tmp_path)
    out = tmp_path / "scan"
    contamination_scan.main(["--evals", str(evals), "--pool", str(pool), "--rounds", "2",
                             "--out", str(out)])
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["reports_identical"] and result["report"]["counts"]["pairs"] == 3
    assert len(result["contamination"]) == len(result["scan"]) == 2
    assert result["index"]["cpu_s"] > 0 and result["contamination_over_scan"]["cpu_s"] > 0
    assert len(_rows(out / "contamination-1", "contamination.jsonl")) == 3
    with pytest.raises(SystemExit, match="is no package"):
        contamination_scan.main(["--pool", str(tmp_path), "--out", str(out)])


def test_the_contamination_stages_bench_times_each_stage(tmp_path, capsys):
    """`bench.contamination_stages`: each stage of `compute` timed, the kernels within the
    probe, on the packages given."""
    from bench import contamination_stages

    items = [{"id": "q", "text": "which planet of the system has the largest ring"}]
    evals = make_package(tmp_path, "evals", {"test": items}, tokenizer="any@1")
    pool = make_package(tmp_path, "pool", {"train": [{"id": "d", "text": "so: which planet "
                                                      "of the system has the largest ring"}]})
    contamination_stages.main(["--evals", str(evals), "--pool", str(pool)])
    printed = capsys.readouterr().out
    for label in ("reading the items", "anchor and run tables", "probing the pool",
                  "word-run kernel", "item spans", "total (compute)"):
        assert f"{label}: " in printed
