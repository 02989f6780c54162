"""Mixture plan/build/verify on small hand-made packages and a hand-written frozen report.

The packages are created with `package.create_package`; the report folder is written here in
the frozen report format, so quotas, selection and verification are tested independently of
the scanner. The end-to-end flow through index and scan is in test_mixture_e2e.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers import refused, tree_bytes

from near_dedup_core import ALGORITHM_VERSION, mixture
from near_dedup_core.cli import main
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import json_line, write_checksums, write_json
from near_dedup_core.package import create_package, open_packages, stream_records
from near_dedup_core.report import count_decisions

CREATED = "2026-11-28T00:00:00Z"


def _text(domain: str, i: int, words: int = 30) -> str:
    return " ".join(f"{domain}{i}w{j}" for j in range(words))


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(json_line(r) for r in rows))
    return path


def _make_package(root: Path, package_id: str, splits: dict[str, list[dict]],
                  depends_on: tuple[str, ...] = ()) -> Path:
    src = root / "src" / package_id
    src.mkdir(parents=True)
    args = [(split, _jsonl(src / f"{split}.jsonl", rows)) for split, rows in splits.items()]
    out = root / "packages" / package_id
    create_package(kind="cpt", package_id=package_id, tokenizer="qwen2-tok@r3", splits=args,
                   depends_on=list(depends_on), parents=list(depends_on), created_at=CREATED,
                   output=out)
    return out


def _write_report(folder: Path, packages: list[Path], excluded: dict[tuple[str, str], tuple],
                  retained: tuple[str, ...] = ("validation",)) -> Path:
    """A report folder in the frozen format that passes every cross-check of
    `report.verify_report`: ``excluded`` maps (package, sample) → kept key, each backed by a
    near relation at Jaccard 0.95; every sample has its own content; each package was indexed
    in its own batch, in input order."""
    pkgs = open_packages(packages)
    config = NearDedupConfig(retained_splits=list(retained))
    decisions, origins, relations = [], [], []
    content, text = {}, {}
    for rec in stream_records(pkgs):  # dependency order: ref targets first
        key = (rec.package_id, rec.sample_id)
        content[key] = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
        text[key] = text[rec.ref] if rec.ref is not None else rec.data["text"]
    for rec in sorted(stream_records(pkgs), key=lambda r: [p.package_id for p in pkgs]
                      .index(r.package_id)):
        key = (rec.package_id, rec.sample_id)
        kept = excluded.get(key)
        decisions.append({
            "package_id": rec.package_id, "sample_id": rec.sample_id, "split": rec.split,
            "scope": "tok", "content_id": content[key],
            "text_sha256": hashlib.sha256(text[key].encode()).hexdigest(),
            "decision": "exclude" if kept else "keep",
            "kept": {"package_id": kept[0], "sample_id": kept[1]} if kept else None,
            "reason": ("near_duplicate" if kept else
                       "retained_split" if rec.split in retained else "unique"),
            "jaccard": 0.95 if kept else None})
        origins.append({"package_id": rec.package_id, "sample_id": rec.sample_id,
                        "split": rec.split, "file": rec.file, "line": rec.line,
                        "source": rec.data.get("source")})
        if kept:
            relations.append({
                "sample": {"package_id": key[0], "sample_id": key[1]}, "kind": "near",
                "jaccard": 0.95, "history_only": False, "blocked_by": None,
                "match": {"content_id": content[kept], "package_id": kept[0],
                          "sample_id": kept[1]}, "match_sources": []})
    folder.mkdir(parents=True)
    (folder / "decisions.jsonl").write_bytes(b"".join(json_line(d) for d in decisions))
    (folder / "relations.jsonl").write_bytes(b"".join(json_line(r) for r in relations))
    (folder / "origins.jsonl").write_bytes(b"".join(json_line(o) for o in origins))
    counts = count_decisions(decisions, relations)
    counts["candidates"] = {"lsh_pairs": len(relations), "after_filters": len(relations)}
    write_json(folder / "manifest.json", {
        "format": "near-dedup-report", "format_version": 1, "tool_version": "0.1.0",
        "algorithm_version": ALGORITHM_VERSION,
        "config": config.model_dump(mode="json"), "config_fingerprint": config.fingerprint(),
        "inputs": [{"package_id": p.package_id, "kind": p.kind,
                    "manifest_sha256": p.manifest_sha256, "records": p.record_count,
                    "path": str(p.path)} for p in pkgs],
        "index": {"packages": [{"package_id": p.package_id, "kind": p.kind,
                                "manifest_sha256": p.manifest_sha256, "batch": k + 1}
                               for k, p in enumerate(pkgs)],
                  "batches": len(pkgs), "contents": len(decisions)},
        "counts": counts,
        "files": {"decisions.jsonl": {"lines": len(decisions)},
                  "relations.jsonl": {"lines": len(relations)},
                  "origins.jsonl": {"lines": len(origins)}}})
    write_checksums(folder)
    return folder


@pytest.fixture
def pool(tmp_path: Path) -> dict:
    """cpt-a: 8 web, 4 code, 2 short news, 2 validation; cpt-b (depends on cpt-a): 4 web of
    which 2 are refs into cpt-a and 2 are near-copies excluded by the report, 1 validation."""
    a_train = ([{"id": f"w{i}", "text": _text("web", i), "domain": "web",
                 "source": {"row": i}} for i in range(8)]
               + [{"id": f"c{i}", "text": _text("code", i), "domain": "code"} for i in range(4)]
               + [{"id": f"n{i}", "text": "short news", "domain": "news"} for i in range(2)])
    a_val = [{"id": f"v{i}", "text": _text("val", i), "domain": "web"} for i in range(2)]
    a = _make_package(tmp_path, "cpt-a", {"train": a_train, "validation": a_val})
    b_train = [{"id": "bw0", "text": _text("web", 0) + " edited", "domain": "web"},
               {"id": "bw1", "text": _text("web", 1) + " edited", "domain": "web"},
               {"id": "r1", "ref": {"package_id": "cpt-a", "id": "c1"}, "domain": "web",
                "source": {"row": "b-r1"}},
               {"id": "r2", "ref": {"package_id": "cpt-a", "id": "w2"}}]
    b_val = [{"id": "rv", "ref": {"package_id": "cpt-a", "id": "w3"}}]
    b = _make_package(tmp_path, "cpt-b", {"train": b_train, "validation": b_val}, ("cpt-a",))
    report = _write_report(tmp_path / "report", [a, b],
                           {("cpt-b", "bw0"): ("cpt-a", "w0"), ("cpt-b", "bw1"): ("cpt-a", "w1")})
    return {"root": tmp_path, "a": a, "b": b, "report": report}


def _config(pool: dict, name: str = "mix", **overrides) -> Path:
    cfg = {"name": name, "kind": "cpt", "inputs": [str(pool["a"]), str(pool["b"])],
           "target_records": 8, "group_by": "domain",
           "strategy": {"type": "fixed", "weights": {"web": 3, "code": 1}},
           "quality": {"min_chars": 0}, "allow_shortfall": False, "redistribute": False,
           "seed": 7, "near_dedup_report": str(pool["report"])}
    cfg.update(overrides)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    path = pool["root"] / f"{name}.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["--quiet", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines()]


# --------------------------------------------------------------------------- config


def test_config_errors_are_one_line_naming_the_file(pool, capsys):
    bad_key = _config(pool, "k", colour="red")
    line = refused(["--quiet", "mixture", "plan", bad_key])
    assert f"mixture config {bad_key}: colour: Extra inputs" in line

    bad_type = _config(pool, "t", strategy={"type": "bandit"})
    line = refused(["--quiet", "mixture", "plan", bad_type])
    assert f"mixture config {bad_type}: strategy" in line

    broken = pool["root"] / "broken.json"
    broken.write_text("{", encoding="utf-8")
    assert "not valid JSON" in refused(["--quiet", "mixture", "plan", broken])

    line = refused(["--quiet", "mixture", "plan", pool["root"] / "missing.json"])
    assert "file not found" in line


@pytest.mark.parametrize("kind", ["doremi", "regmix"])
def test_learned_weights_refused_with_report(pool, capsys, kind):
    cfg = _config(pool, kind, strategy={"type": kind, "weights": {"web": 1, "code": 1}})
    out = pool["root"] / "out"
    line = refused(["--quiet", "mixture", "build", cfg, "--output", out])
    assert f"strategy {kind} cannot be combined with near_dedup_report" in line
    assert "learned on the undeduplicated pool" in line
    assert not out.exists()


@pytest.mark.parametrize("kind", ["doremi", "regmix"])
def test_learned_weights_without_report_act_as_fixed(pool, capsys, kind):
    learned = mixture.plan_mixture(mixture.load_mixture_config(_config(
        pool, kind, near_dedup_report=None,
        strategy={"type": kind, "weights": {"web": 3, "code": 1}})), progress=False)
    fixed = mixture.plan_mixture(mixture.load_mixture_config(_config(
        pool, "f", near_dedup_report=None)), progress=False)
    assert learned.rows == fixed.rows and learned.selected == fixed.selected


# --------------------------------------------------------------------------- weights, quotas


def test_largest_remainder_sums_to_total():
    assert mixture.largest_remainder(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    assert mixture.largest_remainder(7, {"a": 0.5, "b": 0.25, "c": 0.25, "z": 0}) == \
        {"a": 3, "b": 2, "c": 2, "z": 0}  # floors 3,1,1; .75 remainders win
    for total in range(0, 50):
        q = mixture.largest_remainder(total, {"a": 0.1, "b": 0.7, "c": 0.2})
        assert sum(q.values()) == total


def test_fixed_weights_match_formula(pool, capsys):
    cfg = _config(pool, "fixed", target_records=6)
    plan_json = pool["root"] / "plan.json"
    code, out, _ = _run(capsys, "mixture", "plan", cfg, "--output", plan_json)
    assert code == 0 and "web" in out and "code" in out
    rows = {r["domain"]: r for r in json.loads(plan_json.read_text())["domains"]}
    assert set(rows) == {"web", "code", "news"}
    assert rows["web"]["weight"] == pytest.approx(3 / 4)
    assert rows["code"]["weight"] == pytest.approx(1 / 4)
    assert rows["news"]["weight"] == 0
    # 6 × 3/4 = 4.5, 6 × 1/4 = 1.5: one remainder unit, tie on 0.5 broken by name (code).
    assert (rows["web"]["quota"], rows["code"]["quota"], rows["news"]["quota"]) == (4, 2, 0)
    for r in rows.values():
        assert set(r) >= {"domain", "available_before_dedup", "available_after_dedup",
                          "weight", "quota", "selected", "shortfall"}


def test_temperature_weights_match_formula(pool):
    cfg = mixture.load_mixture_config(_config(
        pool, "temp", strategy={"type": "temperature", "temperature": 2.0}, target_records=9,
        allow_shortfall=True))
    plan = mixture.plan_mixture(cfg, progress=False)
    rows = {r["domain"]: r for r in plan.rows}
    n = {d: r["available_after_dedup"] for d, r in rows.items()}
    # After dedup: web = 8 of cpt-a + r1 (own domain web) + r2 (w2's domain) = 10.
    assert n == {"web": 10, "code": 4, "news": 2}
    z = sum(v ** 0.5 for v in n.values())
    for d, r in rows.items():
        assert r["weight"] == pytest.approx(n[d] ** 0.5 / z)
    assert sum(r["quota"] for r in rows.values()) == 9
    exact = {d: 9 * n[d] ** 0.5 / z for d in n}
    for d, r in rows.items():
        assert abs(r["quota"] - exact[d]) < 1


# --------------------------------------------------------------------------- report use


def test_plan_drops_excluded_before_quotas(pool, capsys):
    plan = mixture.plan_mixture(mixture.load_mixture_config(_config(pool)), progress=False)
    web = next(r for r in plan.rows if r["domain"] == "web")
    assert web["available_before_dedup"] == 12 and web["available_after_dedup"] == 10
    assert plan.excluded_by_report == 2
    assert ("cpt-b", "bw0") not in plan.selected and ("cpt-b", "bw1") not in plan.selected
    code, out, _ = _run(capsys, "mixture", "plan", _config(pool))
    assert code == 0 and "2 pool samples excluded" in out


def test_stale_report_refused(pool, capsys):
    # A new version of cpt-b with the same id: the report was computed on the old one.
    shutil.rmtree(pool["b"])
    _make_package(pool["root"] / "v2", "cpt-b",
                  {"train": [{"id": "x", "text": _text("web", 99), "domain": "web"}]},
                  ("cpt-a",))
    cfg = _config(pool, inputs=[str(pool["a"]), str(pool["root"] / "v2/packages/cpt-b")])
    out = pool["root"] / "out"
    line = refused(["--quiet", "mixture", "build", cfg, "--output", out])
    assert "package cpt-b: manifest sha256" in line and "rescan" in line
    assert not out.exists()


def test_report_inputs_must_all_be_mixture_inputs(pool, capsys):
    only_a = _config(pool, "only-a", inputs=[str(pool["a"])])
    line = refused(["--quiet", "mixture", "plan", only_a])
    assert "report input package cpt-b is not among the mixture inputs" in line
    assert "stale" in line and "rescan" in line


def test_report_tampered_is_refused(pool, capsys):
    decisions = pool["report"] / "decisions.jsonl"
    decisions.write_bytes(decisions.read_bytes().replace(b'"exclude"', b'"keep"'))
    assert "decisions.jsonl" in refused(["--quiet", "mixture", "plan", _config(pool)])


def test_retained_splits_follow_the_report(pool, capsys):
    cfg = _config(pool, retained_splits=["validation", "test"])
    assert "differ from the near-dedup report's" in refused(["--quiet", "mixture", "plan", cfg])
    same = _config(pool, "same", retained_splits=["validation"])
    assert _run(capsys, "mixture", "plan", same)[0] == 0


# --------------------------------------------------------------------------- shortfall


def test_shortfall_is_an_error_unless_allowed(pool, capsys):
    # news: 2 records; fixed weights ask for half the target from it.
    strategy = {"type": "fixed", "weights": {"news": 1, "web": 1}}
    cfg = _config(pool, "short", strategy=strategy, target_records=10)
    line = refused(["--quiet", "mixture", "plan", cfg])
    assert "3 of 10 records short" in line and "news 2 eligible for quota 5" in line
    assert "allow_shortfall" in line

    allowed = _config(pool, "allowed", strategy=strategy, target_records=10,
                      allow_shortfall=True)
    out = pool["root"] / "allowed-out"
    code, stdout, _ = _run(capsys, "mixture", "build", allowed, "--output", out)
    assert code == 0 and "shortfall 3" in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["selected"] == 7 and manifest["counts"]["shortfall"] == 3
    rows = {r["domain"]: r for r in json.loads((out / "plan.json").read_text())["domains"]}
    assert rows["news"]["shortfall"] == 3 and rows["news"]["selected"] == 2
    assert _run(capsys, "mixture", "verify", out)[0] == 0


def test_redistribute_moves_unmet_quota(pool):
    strategy = {"type": "fixed", "weights": {"news": 2, "web": 1, "code": 1}}
    cfg = mixture.load_mixture_config(_config(pool, "redis", strategy=strategy,
                                              target_records=12, redistribute=True))
    plan = mixture.plan_mixture(cfg, progress=False)
    rows = {r["domain"]: r for r in plan.rows}
    # Quotas 6/3/3; news has 2 → 4 unmet split 2:2 by the equal web/code weights; code then
    # has only 1 spare, so its unmet unit goes to web in the next round.
    assert (rows["news"]["quota"], rows["news"]["selected"], rows["news"]["shortfall"]) == \
        (6, 2, 4)
    assert rows["code"]["selected"] == 4 and rows["code"]["redistributed"] == 1
    assert rows["web"]["selected"] == 6 and rows["web"]["redistributed"] == 3
    assert plan.selected_total == 12 and plan.shortfall == 0

    plain = mixture.load_mixture_config(_config(pool, "plain", strategy=strategy,
                                                target_records=12, redistribute=False,
                                                allow_shortfall=True))
    plain_plan = mixture.plan_mixture(plain, progress=False)
    assert plain_plan.selected_total == 8 and plain_plan.shortfall == 4


def test_quality_filter_applies_after_dedup(pool):
    strategy = {"type": "fixed", "weights": {"news": 1, "web": 1}}
    cfg = mixture.load_mixture_config(_config(pool, "q", strategy=strategy, target_records=4,
                                              quality={"min_chars": 20},
                                              allow_shortfall=True))
    rows = {r["domain"]: r for r in mixture.plan_mixture(cfg, progress=False).rows}
    assert rows["news"]["available_after_dedup"] == 2 and rows["news"]["eligible"] == 0
    assert rows["news"]["selected"] == 0 and rows["news"]["shortfall"] == 2


# --------------------------------------------------------------------------- build, verify


def test_build_and_verify(pool, capsys):
    out = pool["root"] / "mix-out"
    code, stdout, _ = _run(capsys, "mixture", "build", _config(pool), "--output", out)
    assert code == 0 and "built mixture mix" in stdout
    assert sorted(tree_bytes(out)) == [
        "checksums.sha256", "data/train/part-00000.jsonl", "data/validation/part-00000.jsonl",
        "manifest.json", "near-dedup/checksums.sha256", "near-dedup/decisions.jsonl",
        "near-dedup/manifest.json", "near-dedup/origins.jsonl", "near-dedup/relations.jsonl",
        "plan.json"]
    for name in ("manifest.json", "decisions.jsonl", "relations.jsonl", "origins.jsonl",
                 "checksums.sha256"):
        assert (out / "near-dedup" / name).read_bytes() == \
            (pool["report"] / name).read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "mixture-package" and manifest["format_version"] == 1
    assert [i["package_id"] for i in manifest["inputs"]] == ["cpt-a", "cpt-b"]
    assert manifest["near_dedup_report"]["path"] == "near-dedup"
    assert manifest["counts"]["selected"] == 8 and manifest["counts"]["retained"] == 3

    train = _lines(out / "data/train/part-00000.jsonl")
    origins = [(r["origin"]["package_id"], r["origin"]["sample_id"]) for r in train]
    assert ("cpt-b", "bw0") not in origins and ("cpt-b", "bw1") not in origins
    # Stable order: input package order, then position in the package.
    a_ids = [f"w{i}" for i in range(8)] + [f"c{i}" for i in range(4)]
    positions = [(0, a_ids.index(s)) if p == "cpt-a" else (1, ["r1", "r2"].index(s))
                 for p, s in origins]
    assert positions == sorted(positions)
    assert sum(r["domain"] == "web" for r in train) == 6

    validation = _lines(out / "data/validation/part-00000.jsonl")
    by_origin = {(r["origin"]["package_id"], r["origin"]["sample_id"]): r for r in validation}
    assert set(by_origin) == {("cpt-a", "v0"), ("cpt-a", "v1"), ("cpt-b", "rv")}
    # A ref resolves to the referenced record's fields, with its own id.
    rv = by_origin[("cpt-b", "rv")]
    assert rv == {"id": "rv", "text": _text("web", 3), "domain": "web", "source": {"row": 3},
                  "origin": {"package_id": "cpt-b", "sample_id": "rv"}}

    code, stdout, _ = _run(capsys, "mixture", "verify", out)
    assert code == 0 and "no excluded sample selected" in stdout


def test_plan_and_build_collect_rarely_and_the_thresholds_come_back(pool, capsys,
                                                                     monkeypatch):
    """A 1M pool's plan holds millions of keys and sets that no collection frees: the plan and
    the build run with the bulk threshold of `near_dedup_core.collector` (where full
    collections would walk them again and again for nothing), and the caller's thresholds
    are back after either."""
    import gc

    from near_dedup_core import collector
    from near_dedup_core.mixture import build, plan

    seen: list[tuple] = []
    for module, name in ((plan, "_scan_pool"), (build, "_write_data")):
        def spy(*args, _inner=getattr(module, name), **kwargs):
            seen.append((_inner.__name__, gc.get_threshold()[0]))
            return _inner(*args, **kwargs)
        monkeypatch.setattr(module, name, spy)
    before = gc.get_threshold()
    code, _, err = _run(capsys, "mixture", "plan", _config(pool))
    assert code == 0, err
    assert gc.get_threshold() == before
    code, _, err = _run(capsys, "mixture", "build", _config(pool), "--output",
                        pool["root"] / "mix-gc")
    assert code == 0, err
    assert gc.get_threshold() == before
    young = collector.YOUNG_THRESHOLD
    assert seen == [("_scan_pool", young), ("_scan_pool", young), ("_write_data", young)]


def test_ref_keeps_its_own_domain_and_source(pool):
    cfg = mixture.load_mixture_config(_config(
        pool, "refs", strategy={"type": "fixed", "weights": {"web": 1}}, target_records=10))
    out = pool["root"] / "refs-out"
    mixture.build_mixture(cfg, out, progress=False)
    train = {r["origin"]["sample_id"]: r for r in _lines(out / "data/train/part-00000.jsonl")
             if r["origin"]["package_id"] == "cpt-b"}
    assert train["r1"] == {"id": "r1", "text": _text("code", 1), "domain": "web",
                           "source": {"row": "b-r1"},
                           "origin": {"package_id": "cpt-b", "sample_id": "r1"}}
    assert train["r2"]["text"] == _text("web", 2) and train["r2"]["source"] == {"row": 2}


def test_same_config_twice_gives_identical_package(pool, capsys):
    cfg = _config(pool, strategy={"type": "temperature", "temperature": 1.5}, target_records=7)
    one, two = pool["root"] / "one", pool["root"] / "two"
    assert _run(capsys, "mixture", "build", cfg, "--output", one)[0] == 0
    assert _run(capsys, "mixture", "build", cfg, "--output", two)[0] == 0
    assert tree_bytes(one) == tree_bytes(two)


def test_selection_depends_on_seed_not_on_file_order(tmp_path):
    rows = [{"id": f"s{i}", "text": _text("web", i), "domain": "web"} for i in range(40)]
    fwd = _make_package(tmp_path / "fwd", "cpt-x", {"train": rows})
    rev = _make_package(tmp_path / "rev", "cpt-x", {"train": rows[::-1]})

    def selected(pkg: Path, seed: int) -> set:
        cfg = mixture.MixtureConfig(name="m", kind="cpt", inputs=[str(pkg)], target_records=10,
                                    strategy={"type": "temperature", "temperature": 1.0},
                                    seed=seed)
        return mixture.plan_mixture(cfg, progress=False).selected

    assert selected(fwd, 7) == selected(rev, 7)
    assert selected(fwd, 7) != selected(fwd, 8)
    ranked = sorted(range(40), key=lambda i: hashlib.sha256(f"7:cpt-x:s{i}".encode()).digest())
    assert selected(fwd, 7) == {("cpt-x", f"s{i}") for i in ranked[:10]}


def test_build_refuses_existing_output_and_output_inside_inputs(pool, capsys):
    out = pool["root"] / "exists"
    out.mkdir()
    line = refused(["--quiet", "mixture", "build", _config(pool), "--output", out])
    assert "already exists" in line
    before = tree_bytes(pool["a"])
    inside = pool["a"] / "mix"
    line = refused(["--quiet", "mixture", "build", _config(pool), "--output", inside])
    assert "inside input package" in line
    assert tree_bytes(pool["a"]) == before


def test_failed_build_leaves_nothing(pool, capsys):
    cfg = _config(pool, target_records=100)  # shortfall, not allowed
    out = pool["root"] / "nothing"
    assert "short" in refused(["--quiet", "mixture", "build", cfg, "--output", out])
    assert not out.exists()
    assert not [p for p in pool["root"].iterdir() if p.name.startswith(".nothing")]


def test_build_refuses_an_output_inside_the_report(pool):
    before = tree_bytes(pool["report"])
    out = pool["report"] / "mix"
    line = refused(["--quiet", "mixture", "build", _config(pool), "--output", out])
    assert f"output {out} is inside report {pool['report'].resolve()}; a report is immutable" \
        in line
    assert tree_bytes(pool["report"]) == before


def test_plan_output_is_written_only_on_success(pool, capsys):
    plan_json = pool["root"] / "plans" / "plan.json"
    code, _, _ = _run(capsys, "mixture", "plan", _config(pool, target_records=100),
                      "--output", plan_json)
    assert code == 1 and not plan_json.exists()
    assert _run(capsys, "mixture", "plan", _config(pool), "--output", plan_json)[0] == 0
    plan = json.loads(plan_json.read_text())
    assert plan["format"] == "mixture-plan" and plan["totals"]["selected"] == 8
    line = refused(["--quiet", "mixture", "plan", _config(pool), "--output",
                    pool["a"] / "plan.json"])
    assert "inside input package cpt-a" in line


def test_an_existing_plan_output_is_never_replaced(pool, capsys, tmp_path):
    plan_json = pool["root"] / "plan.json"
    plan_json.write_bytes(b"someone else's plan\n")
    line = refused(["--quiet", "mixture", "plan", _config(pool), "--output", plan_json],
                   f"plan output {plan_json} already exists")
    assert line.endswith("choose a new file")
    assert plan_json.read_bytes() == b"someone else's plan\n"
    assert sorted(p.name for p in plan_json.parent.iterdir()
                  if p.name.startswith(".plan.json")) == []


def test_a_plan_written_meanwhile_by_another_run_is_not_replaced(pool, monkeypatch):
    from near_dedup_core.mixture import plan as plan_module

    plan_json = pool["root"] / "plan.json"
    made = plan_module.plan_mixture(mixture.load_mixture_config(_config(pool)), progress=False)

    def other_run_first(path, obj) -> None:  # the other run links its plan as ours is written
        plan_json.write_bytes(b"the other run's plan\n")
        write_json(path, obj)

    monkeypatch.setattr(plan_module, "write_json", other_run_first)
    with pytest.raises(NearDedupError, match="already exists"):
        made.write(plan_json)
    assert plan_json.read_bytes() == b"the other run's plan\n"
    assert [p.name for p in plan_json.parent.iterdir() if ".tmp-" in p.name] == []


@pytest.mark.parametrize("url", ["s3://bucket/plans/plan.json", "gs://bucket/plan.json"])
def test_a_plan_output_on_object_storage_is_refused_in_one_line(pool, url, tmp_path,
                                                                 monkeypatch):
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    line = refused(["--quiet", "mixture", "plan", _config(pool), "--output", url],
                   f"plan output {url}: mixture plan --output writes a local file only")
    assert "mixture build --output" in line
    assert list(here.iterdir()) == []  # no local ./s3:/… folder


# --------------------------------------------------------------------------- verify failures


@pytest.fixture
def built(pool, capsys) -> Path:
    out = pool["root"] / "built"
    assert _run(capsys, "mixture", "build", _config(pool), "--output", out)[0] == 0
    return out


@pytest.mark.parametrize("rel", ["data/train/part-00000.jsonl",
                                 "data/validation/part-00000.jsonl", "plan.json",
                                 "manifest.json", "near-dedup/decisions.jsonl",
                                 "near-dedup/manifest.json", "near-dedup/origins.jsonl"])
def test_verify_names_a_tampered_file(built, capsys, rel):
    path = built / rel
    path.write_bytes(path.read_bytes() + b"\n")
    line = refused(["--quiet", "mixture", "verify", built])
    assert rel in line and "does not match" in line


def _reseal(built: Path, change_manifest=None, change_plan=None) -> None:
    """Record the data files' new sha256 in manifest.json, apply further edits to the manifest
    and plan, and rewrite checksums.sha256: tampering as a careful attacker would."""
    manifest = json.loads((built / "manifest.json").read_text())
    for f in manifest["files"]:
        f["sha256"] = hashlib.sha256((built / f["path"]).read_bytes()).hexdigest()
    if change_manifest is not None:
        change_manifest(manifest)
    write_json(built / "manifest.json", manifest)
    if change_plan is not None:
        plan = json.loads((built / "plan.json").read_text())
        change_plan(plan)
        write_json(built / "plan.json", plan)
    (built / "checksums.sha256").unlink()
    write_checksums(built)


def test_verify_catches_an_excluded_sample_even_with_fresh_checksums(built, pool, capsys):
    train = built / "data/train/part-00000.jsonl"
    lines = train.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    lines[0] = json_line(first | {"origin": {"package_id": "cpt-b", "sample_id": "bw0"}})
    train.write_bytes(b"".join(lines))
    _reseal(built)
    line = refused(["--quiet", "mixture", "verify", built])
    assert "data/train/part-00000.jsonl:1" in line
    assert "cpt-b/bw0 was excluded by the near-dedup report" in line


def test_verify_catches_an_incomplete_retained_split(built, capsys):
    val = built / "data/validation/part-00000.jsonl"
    val.write_bytes(b"".join(val.read_bytes().splitlines(keepends=True)[:-1]))

    def manifest(m: dict) -> None:
        for f in m["files"]:
            if f["split"] == "validation":
                f["records"] -= 1
        m["counts"]["retained"] -= 1
        m["counts"]["by_split"]["validation"] -= 1

    def plan(p: dict) -> None:
        p["retained_records"]["validation"] -= 1

    _reseal(built, manifest, plan)
    line = refused(["--quiet", "mixture", "verify", built])
    assert "retained split validation is incomplete" in line


def test_verify_catches_inputs_that_differ_from_the_report(built, capsys):
    manifest = json.loads((built / "manifest.json").read_text())
    manifest["inputs"] = manifest["inputs"][:1]
    write_json(built / "manifest.json", manifest)
    (built / "checksums.sha256").unlink()
    write_checksums(built)
    line = refused(["--quiet", "mixture", "verify", built])
    assert "differ from the embedded report's inputs" in line


def test_verify_needs_neither_inputs_nor_sqlite(built, pool, capsys, monkeypatch):
    def no_sqlite(*args, **kwargs):
        raise AssertionError("verify opened SQLite")

    monkeypatch.setattr(sqlite3, "connect", no_sqlite)
    shutil.rmtree(pool["a"])
    shutil.rmtree(pool["b"])
    shutil.rmtree(pool["report"])
    assert _run(capsys, "mixture", "verify", built)[0] == 0


# --------------------------------------------------------------------------- no report


def test_without_report_plain_mixture(pool, capsys):
    cfg = _config(pool, "plain", near_dedup_report=None)
    out = pool["root"] / "plain-out"
    code, stdout, _ = _run(capsys, "mixture", "build", cfg, "--output", out)
    assert code == 0
    assert not (out / "near-dedup").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["near_dedup_report"] is None and manifest["retained_splits"] == ["validation"]
    plan = json.loads((out / "plan.json").read_text())
    web = next(r for r in plan["domains"] if r["domain"] == "web")
    assert web["available_before_dedup"] == web["available_after_dedup"] == 12
    code, stdout, _ = _run(capsys, "mixture", "verify", out)
    assert code == 0 and "plain mixture" in stdout

    # Configured retained splits: validation is then sampled like train.
    cfg2 = _config(pool, "plain2", near_dedup_report=None, retained_splits=[],
                   target_records=10)
    plan2 = mixture.plan_mixture(mixture.load_mixture_config(cfg2), progress=False)
    web2 = next(r for r in plan2.rows if r["domain"] == "web")
    assert web2["available_before_dedup"] == 15 and plan2.retained_records == {}


def test_relative_paths_are_relative_to_the_working_directory(pool, capsys, monkeypatch):
    monkeypatch.chdir(pool["root"])
    cfg = _config(pool, "rel", inputs=["packages/cpt-a", "packages/cpt-b"],
                  near_dedup_report="report")
    assert _run(capsys, "mixture", "build", cfg, "--output", "rel-out")[0] == 0
    manifest = json.loads((pool["root"] / "rel-out/manifest.json").read_text())
    assert [i["path"] for i in manifest["inputs"]] == ["packages/cpt-a", "packages/cpt-b"]


def test_missing_group_field_names_the_line(tmp_path, capsys):
    pkg = _make_package(tmp_path, "cpt-n", {"train": [
        {"id": "a", "text": _text("x", 1), "domain": "web"}, {"id": "b", "text": "y"}]})
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps({"name": "m", "kind": "cpt", "inputs": [str(pkg)],
                               "target_records": 1,
                               "strategy": {"type": "temperature", "temperature": 1}}))
    line = refused(["--quiet", "mixture", "plan", cfg])
    assert "package cpt-n, data/train/part-00000.jsonl:2" in line
    assert "group_by field 'domain'" in line


def test_kind_mismatch_refused(pool, capsys):
    line = refused(["--quiet", "mixture", "plan", _config(pool, "sft", kind="sft")])
    assert "kind cpt but the mixture sft is sft" in line


def test_weights_math_helpers():
    assert math.isclose(sum(mixture.strategy_weights(
        mixture.MixtureConfig(name="m", kind="cpt", inputs=["x"], target_records=1,
                              strategy={"type": "temperature", "temperature": 3}),
        {"a": 8, "b": 1, "c": 0}).values()), 1.0)


def test_verify_rejects_a_malformed_manifest_in_one_line(built, capsys):
    manifest = json.loads((built / "manifest.json").read_text())
    manifest["near_dedup_report"]["path"] = "../elsewhere"
    write_json(built / "manifest.json", manifest)
    (built / "checksums.sha256").unlink()
    write_checksums(built)
    line = refused(["--quiet", "mixture", "verify", built])
    assert "manifest.json: near_dedup_report.path" in line


def test_report_path_that_is_not_a_report(pool, capsys):
    cfg = _config(pool, "nr", near_dedup_report=str(pool["a"] / "data"))
    assert "not a near-dedup report" in refused(["--quiet", "mixture", "plan", cfg])
