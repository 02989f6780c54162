"""The bundled sample packages: reproducible from samples/source/, valid, and as described."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from helpers import REPO, SAMPLES, run_cli, tree_bytes

from near_dedup_core import package as pkgmod

CPT = [SAMPLES / "cpt" / day / pid for day, pid in
       [("2026-11-25", "cpt-v1"), ("2026-11-26", "cpt-v2"), ("2026-11-27", "cpt-v3")]]
SFT = [SAMPLES / "sft" / "sft-v1", SAMPLES / "sft" / "sft-v2"]


def load_generator():
    spec = importlib.util.spec_from_file_location("build_samples", SAMPLES / "build_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(package_dir):
    packages = pkgmod.open_packages([package_dir])
    return {r.sample_id: r for r in pkgmod.stream_records(packages)}


def test_regenerating_gives_the_committed_bytes(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(SAMPLES / "build_samples.py"),
                           "--output", str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for folder in ("cpt", "sft"):
        fresh, committed = tree_bytes(tmp_path / folder), tree_bytes(SAMPLES / folder)
        assert sorted(fresh) == sorted(committed)
        for rel in fresh:
            assert fresh[rel] == committed[rel], f"{folder}/{rel} differs from a regeneration"


def test_generator_refuses_to_overwrite_without_replace(tmp_path):
    (tmp_path / "sft" / "sft-v1").mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(SAMPLES / "build_samples.py"),
                           "--output", str(tmp_path)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert proc.returncode == 1 and "--replace" in proc.stderr
    assert list((tmp_path / "sft" / "sft-v1").iterdir()) == []
    assert not (tmp_path / "cpt").exists()


@pytest.mark.parametrize("inputs", [[p] for p in CPT] + [CPT, SFT])
def test_committed_packages_validate_through_the_cli(inputs):
    proc = subprocess.run([sys.executable, "-m", "near_dedup_core", "snapshot", "validate",
                           *map(str, inputs)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("valid: ") == len(inputs)


def test_sft_v2_alone_is_refused_for_its_dependency():
    code, _, err = run_cli("snapshot", "validate", SFT[1])
    assert code == 1 and "depends_on names package sft-v1" in err


def test_cpt_days_are_cumulative_and_varied():
    v1, v2, v3 = (records(p) for p in CPT)
    for package_dir in CPT:
        [pkg] = pkgmod.open_packages([package_dir])
        assert pkg.tokenizer == {"name": "qwen2-tok", "revision": "r3"}
        assert pkg.splits == ["train", "validation"]
    assert len(set(v1) & set(v2)) >= 0.9 * len(v1) - 5
    assert len(set(v2) & set(v3)) >= 0.9 * len(v2) - 5
    all_records = [r for day in (v1, v2, v3) for r in day.values()]
    domains = Counter(r.data["domain"] for r in v3.values())
    assert set(domains) == {"web", "news", "books", "code-docs"}
    assert len(set(domains.values())) > 1
    assert any(len(r.data["text"]) < 80 for r in v1.values())
    assert all(isinstance(r.data["source"], dict) for r in all_records)
    train_texts = {r.data["text"] for r in v1.values() if r.split == "train"}
    assert sum(r.data["text"] in train_texts for r in v1.values() if r.split == "validation") >= 2
    total = sum(p.record_count for p in pkgmod.open_packages(CPT)) + sum(
        p.record_count for p in pkgmod.open_packages(SFT))
    assert 150 <= total <= 600


def test_edit_lists_match_the_packages():
    generator = load_generator()
    by_package = {pid: records(path) for pid, path in
                  [("cpt-v1", CPT[0]), ("cpt-v2", CPT[1]), ("cpt-v3", CPT[2])]}
    everything = {sid: r for recs in by_package.values() for sid, r in recs.items()}
    edits = [json.loads(line) for line in (SAMPLES / "cpt" / "edits.jsonl").open()]
    kinds = Counter(e["expect"] for e in edits)
    assert {"near", "exact", "blocked", "distinct", "short_distinct", "retained"} <= set(kinds)
    for edit in edits:
        derived = by_package[edit["package_id"]][edit["id"]]
        base = everything[edit["of"]["id"]]
        assert derived.split == edit["split"]
        expect, j = generator.expectation(base.data["text"], derived.data["text"])
        assert (j, expect if edit["expect"] != "retained" else "retained") == (
            edit["jaccard_char5"], edit["expect"]), edit
    edit_kinds = {e["edit"] for e in edits}
    assert {"word_change", "sentence_insert", "sentence_delete", "nav_line", "number_change",
            "unit_change", "verbatim_copy"} <= edit_kinds
    assert any(k.startswith("whitespace_") for k in edit_kinds)


def test_sft_packages_use_refs_and_material_format():
    v1 = records(SFT[0])
    packages = pkgmod.open_packages(SFT)
    assert packages[1].depends_on == ["sft-v1"] and packages[1].parents == ["sft-v1"]
    v2 = {r.sample_id: r for r in pkgmod.stream_records(packages) if r.package_id == "sft-v2"}
    refs = [r for r in v2.values() if r.ref is not None]
    assert refs and all(r.ref[0] == "sft-v1" and r.ref[1] in v1 for r in refs)
    assert {r.split for r in refs} == {"train", "validation"}
    full = [r.data for r in v2.values() if r.ref is None]
    assert {d["task"] for d in full} == {"extract_kpi", "summarize"}
    assert any(d["material"].get("images") for d in full)
    edits = [json.loads(line) for line in (SAMPLES / "sft" / "edits.jsonl").open()]
    assert {"near", "exact", "blocked", "other_scope"} == {e["expect"] for e in edits}
    assert all(e["id"] in v2 and e["of"]["id"] in v1 for e in edits)
