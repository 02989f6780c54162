"""Semantic tamperings of a contamination report, each resealed with new checksums: every one
is refused by `report verify` in one line naming the file (and the line where there is one),
exit 1. What a report alone cannot show — pairs removed with the summary recomputed, a config
or a pool kind changed consistently — is refused once the packages it names are at hand
(`report verify --inputs`), and by `mixture build`, which re-derives the pairs it relies on."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from helpers import make_package, run_cli, stdlib_paragraphs, tree_bytes

from near_dedup_core.contamination.report import (
    PairLine,
    SetAsideLine,
    Summary,
    counts_of,
    summarize,
)
from near_dedup_core.fsutil import write_checksums

CONTAMINATED = 8


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """Two eval packages (cpt and sft) and a pool of two cpt packages whose train split holds
    exactly 8 samples that contain an eval item (one of them in the second package), and the
    report of them."""
    tmp = tmp_path_factory.mktemp("contam-tamper")
    paras = stdlib_paragraphs()
    items = [paras[k][:260] for k in range(0, 24, 2)]  # 12 items
    docs = [{"id": f"d{i}", "text": paras[30 + i], "domain": "docs" if i % 2 else "web"}
            for i in range(40)]
    for n in range(CONTAMINATED - 1):  # items 0..6 in one training sample each (6 in part)
        docs[3 * n]["text"] += " " + (items[n] if n != 6 else items[n][:-25])
    pool_a = make_package(tmp, "pool-a", {"train": docs[:30], "validation": docs[30:]})
    pool_b = make_package(tmp, "pool-b", {"train": [
        {"id": "b0", "text": paras[80] + " " + items[7], "domain": "web"},
        *({"id": f"b{i}", "text": paras[80 + i], "domain": "web"} for i in range(1, 6))]})
    ev = make_package(tmp, "eval-en", {"test": [{"id": f"q{i}", "text": t}
                                                for i, t in enumerate(items[:10])]})
    qa = make_package(tmp, "eval-qa", {"test": [
        {"id": f"a{i}", "task": "qa", "messages": [
            {"role": "user", "content": t[:120]}, {"role": "assistant", "content": t[120:]}]}
        for i, t in enumerate(items[10:])]}, kind="sft")
    report = tmp / "report"
    code, _, err = run_cli("--quiet", "contamination", "--evals", ev, qa, "--inputs", pool_a,
                           pool_b, "--output", report, "--workers", 1)
    assert code == 0, err
    lines = _rows(report)
    contaminated = {(r["training"]["package_id"], r["training"]["sample_id"]) for r in lines}
    assert len(contaminated) == CONTAMINATED and len(lines) >= CONTAMINATED
    return {"tmp": tmp, "report": report, "packages": [ev, qa, pool_a, pool_b],
            "pool": [pool_a, pool_b], "contaminated": contaminated}


def _rows(folder: Path) -> list[dict]:
    return [orjson.loads(x) for x in (folder / "contamination.jsonl").read_bytes().splitlines()]


def _write_rows(folder: Path, rows: list[dict]) -> None:
    (folder / "contamination.jsonl").write_bytes(b"".join(
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE) for r in rows))


def _json(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def _write_json(folder: Path, name: str, obj: object) -> None:
    (folder / name).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _recount(folder: Path, rows: list[dict]) -> None:
    """Rewrite the lines, and the summary and the manifest's counts recomputed from them, as
    a forger who knows the format would."""
    _write_rows(folder, rows)
    old = Summary.model_validate(_json(folder, "summary.json"))
    evals = [{"package_id": e.package_id, "items": e.items, "items_checked": e.items_checked,
              "items_skipped_short": e.items_skipped_short} for e in old.evals]
    aside = [SetAsideLine.model_validate_json(raw)
             for raw in (folder / "set_aside.jsonl").read_bytes().splitlines()]
    summary = summarize([PairLine.model_validate(r) for r in rows], evals,
                        old.training.samples, aside)
    _write_json(folder, "summary.json", summary.model_dump(mode="json"))
    manifest = _json(folder, "manifest.json")
    manifest["counts"] = counts_of(summary).model_dump()
    manifest["files"]["contamination.jsonl"]["lines"] = len(rows)
    _write_json(folder, "manifest.json", manifest)


def manifest(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        m = _json(folder, "manifest.json")
        change(m)
        _write_json(folder, "manifest.json", m)
    return apply


def summary(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        s = _json(folder, "summary.json")
        change(s)
        _write_json(folder, "summary.json", s)
    return apply


def line(change: Callable[[dict], object], at: int = 0) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        rows = _rows(folder)
        change(rows[at])
        _write_rows(folder, rows)
    return apply


def recounted(change: Callable[[list[dict]], list[dict]]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        _recount(folder, change(_rows(folder)))
    return apply


def _set(obj: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    for key in parents:
        obj = obj[key]
    obj[last] = value


def _del(obj: dict, path: str) -> None:
    *parents, last = path.split(".")
    for key in parents:
        obj = obj[key]
    del obj[last]


def _swap_first_ordered(rows: list[dict]) -> list[dict]:
    """Two lines of items of one eval data file put out of order."""
    for k in range(len(rows) - 1):
        a, b = rows[k]["eval"], rows[k + 1]["eval"]
        if a["package_id"] == b["package_id"] and a["file"] == b["file"] and \
                a["line"] < b["line"]:
            rows[k], rows[k + 1] = rows[k + 1], rows[k]
            return rows
    raise AssertionError("no two items of one file")


def _other_sample(rows: list[dict]) -> list[dict]:
    """The first pair moved to a clean training sample of the same package."""
    used = {r["training"]["sample_id"] for r in rows}
    clean = next(f"d{i}" for i in range(40) if f"d{i}" not in used)
    rows[0]["training"]["sample_id"] = clean
    return rows


def _weaker(rows: list[dict]) -> list[dict]:
    """One shingle fewer in common, the containment recomputed (still above the threshold)."""
    r = rows[0]
    r["common_shingles"] -= 1
    r["containment"] = r["common_shingles"] / r["item_shingles"]
    return rows


# (name, change, file named in the message, the message's other fragment, needs --inputs)
CASES: list[tuple[str, Callable[[Path], None], str, str, bool]] = [
    # the folder
    ("extra-file", lambda f: (f / "notes.txt").write_text("x"), "notes.txt", "no file", False),
    ("extra-nested", lambda f: ((f / "x").mkdir(), (f / "x" / "y.json").write_text("{}")),
     "x/y.json", "no file", False),
    ("no-summary", lambda f: (f / "summary.json").unlink(), "summary.json", "not listed",
     False),
    # manifest.json
    ("format-version-true", manifest(lambda m: _set(m, "format_version", True)),
     "manifest.json", "format_version", False),
    ("format-version-5", manifest(lambda m: _set(m, "format_version", 5)), "manifest.json",
     "format_version", False),
    ("unknown-key", manifest(lambda m: _set(m, "note", "x")), "manifest.json", "note", False),
    ("tool-version-int", manifest(lambda m: _set(m, "tool_version", 5)), "manifest.json",
     "tool_version", False),
    ("config-reduced", manifest(lambda m: _del(m, "config.seed")), "manifest.json",
     "config is not complete", False),
    ("config-string", manifest(lambda m: _set(m, "config.contamination_threshold", "0.8")),
     "manifest.json", "contamination_threshold", False),
    ("config-unknown", manifest(lambda m: _set(m, "config.treshold", 0.9)), "manifest.json",
     "treshold", False),
    ("config-invalid", manifest(lambda m: _set(m, "config.bands", 64)), "manifest.json",
     "config", False),
    ("config-stricter", manifest(lambda m: _set(m, "config.contamination_threshold", 0.99)),
     "contamination.jsonl:", "below the threshold", False),
    ("config-changed", manifest(lambda m: _set(m, "config.contamination_threshold", 0.3)),
     "manifest.json", "re-derived", True),
    ("extra-hits", manifest(lambda m: _set(m, "candidates.extra_hits", 8)), "manifest.json",
     "candidates", False),
    ("anchors-string", manifest(lambda m: _set(m, "candidates.anchors", "12")),
     "manifest.json", "candidates.anchors", False),
    ("verified-changed", manifest(lambda m: _set(m, "candidates.verified", 1)),
     "manifest.json", "re-derived", True),
    ("eval-twice", manifest(lambda m: m["evals"].append(m["evals"][0])), "manifest.json",
     "listed twice", False),
    ("input-also-eval", manifest(lambda m: m["evals"].append(m["inputs"][0])),
     "manifest.json", "listed twice", False),
    ("eval-extra-field", manifest(lambda m: _set(m["evals"][0], "url", "x")), "manifest.json",
     "evals.0.url", False),
    ("records-string", manifest(lambda m: _set(m["evals"][0], "records", "10")),
     "manifest.json", "evals.0.records", False),
    ("sha-not-hex", manifest(lambda m: _set(m["inputs"][0], "manifest_sha256", "abc")),
     "manifest.json", "inputs.0.manifest_sha256", False),
    ("one-input-sft", manifest(lambda m: _set(m["inputs"][1], "kind", "sft")),
     "manifest.json", "inputs[1].kind", False),
    ("all-inputs-sft", manifest(lambda m: [i.update(kind="sft") for i in m["inputs"]]),
     "contamination report", "not the one the report names", True),
    ("no-inputs", manifest(lambda m: _set(m, "inputs", [])), "manifest.json", "inputs",
     False),
    ("evals-string", manifest(lambda m: _set(m, "evals", "eval-en")), "manifest.json",
     "evals", False),
    ("counts-list", manifest(lambda m: _set(m, "counts", [])), "manifest.json", "counts",
     False),
    ("counts-bool", manifest(lambda m: _set(m, "counts.pairs", True)), "manifest.json",
     "counts.pairs", False),
    ("counts-changed", manifest(lambda m: _set(m, "counts.items_leaked", 1)),
     "manifest.json", "do not match", False),
    ("lines-string", manifest(lambda m: m["files"].update({"contamination.jsonl": {"lines": "3"}})),
     "manifest.json", "files", False),
    ("files-extra", manifest(lambda m: _set(m, "files", {**m["files"], "x.jsonl": {}})),
     "manifest.json", "files", False),
    # contamination.jsonl
    ("containment-true", line(lambda r: _set(r, "containment", True)),
     "contamination.jsonl:1", "containment", False),
    ("eval-line-string", line(lambda r: _set(r, "eval.line", str(r["eval"]["line"]))),
     "contamination.jsonl:1", "eval.line", False),
    ("training-line-string", line(lambda r: _set(r, "training.line", "1"), at=1),
     "contamination.jsonl:2", "training.line", False),
    ("line-extra-field", line(lambda r: _set(r, "score", 1.0)), "contamination.jsonl:1",
     "score", False),
    ("ref-extra-field", line(lambda r: _set(r, "eval.domain", "web")),
     "contamination.jsonl:1", "eval.domain", False),
    ("eval-string", line(lambda r: _set(r, "eval", "q1")), "contamination.jsonl:1", "eval",
     False),
    ("span-list", line(lambda r: _set(r, "span", [1, 2])), "contamination.jsonl:1", "span",
     False),
    ("span-reversed", line(lambda r: _set(r, "span", {"start": 10, "end": 5})),
     "contamination.jsonl:1", "span", False),
    ("span-text-differs", line(lambda r: _set(r, "training_text", r["training_text"] + "x")),
     "contamination.jsonl:1", "training_text", False),
    ("method-unknown", line(lambda r: _set(r, "method", "fuzzy")), "contamination.jsonl:1",
     "method", False),
    ("numbers-string", line(lambda r: _set(r, "numbers_differ", "no")),
     "contamination.jsonl:1", "numbers_differ", False),
    ("no-shingles", line(lambda r: _set(r, "item_shingles", 0)), "contamination.jsonl:1",
     "item_shingles", False),
    ("common-over-item", line(lambda r: _set(r, "common_shingles", r["item_shingles"] + 1)),
     "contamination.jsonl:1", "common_shingles", False),
    ("no-domain", line(lambda r: _del(r, "training.domain")), "contamination.jsonl:1",
     "training.domain", False),
    ("unknown-eval", line(lambda r: _set(r, "eval.package_id", "eval-zz")),
     "contamination.jsonl:1", "not among the manifest's evals", False),
    ("not-json", lambda f: (f / "contamination.jsonl").write_bytes(b"{oops\n"),
     "contamination.jsonl:1", "not valid JSON", False),
    ("pair-twice", recounted(lambda rows: [rows[0], *rows]), "contamination.jsonl:2",
     "twice", False),
    ("out-of-order", recounted(_swap_first_ordered), "contamination.jsonl", "out of order",
     False),
    # summary.json
    ("summary-extra", summary(lambda s: _set(s, "note", 1)), "summary.json", "note", False),
    ("summary-items-string", summary(lambda s: _set(s["evals"][0], "items", "10")),
     "summary.json", "evals.0.items", False),
    ("summary-evals-dict", summary(lambda s: _set(s, "evals", {})), "summary.json", "evals",
     False),
    ("summary-domain", summary(lambda s: _set(s["evals"][0]["by_training"][0], "domain",
                                              "forum")), "summary.json", "does not match",
     False),
    # consistent forgeries: only the packages can tell
    ("one-pair-removed", recounted(lambda rows: rows[1:]), "contamination.jsonl", "lacks 1",
     True),
    ("all-pairs-removed", recounted(lambda rows: []), "contamination.jsonl", "lacks", True),
    ("pair-moved", recounted(_other_sample), "contamination.jsonl", "re-derived", True),
    ("pair-weakened", recounted(_weaker), "contamination.jsonl:1", "re-derived", True),
    ("span-moved", recounted(lambda rows: [{**rows[0], "span": {"start": 0, "end": 3},
                                            "training_text": rows[0]["training_text"][:3]},
                                           *rows[1:]]), "contamination.jsonl:1", "re-derived",
     True),
]


def _forged(base: dict, name: str, change: Callable[[Path], None]) -> Path:
    copy = base["tmp"] / f"forged-{name}-{random.random()}"
    shutil.copytree(base["report"], copy)
    change(copy)
    (copy / "checksums.sha256").unlink()
    write_checksums(copy)
    return copy


def test_the_report_verifies_with_and_without_its_packages(base):
    # its packages are at the paths it records: plain `report verify` re-derives the pairs
    code, out, err = run_cli("report", "verify", base["report"])
    assert code == 0 and "the same pairs re-derived from its packages" in out, err
    code, out, err = run_cli("report", "verify", base["report"], "--inputs",
                             *base["packages"])
    assert code == 0 and "the same pairs re-derived from its packages" in out, err
    moved = base["packages"][0].with_name("moved-away")
    base["packages"][0].rename(moved)
    try:
        code, out, err = run_cli("report", "verify", base["report"])
    finally:
        moved.rename(base["packages"][0])
    assert code == 0 and "re-derive the pairs with --inputs" in out, err


@pytest.mark.parametrize("name,change,file,fragment,needs_inputs", CASES,
                         ids=[c[0] for c in CASES])
def test_a_resealed_tampering_is_refused_in_one_line(base, name, change, file, fragment,
                                                     needs_inputs):
    forged = _forged(base, name, change)
    before = tree_bytes(forged)
    code, _, err = run_cli("report", "verify", forged, "--inputs", *base["packages"])
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("near-dedup: error:") and file in err and fragment in err, err
    # the packages are at the paths the report records, so a plain `report verify` re-derives
    # the pairs as well: the files alone tell only the cases that do not need the packages
    code, out, err = run_cli("report", "verify", forged)
    assert code == 1 and err.count("\n") == 1 and file in err and fragment in err, err
    if not needs_inputs:  # the report's own files tell, even where its packages are not
        moved = base["packages"][0].with_name("moved-away")
        base["packages"][0].rename(moved)
        try:
            code, out, err = run_cli("report", "verify", forged)
        finally:
            moved.rename(base["packages"][0])
        assert code == 1 and err.count("\n") == 1 and file in err and fragment in err, err
    assert tree_bytes(forged) == before


def test_inputs_must_be_the_packages_the_report_names(base, tmp_path):
    ev, qa, pool_a, pool_b = base["packages"]
    code, _, err = run_cli("report", "verify", base["report"], "--inputs", ev, pool_a, pool_b)
    assert code == 1 and "package eval-qa (manifest.json evals) is not among" in err, err
    other = make_package(tmp_path, "other", {"train": [{"id": "x", "text": "y" * 90}]})
    code, _, err = run_cli("report", "verify", base["report"], "--inputs",
                           *base["packages"], other)
    assert code == 1 and "package other is not named by the report" in err, err
    changed = make_package(tmp_path, "pool-b", {"train": [{"id": "b0", "text": "z" * 90}]})
    code, _, err = run_cli("report", "verify", base["report"], "--inputs", ev, qa, pool_a,
                           changed)
    assert code == 1 and "package pool-b at" in err and "not the one the report names" in err


def _mixture(tmp: Path, base: dict, report: Path) -> Path:
    cfg = tmp / f"mix-{random.random()}.json"
    cfg.write_text(json.dumps({
        "name": "mix", "kind": "cpt", "inputs": [str(p) for p in base["pool"]],
        "target_records": 1_000, "allow_shortfall": True, "contamination_report": str(report),
        "strategy": {"type": "temperature", "temperature": 1.0}}))
    return cfg


def test_a_mixture_refuses_a_report_with_its_pairs_removed(base, tmp_path):
    good = tmp_path / "good"
    code, out, err = run_cli("--quiet", "mixture", "build", _mixture(tmp_path, base,
                                                                     base["report"]),
                             "--output", good)
    assert code == 0, err
    kept = {(orjson.loads(x)["origin"]["package_id"], orjson.loads(x)["origin"]["sample_id"])
            for x in (good / "data/train/part-00000.jsonl").read_bytes().splitlines()}
    assert not kept & base["contaminated"] and len(kept) == 30 + 6 - CONTAMINATED
    for name, change in (("all-pairs-removed", recounted(lambda rows: [])),
                         ("one-pair-removed", recounted(lambda rows: rows[1:])),
                         ("config-changed",
                          manifest(lambda m: _set(m, "config.contamination_threshold", 0.5)))):
        forged = _forged(base, name, change)
        out_dir = tmp_path / f"mixture-{name}"
        code, _, err = run_cli("--quiet", "mixture", "build",
                               _mixture(tmp_path, base, forged), "--output", out_dir)
        assert code == 1 and err.count("\n") == 1 and "re-derived" in err, (name, err)
        assert not out_dir.exists()


def test_a_mixture_needs_the_eval_packages_the_report_records(base, tmp_path):
    report = tmp_path / "report"
    shutil.copytree(base["report"], report)
    m = _json(report, "manifest.json")
    m["evals"][0]["path"] = str(tmp_path / "gone")
    _write_json(report, "manifest.json", m)
    (report / "checksums.sha256").unlink()
    write_checksums(report)
    code, _, err = run_cli("--quiet", "mixture", "build", _mixture(tmp_path, base, report),
                           "--output", tmp_path / "mix")
    assert code == 1 and err.count("\n") == 1, err
    assert "eval package eval-en is needed at the path the report records" in err
    assert not (tmp_path / "mix").exists()
