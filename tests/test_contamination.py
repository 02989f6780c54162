"""Contamination reports: planted eval items in real text are found with their exact
containment, clean items are not, the report verifies and catches tampering, the mixture
drops exactly the contaminated pool samples, and bad input is refused without output.

English items are stdlib docstring paragraphs; Chinese items come from the sample of the
Chinese man pages shipped in tests/data/zh (`zh_sample`).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np
import orjson
import pytest
import zstandard
from helpers import make_package, run_cli, stdlib_paragraphs, tree_bytes
from zh_sample import zh_sample_text

from near_dedup_core import contamination
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.contamination import (
    EXTRA_HITS,
    containment,
    kernels,
    least_overlap,
    matched_span,
    prefix_plan,
    probe,
    verify_contamination,
)
from near_dedup_core.contamination import run as contamination_run
from near_dedup_core.contamination.probe import fixed_words, span_width, tolerance_of
from near_dedup_core.contamination.setaside import words_of
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import write_checksums
from near_dedup_core.guard import guard_for
from near_dedup_core.mixture import verify_mixture
from near_dedup_core.normalize import normalize
from near_dedup_core.package import open_packages
from near_dedup_core.signature import MinHasher

DEFAULTS = NearDedupConfig()
HASHER = MinHasher(1, DEFAULTS.seed, DEFAULTS.shingle_size)
GUARD = guard_for(DEFAULTS, frozenset())
_CJK = re.compile(r"[\u4e00-\u9fff]")
#: Chinese paragraphs the fixture uses: even ones are items, odd ones hosts
ZH_PARAGRAPHS = 100


@lru_cache(maxsize=1)
def chinese_paragraphs() -> tuple[str, ...]:
    """Distinct mostly-Chinese paragraphs (≥ 80 characters) of the shipped man page sample."""
    seen: dict[str, None] = {}
    for para in zh_sample_text().split("\n\n"):
        para = "".join(para.split("\n"))
        if len(para) >= 80 and len(_CJK.findall(para)) >= 0.6 * len(para):
            seen.setdefault(para)
    return tuple(seen)


def _segment(rng: random.Random, text: str, lo: int, hi: int) -> str:
    """A piece of ``text`` of lo..hi characters, cut at spaces where there are any."""
    length = min(rng.randint(lo, hi), len(text))
    start = rng.randint(0, len(text) - length)
    piece = text[start:start + length]
    trimmed = piece[piece.find(" ") + 1:piece.rfind(" ")].strip()
    return trimmed if len(trimmed) >= lo else piece.strip()


def _edit(rng: random.Random, item: str, n_chars: int) -> str:
    """Realistic re-publication edits: some words upper-cased, whitespace changed, ``n_chars``
    characters replaced by other letters."""
    chars = list(item)
    letters = [i for i, c in enumerate(chars) if c.isalpha()]
    for i in rng.sample(letters, min(n_chars, len(letters))):
        chars[i] = rng.choice("xqzjkvw") if chars[i].isascii() else rng.choice("的一是在不了有和")
    words = "".join(chars).split(" ")
    words = [w.upper() if rng.random() < 0.1 else w for w in words]
    return "".join(w + rng.choice([" ", " ", "  ", "\n"]) for w in words).strip()


def _plant(rng: random.Random, host: str, piece: str) -> str:
    cuts = [m.start() for m in re.finditer(r"[ 。]", host)] or [len(host)]
    at = rng.choice(cuts)
    return host[:at] + " " + piece + " " + host[at:]


def _shingles(text: str) -> np.ndarray:
    return HASHER.shingle_sets([normalize(text)])[0]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Eval packages (English cpt, Chinese sft), a pool with planted copies,
    and the exact containment of every item in every training document."""
    tmp = tmp_path_factory.mktemp("contam")
    rng = random.Random(14)
    paras = stdlib_paragraphs()
    en_items = [t for t in (_segment(rng, p, 50, 600) for p in paras[0::2])
                if len(normalize(t)) >= 50]
    hosts = [{"text": paras[i] + "\n\n" + paras[i + 2], "domain": "en"}
             for i in range(1, len(paras) - 2, 2)]
    evals = []
    en_records = [{"id": f"en-{i}", "text": t} for i, t in enumerate(en_items)]
    en_records.append({"id": "en-short", "text": "Yes, it is."})
    evals.append(("cpt", "eval-en", en_records, [normalize(t) for t in en_items]))
    zh = chinese_paragraphs()
    assert len(zh) >= ZH_PARAGRAPHS, "tests/data/zh/manpages-zh.txt is shorter than expected"
    zh_items = [t for t in (_segment(rng, p, 50, 300) for p in zh[0:ZH_PARAGRAPHS:2])
                if len(normalize(t)) >= 50]
    hosts += [{"text": zh[i] + "\n" + zh[i + 2], "domain": "zh"}
              for i in range(1, ZH_PARAGRAPHS - 2, 4)]
    zh_records = []
    for i, t in enumerate(zh_items):
        half = len(t) // 2
        zh_records.append({"id": f"zh-{i}", "task": "qa", "messages": [
            {"role": "user", "content": t[:half]}, {"role": "assistant", "content": t[half:]}]})
    evals.append(("sft", "eval-zh", zh_records,
                  [normalize(t[:len(t) // 2] + "\n" + t[len(t) // 2:]) for t in zh_items]))
    planted_ids = set()
    all_items = [(pid, f"{pid.split('-')[1]}-{i}", text)
                 for _kind, pid, _recs, norms in evals for i, text in enumerate(norms)]
    for n, (_pid, sid, text) in enumerate(all_items):
        if n % 5 == 4:
            continue  # held out: never planted
        host = hosts[rng.randrange(len(hosts))]
        shingles = _shingles(text)
        for edits in (rng.randint(0, max(1, len(text) // 40)), 1, 0):
            piece = _edit(rng, text, edits)
            if containment(shingles, _shingles(piece)) >= 0.8:
                break
        host["text"] = _plant(rng, host["text"], piece)
        planted_ids.add(sid)
    train = [{"id": f"doc-{i}", **h} for i, h in enumerate(hosts) if i % 7]
    validation = [{"id": f"doc-{i}", **h} for i, h in enumerate(hosts) if not i % 7]
    pool = make_package(tmp, "pool", {"train": train, "validation": validation})
    eval_paths = [make_package(tmp, pid, {"test": recs}, kind=kind)
                  for kind, pid, recs, _ in evals]
    docs = train + validation
    doc_sets = HASHER.shingle_sets([normalize(d["text"]) for d in docs])
    item_sets = HASHER.shingle_sets([t for _, _, t in all_items])
    truth = {}
    in_span = {}  # the item's shingles within the densest item-width run of the document
    for (pid, sid, text), s in zip(all_items, item_sets, strict=True):
        for d, ds in zip(docs, doc_sets, strict=True):
            c = containment(s, ds)
            if c >= 0.5:
                truth[(pid, sid, d["id"])] = c
                norm = normalize(d["text"])
                start, end = matched_span(norm, s, span_width(len(text), DEFAULTS), HASHER)
                in_span[(pid, sid, d["id"])] = containment(
                    s, HASHER.shingle_sets([norm[start:end]])[0])
    out = tmp / "report"
    code, stdout, err = run_cli("--quiet", "contamination", "--evals", *eval_paths,
                                "--inputs", pool, "--output", out, "--workers", 1)
    assert code == 0, err
    return {"tmp": tmp, "pool": pool, "evals": eval_paths, "report": out, "truth": truth,
            "in_span": in_span,
            "items": all_items, "planted": planted_ids, "docs": {d["id"]: d for d in docs},
            "validation": {d["id"] for d in validation}, "stdout": stdout}


def _lines(report: Path) -> list[dict]:
    return [orjson.loads(line) for line in (report / "contamination.jsonl").read_bytes().splitlines()]


def test_planted_items_found_with_exact_containment(planted):
    lines = _lines(planted["report"])
    reported = {(r["eval"]["package_id"], r["eval"]["sample_id"], r["training"]["sample_id"]): r
                for r in lines}
    truth = planted["truth"]
    leaked = {k: c for k, c in planted["in_span"].items() if c >= 0.8}
    assert len(leaked) >= 0.7 * len(planted["planted"])
    assert min(leaked.values()) < 0.9  # the edits reach down towards the threshold
    found = sum(1 for k in leaked if k in reported)
    assert found / len(leaked) >= 0.99, (found, len(leaked))
    items = {(pid, sid): text for pid, sid, text in planted["items"]}
    for key, row in reported.items():
        if row["method"] == "exact":  # an item of at most 16 words: by its words
            item, span = words_of(items[key[:2]]).split(), words_of(row["training_text"]).split()
            assert len(item) <= 16 and len(span) == len(item)
            differ = [a for a, b in zip(item, span, strict=True) if a != b]
            letters = sum(not w.isdigit() for w in item)
            assert len(differ) == row["item_shingles"] - row["common_shingles"] <= \
                tolerance_of(letters, 0.8) and not any(w.isdigit() for w in differ)
            continue
        assert key in leaked, key  # verified pairs only: nothing below the threshold
        assert row["containment"] == leaked[key]
        assert row["containment"] == row["common_shingles"] / row["item_shingles"]
    # a document holding most of an item's shingles, but not as one nearly contiguous copy,
    # does not contain it
    scattered = [k for k, c in truth.items() if c >= 0.8 and k not in leaked]
    assert scattered and not any(k in reported for k in scattered)


def test_chinese_sft_items_found_in_a_cpt_pool(planted):
    reported = {(r["eval"]["package_id"], r["eval"]["sample_id"], r["training"]["sample_id"])
                for r in _lines(planted["report"])}
    zh = [k for k, c in planted["truth"].items() if k[0] == "eval-zh" and c >= 0.8]
    # a short item (16 words or fewer: a clause without spaces is one word) is not found
    # where an identifier of it ("4kb") has a character changed, as with a changed number
    items = {(pid, sid): text for pid, sid, text in planted["items"]}
    changed = {k for k in zh if len(words_of(items[k[:2]]).split()) <= 16 and
               Counter(fixed_words(items[k[:2]])) -
               Counter(fixed_words(normalize(planted["docs"][k[2]]["text"])))}
    assert changed and not changed & reported
    assert len(zh) >= 20 and all(k in reported for k in zh if k not in changed)


def test_clean_items_are_never_reported(planted):
    lines = _lines(planted["report"])
    reported_items = {r["eval"]["sample_id"] for r in lines}
    held_out = [sid for _pid, sid, _ in planted["items"] if sid not in planted["planted"]]
    clean = [sid for sid in held_out
             if all(c < 0.5 for (_p, s, _d), c in planted["truth"].items() if s == sid)]
    assert len(clean) >= 0.8 * len(held_out) and len(clean) >= 20
    assert not reported_items & set(clean)


def test_span_numbers_and_summary(planted):
    lines = _lines(planted["report"])
    docs = planted["docs"]
    items = {sid: text for _pid, sid, text in planted["items"]}
    for r in lines:
        text = normalize(docs[r["training"]["sample_id"]]["text"])
        span = text[r["span"]["start"]:r["span"]["end"]]
        item = items[r["eval"]["sample_id"]]
        assert len(span) <= 1.5 * len(item) + 20
        assert r["training_text"] == span
        if r["method"] == "exact":
            continue
        assert (r["span"]["start"], r["span"]["end"]) == matched_span(
            text, _shingles(item), span_width(len(item), DEFAULTS), HASHER)
        assert r["training_text"] == span
        assert r["numbers_differ"] == (GUARD.sequences(item)[0] != GUARD.sequences(span)[0])
        assert containment(_shingles(item), _shingles(span)) >= 0.5 * r["containment"]
        assert r["training"]["domain"] == docs[r["training"]["sample_id"]]["domain"]
    summary = json.loads((planted["report"] / "summary.json").read_text())
    en = summary["evals"][0]
    assert en["package_id"] == "eval-en" and en["items_skipped_short"] == 0
    assert en["items_leaked"] == len({r["eval"]["sample_id"] for r in lines
                                      if r["eval"]["package_id"] == "eval-en"})
    splits = {(g["domain"], g["split"]) for g in en["by_training"]}
    assert ("en", "train") in splits
    assert "into" in planted["stdout"]


def test_report_verifies_and_is_deterministic_across_workers(planted, monkeypatch):
    code, out, err = run_cli("report", "verify", planted["report"])
    assert code == 0 and "OK" in out, err
    monkeypatch.setattr(contamination_run, "BLOCK_LINES", 16)  # several blocks in flight
    again = planted["tmp"] / "again"
    code, _, err = run_cli("--quiet", "contamination", "--evals", *planted["evals"],
                           "--inputs", planted["pool"], "--output", again, "--workers", 2)
    assert code == 0, err
    assert tree_bytes(again) == tree_bytes(planted["report"])


def test_the_report_is_built_with_rare_collections_and_the_thresholds_come_back(
        planted, monkeypatch):
    """The pool's hits and pairs are bulk work: the main process probes with the collector
    threshold of `near_dedup_core.collector`, and the caller's thresholds are back after."""
    import gc

    from near_dedup_core import collector

    seen = []
    probe_pool = contamination_run.probe_pool

    def spy(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return probe_pool(*args, **kwargs)

    monkeypatch.setattr(contamination_run, "probe_pool", spy)
    before = gc.get_threshold()
    code, _, err = run_cli("--quiet", "contamination", "--evals", *planted["evals"],
                           "--inputs", planted["pool"], "--output", planted["tmp"] / "gc",
                           "--workers", 1)
    assert code == 0, err
    assert seen == [collector.YOUNG_THRESHOLD] and gc.get_threshold() == before
    assert tree_bytes(planted["tmp"] / "gc") == tree_bytes(planted["report"])


def test_an_indexed_pool_gives_the_same_report(planted, index_location, tmp_path,
                                                monkeypatch):
    """With --index the pool's normalized texts come from the index, on each backend: the
    same bytes, with 1 or 2 workers and contents split over several jobs; inputs not indexed,
    or changed since, are refused in one line and nothing is written."""
    from near_dedup_core.index_store import open_index

    index, label = index_location, open_index(index_location).label
    code, _, err = run_cli("--quiet", "--index", index, "index", "--inputs", planted["pool"])
    assert code == 0, err
    monkeypatch.setattr(contamination_run, "CONTENT_CHUNK", 7)
    for workers in (1, 2):
        out = tmp_path / f"from-index-{workers}"
        code, _, err = run_cli("--quiet", "--index", index, "contamination", "--evals",
                               *planted["evals"], "--inputs", planted["pool"], "--output", out,
                               "--workers", workers)
        assert code == 0, err
        assert tree_bytes(out) == tree_bytes(planted["report"])
    other = make_package(tmp_path, "other", {"train": [{"id": "a", "text": "x" * 80}]})
    code, err = _refused(tmp_path, "--evals", *planted["evals"], "--inputs", other,
                         index=index)
    assert code == 1 and f"package other: not in index {label}; index it first" in err
    changed = tmp_path / "changed"
    shutil.copytree(planted["pool"], changed)
    shard = sorted((changed / "data").rglob("*.jsonl"))[0]
    shard.write_bytes(shard.read_bytes().replace(b"a", b"b", 1))
    code, err = _refused(tmp_path, "--evals", *planted["evals"], "--inputs", changed,
                         "--workers", "2", index=index)
    assert code == 1 and "sha256 does not match manifest.json" in err


def test_an_indexed_text_that_is_not_utf8_is_damage_in_one_line(planted, tmp_path):
    index = tmp_path / "index.sqlite"
    code, _, err = run_cli("--quiet", "--index", index, "index", "--inputs", planted["pool"])
    assert code == 0, err
    with sqlite3.connect(index) as con:  # a stored text that is not UTF-8: damage, one line
        con.execute("UPDATE contents SET text_z = ?, dictionary = NULL WHERE id = 3",
                    (zstandard.ZstdCompressor().compress(b"ok \xff\xfe not utf-8"),))
    con.close()
    for workers in ("1", "2"):
        code, err = _refused(tmp_path, "--evals", *planted["evals"], "--inputs",
                             planted["pool"], "--workers", workers, index=index)
        assert code == 1 and f"index {index}: damaged (the text of content row 3" in err


def _tamper(planted, name: str, change) -> Path:
    copy = planted["tmp"] / f"tamper-{name}-{random.random()}"
    shutil.copytree(planted["report"], copy)
    change(copy)
    return copy


def _resum(folder: Path) -> None:
    (folder / "checksums.sha256").unlink()
    write_checksums(folder)


def _edit_first_line(**values) -> object:
    """Set fields of the first line (a callable value gets the line) and fix the checksums."""
    def change(folder: Path) -> None:
        path = folder / "contamination.jsonl"
        rows = path.read_bytes().splitlines(keepends=True)
        row = orjson.loads(rows[0])
        for key, value in values.items():
            row[key] = value(row) if callable(value) else value
        rows[0] = orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n"
        path.write_bytes(b"".join(rows))
        _resum(folder)
    return change


@pytest.mark.parametrize("name,change,fragment", [
    ("bytes", lambda f: (f / "summary.json").write_text("{}"), "does not match its sha256"),
    ("containment", _edit_first_line(containment=0.99), "is not common_shingles"),
    ("below", _edit_first_line(common_shingles=1, containment=lambda r: 1 / r["item_shingles"]),
     "below the threshold"),
    ("span", _edit_first_line(span={"start": 5, "end": 5}), "span must"),
    ("package", _edit_first_line(training=lambda r: {**r["training"], "package_id": "zz"}),
     "not among the manifest's inputs"),
    ("dropped-line", lambda f: ((f / "contamination.jsonl").write_bytes(
        b"".join((f / "contamination.jsonl").read_bytes().splitlines(keepends=True)[1:])),
        _resum(f)), "lines, manifest.json says"),
])
def test_tampering_is_caught(planted, name, change, fragment):
    copy = _tamper(planted, name, change)
    with pytest.raises(NearDedupError, match=fragment):
        verify_contamination(copy)
    code, _, err = run_cli("report", "verify", copy)
    assert code == 1 and err.count("\n") == 1 and fragment.split()[0] in err


def test_prefix_filter_keeps_every_pair_at_the_threshold():
    assert [least_overlap(n, 0.8) for n in (1, 5, 10, 11, 46)] == [1, 4, 8, 9, 37]
    assert prefix_plan(300, 0.8) == (300 - 240 + EXTRA_HITS, EXTRA_HITS)
    assert prefix_plan(50, 0.8) == (26, 16)
    assert prefix_plan(15, 0.8) == (15, 12)  # a short item: every shingle, exact count
    # the worst sample at the threshold lacks n − c shingles, all of them anchors: it still
    # holds `need` anchors
    for n in range(1, 600):
        for t in (0.3, 0.5, 0.8, 0.9, 0.95, 1.0):
            p, need = prefix_plan(n, t)
            missing = n - least_overlap(n, t)
            assert (n - missing) / n >= t
            assert p - min(missing, p) >= need
            assert (n - missing - 1) / n < t or missing == n - 1  # c is the least overlap


def test_matched_windows_and_their_densest_run():
    # the kernel's bitmap of matched windows read back in order, and the densest run against
    # its definition, counted directly
    rng = random.Random(7)
    for _ in range(400):
        m = rng.choice([1, 63, 64, 65, 200, 1_000])
        width = rng.randint(1, 150)
        matched = sorted(rng.sample(range(m), rng.randint(0, min(m, rng.choice([3, 40, 300])))))
        marks = np.zeros(m // 64 + 1, dtype=np.uint64)
        for j in matched:
            marks[j >> 6] |= np.uint64(1 << (j & 63))
        expected = (0, 0)
        best = 0
        for a in matched:
            run = [b for b in matched if a <= b < a + width]
            if len(run) > best:
                best, expected = len(run), (a, run[-1] + 5)
        lo, hi = (matched[0], matched[-1]) if matched else (0, -1)
        pos = np.full(m, -1, dtype=np.int64)
        assert kernels._marked_positions(marks, lo, hi, pos) == len(matched)
        assert pos[:len(matched)].tolist() == matched and not marks.any()
        assert kernels._densest_run(pos, len(matched), width, 5) == expected


def test_anchors_are_the_item_shingles_rarest_in_the_training_sample():
    # the order sets only the cost, never the pairs; it follows the pool's own text: the
    # shingles of the item's first half, which every sampled training text holds, are no
    # anchors while rarer ones are left
    text = normalize(stdlib_paragraphs()[3])
    first = text[:len(text) // 2]
    ref = contamination.SampleRef(0, 0, "e", "i", "test", "f", 1, None)
    items = [contamination.EvalItem(ref, text)]
    shingles = set(_shingles(text).tolist())
    common = set(_shingles(first).tolist())
    state, n_anchors = contamination.build_state(items, DEFAULTS, [first + " x"] * 3)
    anchors = set(state.table[state.vals >= 0].tolist())
    p, _need = prefix_plan(len(shingles), DEFAULTS.contamination_threshold)
    assert n_anchors == p < len(shingles - common) and anchors <= shingles - common
    plain, _ = contamination.build_state(items, DEFAULTS)
    assert set(plain.table[plain.vals >= 0].tolist()) & common


@pytest.mark.parametrize("gz", [False, True])
def test_training_sample_takes_the_head_of_every_data_file(tmp_path, monkeypatch, gz):
    # a pool whose files differ (one per source) is sampled from each, an even share apiece;
    # a ref, a text over max_chars and a line that is no record are passed over, and the
    # pass over the pool, not the sample, reports the bad line
    def rec(i: int) -> dict:
        return {"id": f"s{i}", "text": f"text {i}"}

    base = make_package(tmp_path, "base", {"train": [rec(100)]})
    train = [rec(i) for i in range(8)]
    train[0]["text"] = "over max_chars " * 3
    train[4] = {"id": "r4", "ref": {"package_id": "base", "id": "s100"}}
    validation = [rec(10), b"{not json", rec(11)]
    pool = make_package(tmp_path, "pool", {"train": train, "validation": validation},
                        depends_on=["base"], shard_records=4, gz=gz)
    packages = open_packages([pool, base])
    monkeypatch.setattr(probe, "SAMPLE_RECORDS", 8)  # 4 files: 2 records each
    config = NearDedupConfig(max_chars=40)
    assert contamination.training_sample(packages, config) == [
        "text 100", "text 1", "text 5", "text 6", "text 10"]
    monkeypatch.setattr(probe, "SAMPLE_CHARS", 4 * 11)  # 11 characters a file
    assert contamination.training_sample(packages, config) == [
        "text 100", "text 1", "text 5", "text 10"]
    evals = make_package(tmp_path, "evals", {"test": [{"id": "e", "text": "an item " * 9}]})
    with pytest.raises(NearDedupError, match=r"validation/part-00000\.jsonl(\.gz)?:2: line is not"):
        contamination.contamination_report(DEFAULTS, [evals], [pool, base], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_fingerprint_ignores_contamination_keys():
    # the default config's fingerprint under nd-3, as before the contamination keys existed
    assert DEFAULTS.fingerprint() == \
        "a9c3ad54f2c345b660f63ffc17b8ed202e5049042dc369c065b218d79e489784"
    other = NearDedupConfig(contamination_threshold=0.6, contamination_min_chars=10)
    assert other.fingerprint() == DEFAULTS.fingerprint()
    assert NearDedupConfig(threshold=0.85).fingerprint() != DEFAULTS.fingerprint()


def _mixture_cfg(tmp: Path, planted, **extra) -> Path:
    cfg = {"name": "mix", "kind": "cpt", "inputs": [str(planted["pool"])],
           "target_records": 10_000, "allow_shortfall": True,
           "strategy": {"type": "temperature", "temperature": 1.0}, **extra}
    path = tmp / f"mix-{len(extra)}-{random.random()}.json"
    path.write_text(json.dumps(cfg))
    return path


def test_mixture_drops_exactly_the_contaminated_pool_samples(planted, tmp_path):
    cfg = _mixture_cfg(tmp_path, planted, contamination_report=str(planted["report"]))
    code, out, err = run_cli("--quiet", "mixture", "plan", cfg)
    assert code == 0, err
    assert "contaminated" in out and "pool samples removed" in out
    mix = tmp_path / "mix"
    code, out, err = run_cli("--quiet", "mixture", "build", cfg, "--output", mix)
    assert code == 0, err
    contaminated = {r["training"]["sample_id"] for r in _lines(planted["report"])}
    train_ids = {d for d in planted["docs"] if d not in planted["validation"]}
    selected = {orjson.loads(x)["origin"]["sample_id"]
                for x in (mix / "data/train/part-00000.jsonl").read_bytes().splitlines()}
    assert selected == train_ids - contaminated
    kept_validation = {orjson.loads(x)["origin"]["sample_id"] for x in
                       (mix / "data/validation/part-00000.jsonl").read_bytes().splitlines()}
    assert kept_validation == planted["validation"]  # retained split untouched
    assert contaminated & planted["validation"]  # ... even where contaminated
    plan = json.loads((mix / "plan.json").read_text())
    removed = sum(r["removed_contaminated"] for r in plan["domains"])
    assert removed == len(contaminated & train_ids) > 0
    assert tree_bytes(mix / "contamination") == tree_bytes(planted["report"])
    assert "embedded contamination report verified" in verify_mixture(mix).summary()

    # a plain mixture with a contamination report grafted in fails verification: its plan
    # removed nothing, and it selected contaminated samples
    plain = tmp_path / "plain"
    code, _, err = run_cli("--quiet", "mixture", "build", _mixture_cfg(tmp_path, planted),
                           "--output", plain)
    assert code == 0, err
    shutil.copytree(planted["report"], plain / "contamination")
    manifest = json.loads((plain / "manifest.json").read_text())
    manifest["contamination_report"] = {
        "path": "contamination",
        "manifest_sha256": json.loads(json.dumps(
            __import__("hashlib").sha256((planted["report"] / "manifest.json").read_bytes())
            .hexdigest()))}
    (plain / "manifest.json").write_text(json.dumps(manifest, indent=2))
    _resum(plain)
    with pytest.raises(NearDedupError, match="plan.json contamination_report differs"):
        verify_mixture(plain)
    plan_path = plain / "plan.json"
    plan_json = json.loads(plan_path.read_text())
    plan_json["contamination_report"] = {**manifest["contamination_report"],
                                         "removed_pool_samples": 0}
    plan_path.write_text(json.dumps(plan_json, indent=2))
    _resum(plain)
    with pytest.raises(NearDedupError, match="contains an eval item"):
        verify_mixture(plain)


def test_mixture_refuses_a_stale_contamination_report(planted, tmp_path):
    other = make_package(tmp_path, "pool", {"train": [{"id": "x", "text": "other " * 30,
                                                       "domain": "en"}]})
    cfg = tmp_path / "stale.json"
    cfg.write_text(json.dumps({"name": "m", "kind": "cpt", "inputs": [str(other)],
                               "target_records": 1, "contamination_report": str(planted["report"]),
                               "strategy": {"type": "temperature", "temperature": 1.0}}))
    code, _, err = run_cli("--quiet", "mixture", "build", cfg, "--output", tmp_path / "m")
    assert code == 1 and "manifest sha256" in err and not (tmp_path / "m").exists()


def _refused(tmp_path, *args, config: dict | None = None,
             index: str | Path | None = None) -> tuple[int, str]:
    before = tree_bytes(tmp_path)
    argv: list = ["--quiet"] if index is None else ["--quiet", "--index", index]
    if config is not None:
        (tmp_path / "cfg.json").write_text(json.dumps(config))
        before = tree_bytes(tmp_path)
        argv += ["--config", tmp_path / "cfg.json"]
    code, _, err = run_cli(*argv, "contamination", *args, "--output", tmp_path / "out")
    assert err.startswith("near-dedup: error:") and err.count("\n") == 1, err
    assert tree_bytes(tmp_path) == before and not (tmp_path / "out").exists()
    return code, err


def test_cli_refusals(tmp_path):
    paras = stdlib_paragraphs()
    pool = make_package(tmp_path, "pool", {"train": [{"id": f"d{i}", "text": p}
                                                     for i, p in enumerate(paras[:5])]})
    ev = make_package(tmp_path, "ev", {"test": [{"id": "q", "text": paras[0][:100]}]})
    bad = make_package(tmp_path, "bad", {"test": [b'{"id": "q", "text": 5}']})
    code, err = _refused(tmp_path, "--evals", bad, "--inputs", pool)
    assert code == 1 and "package bad, data/test/part-00000.jsonl:1" in err
    code, err = _refused(tmp_path, "--evals", tmp_path / "nope", "--inputs", pool)
    assert code == 1 and "nope" in err
    code, err = _refused(tmp_path, "--evals", pool, "--inputs", pool)
    assert code == 1 and "both as an eval package and as an input" in err
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", pool,
                         config={"max_pool_records": 3})
    assert code == 2 and "max_pool_records" in err
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", pool, config={"max_chars": 200})
    assert code == 2 and "max_chars" in err
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", pool,
                         config={"contamination_treshold": 0.5})
    assert code == 1 and "contamination_treshold" in err
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", pool,
                         config={"contamination_threshold": 1.5})
    assert code == 1 and "contamination_threshold" in err
    (tmp_path / "out").mkdir()
    code, _, err = run_cli("--quiet", "contamination", "--evals", ev, "--inputs", pool,
                           "--output", tmp_path / "out")
    assert code == 1 and "already exists" in err


def test_a_ref_sample_takes_its_targets_pairs_and_pool_errors_are_located(tmp_path):
    paras = stdlib_paragraphs()
    item = paras[0][:200]
    base = make_package(tmp_path, "base", {"train": [
        {"id": "host", "text": paras[1] + " " + item + " " + paras[2], "domain": "web"},
        *({"id": f"d{i}", "text": p} for i, p in enumerate(paras[3:40]))]})
    day = make_package(tmp_path, "day", {"train": [
        {"id": "again", "ref": {"package_id": "base", "id": "host"}},
        {"id": "own", "ref": {"package_id": "base", "id": "host"}, "domain": "forum"},
        {"id": "clean", "text": paras[41]}]}, depends_on=["base"])
    ev = make_package(tmp_path, "ev", {"test": [{"id": "q", "text": item}]})
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        code, _, err = run_cli("--quiet", "contamination", "--evals", ev, "--inputs", day, base,
                               "--output", out, "--workers", workers)
        assert code == 0, err
        lines = [json.loads(line) for line in (out / "contamination.jsonl").read_text()
                 .splitlines()]
        got = [(r["training"]["package_id"], r["training"]["sample_id"],
                r["training"]["domain"], r["training"]["line"]) for r in lines]
        assert got == [("day", "again", "web", 1), ("day", "own", "forum", 2),
                       ("base", "host", "web", 1)]
        assert len({(r["containment"], r["common_shingles"], r["span"]["start"])
                    for r in lines}) == 1
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["candidates"]["verified"] == 3
    assert tree_bytes(tmp_path / "out1") == tree_bytes(tmp_path / "out2")
    index = tmp_path / "index.sqlite"  # refs resolved by the index: the same pairs
    assert run_cli("--quiet", "--index", index, "index", "--inputs", base, day)[0] == 0
    code, _, err = run_cli("--quiet", "--index", index, "contamination", "--evals", ev,
                           "--inputs", day, base, "--output", tmp_path / "indexed")
    assert code == 0, err
    assert tree_bytes(tmp_path / "indexed") == tree_bytes(tmp_path / "out1")
    # errors in the pool: the first one in record order, located, nothing written
    dup = make_package(tmp_path, "dup", {"train": [{"id": "a", "text": paras[1]}] * 2
                                         + [b'{"id": "b", "text": 5}']})
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", dup, "--workers", "2")
    assert code == 1 and "package dup, data/train/part-00000.jsonl:2: duplicate id 'a'" in err
    bad = make_package(tmp_path, "bad", {"train": [{"id": "a", "text": paras[1]},
                                                   b'{"id": "b", "text": 5}']})
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", bad, "--workers", "2")
    assert code == 1 and "package bad, data/train/part-00000.jsonl:2" in err
    long = make_package(tmp_path, "long", {"train": [{"id": "a", "text": paras[1][:100]},
                                                     {"id": "b", "text": "x" * 300}]})
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", long, "--workers", "2",
                         config={"max_chars": 200})
    assert code == 2 and "package long, data/train/part-00000.jsonl:2: sample b" in err


def test_the_executor_option_reaches_ray(tmp_path, monkeypatch):
    """``--executor ray`` runs the probe on Ray (tests/ray_cases.py: the same report as the
    local pool); without Ray installed it is one line with the install hint, nothing written."""
    import sys

    paras = stdlib_paragraphs()
    pool = make_package(tmp_path, "pool", {"train": [{"id": f"d{i}", "text": p}
                                                     for i, p in enumerate(paras[:5])]})
    ev = make_package(tmp_path, "ev", {"test": [{"id": "q", "text": paras[0][:100]}]})
    monkeypatch.setitem(sys.modules, "ray", None)
    code, err = _refused(tmp_path, "--evals", ev, "--inputs", pool, "--executor", "ray",
                         "--workers", "2")
    assert code == 1 and "pip install 'near-dedup[ray]'" in err
