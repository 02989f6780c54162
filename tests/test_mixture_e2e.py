"""End to end through the CLI on the bundled samples: index v1, index v2, scan v1+v2, then
mixture plan/build/verify on the frozen report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, refused, run_cli, tree_bytes

CONFIG = REPO / "config" / "near-dedup.json"
POOLS = {
    "cpt": [SAMPLES / "cpt/2026-11-25/cpt-v1", SAMPLES / "cpt/2026-11-26/cpt-v2"],
    "sft": [SAMPLES / "sft/sft-v1", SAMPLES / "sft/sft-v2"],
}


def _ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out


@pytest.fixture(scope="module", params=["cpt", "sft"])
def scanned(request, tmp_path_factory) -> dict:
    """A fresh index with v1 then v2 appended, and the frozen report of the pool v1 + v2."""
    kind = request.param
    root = tmp_path_factory.mktemp(f"e2e-{kind}")
    index = root / "index" / f"{kind}-near.sqlite"
    index.parent.mkdir()
    v1, v2 = POOLS[kind]
    # sft-v2 refs samples of sft-v1 (lineage.depends_on), so its batch must also name v1.
    for batch in ([v1], [v2] if kind == "cpt" else [v1, v2]):
        _ok("--index", index, "--config", CONFIG, "index", "--inputs", *batch, "--workers", 1)
    report = root / "report"
    _ok("--index", index, "--config", CONFIG, "scan", "--inputs", v1, v2, "--output", report,
        "--workers", 1)
    decisions = [json.loads(line) for line in
                 (report / "decisions.jsonl").read_text(encoding="utf-8").splitlines()]
    return {"kind": kind, "root": root, "index": index, "report": report, "inputs": [v1, v2],
            "decisions": decisions}


def _config(s: dict, name: str, **overrides) -> Path:
    cfg = {"name": name, "kind": s["kind"], "inputs": [str(p) for p in s["inputs"]],
           "target_records": 10, "group_by": "domain",
           "strategy": {"type": "temperature", "temperature": 2.0},
           "quality": {"min_chars": 0}, "allow_shortfall": False, "redistribute": True,
           "seed": 7, "near_dedup_report": str(s["report"])}
    cfg.update(overrides)
    path = s["root"] / f"{name}.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def _plan_rows(s: dict, cfg: Path) -> dict[str, dict]:
    out = s["root"] / f"{cfg.stem}-plan.json"
    _ok("mixture", "plan", cfg, "--output", out)
    return {r["domain"]: r for r in json.loads(out.read_text())["domains"]}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_build_and_verify_through_the_cli(scanned):
    s = scanned
    assert any(d["decision"] == "exclude" for d in s["decisions"]), "samples need duplicates"
    cfg = _config(s, "mix")
    out = s["root"] / "mixtures" / "mix"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-m", "near_dedup_core", "mixture", "build", str(cfg),
                          "--output", str(out)], capture_output=True, text=True, env=env,
                         cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert "built mixture mix" in run.stdout

    report_files = sorted(p.name for p in s["report"].iterdir())
    for name in report_files:
        assert (out / "near-dedup" / name).read_bytes() == (s["report"] / name).read_bytes()
    excluded = {(d["package_id"], d["sample_id"]) for d in s["decisions"]
                if d["decision"] == "exclude"}
    retained = {(d["package_id"], d["sample_id"]) for d in s["decisions"]
                if d["split"] == "validation"}
    train, validation = set(), set()
    for f in json.loads((out / "manifest.json").read_text())["files"]:
        keys = {(r["origin"]["package_id"], r["origin"]["sample_id"])
                for r in _lines(out / f["path"])}
        (validation if f["split"] == "validation" else train).update(keys)
    assert train and not train & excluded
    assert validation == retained

    # Verify works from the mixture alone: no index, no report folder.
    shutil.rmtree(s["index"].parent)
    s["index"].parent.mkdir()
    run = subprocess.run([sys.executable, "-m", "near_dedup_core", "mixture", "verify",
                          str(out)], capture_output=True, text=True, env=env, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert "no excluded sample selected" in run.stdout


def test_same_config_twice_is_byte_identical(scanned):
    cfg = _config(scanned, "twice")
    one, two = scanned["root"] / "twice-1", scanned["root"] / "twice-2"
    _ok("mixture", "build", cfg, "--output", one)
    _ok("mixture", "build", cfg, "--output", two)
    assert tree_bytes(one) == tree_bytes(two)


@pytest.mark.parametrize("target", ["data", "report"])
def test_verify_names_a_tampered_file(scanned, target):
    out = scanned["root"] / f"tamper-{target}"
    _ok("mixture", "build", _config(scanned, f"tamper-{target}"), "--output", out)
    manifest = json.loads((out / "manifest.json").read_text())
    rel = manifest["files"][0]["path"] if target == "data" else "near-dedup/decisions.jsonl"
    data = (out / rel).read_bytes()
    (out / rel).write_bytes(data.replace(b"}", b" }", 1))
    line = refused(["--quiet", "mixture", "verify", out])
    assert rel in line and "does not match" in line


def test_stale_report_is_refused(scanned, tmp_path):
    v1, v2 = scanned["inputs"]
    changed = tmp_path / v2.name
    shutil.copytree(v2, changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["created_at"] = "2026-12-01T00:00:00Z"
    (changed / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    cfg = _config(scanned, "stale", inputs=[str(v1), str(changed)])
    out = tmp_path / "stale-out"
    line = refused(["--quiet", "mixture", "build", cfg, "--output", out])
    assert "manifest sha256" in line and "stale" in line and "rescan" in line
    assert not out.exists()
    line = refused(["--quiet", "mixture", "plan",
                    _config(scanned, "stale-v1", inputs=[str(v1)])])
    assert "not among the mixture inputs" in line and "rescan" in line


@pytest.mark.parametrize("learned", ["doremi", "regmix"])
def test_learned_weights_with_report_are_refused(scanned, learned):
    rows = _plan_rows(scanned, _config(scanned, f"{learned}-probe"))
    cfg = _config(scanned, learned,
                  strategy={"type": learned, "weights": {d: 1 for d in rows}})
    line = refused(["--quiet", "mixture", "build", cfg,
                    "--output", scanned["root"] / f"{learned}-out"])
    assert f"strategy {learned} cannot be combined with near_dedup_report" in line
    assert "undeduplicated pool" in line
    assert not (scanned["root"] / f"{learned}-out").exists()


def test_without_report_is_a_plain_mixture(scanned):
    s = scanned
    cfg = _config(s, "plain", near_dedup_report=None)
    rows = _plan_rows(s, cfg)
    assert all(r["available_before_dedup"] == r["available_after_dedup"] for r in rows.values())
    deduped = _plan_rows(s, _config(s, "deduped"))
    assert sum(r["available_after_dedup"] for r in deduped.values()) < \
        sum(r["available_after_dedup"] for r in rows.values())
    out = s["root"] / "plain-out"
    _ok("mixture", "build", cfg, "--output", out)
    assert not (out / "near-dedup").exists()
    assert json.loads((out / "manifest.json").read_text())["near_dedup_report"] is None
    assert "plain mixture" in _ok("mixture", "verify", out)


def test_shortfall_with_and_without_allow_shortfall(scanned):
    s = scanned
    rows = _plan_rows(s, _config(s, "probe"))
    available = sum(r["available_after_dedup"] for r in rows.values())
    too_many = _config(s, "short", target_records=available + 5)
    line = refused(["--quiet", "mixture", "plan", too_many])
    assert "5 of" in line and "records short" in line and "allow_shortfall" in line
    out = s["root"] / "short-out"
    _ok("mixture", "build", _config(s, "short-ok", target_records=available + 5,
                                     allow_shortfall=True), "--output", out)
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["shortfall"] == 5 and counts["selected"] == available
    _ok("mixture", "verify", out)


def test_redistribute_moves_quota(scanned):
    s = scanned
    rows = _plan_rows(s, _config(s, "probe-r"))
    assert len(rows) >= 2, "samples need at least two domains"
    small = min(rows, key=lambda d: (rows[d]["available_after_dedup"], d))
    total = sum(r["available_after_dedup"] for r in rows.values())
    weights = {d: (len(rows) * 4.0 if d == small else 1.0) for d in rows}
    target = min(total, 4 * rows[small]["available_after_dedup"] + len(rows))
    with_r = _plan_rows(s, _config(s, "redis", strategy={"type": "fixed", "weights": weights},
                                   target_records=target, redistribute=True))
    assert with_r[small]["shortfall"] > 0
    assert sum(r["selected"] for r in with_r.values()) == target
    assert sum(r["redistributed"] for r in with_r.values()) == with_r[small]["shortfall"]
    line = refused(["--quiet", "mixture", "plan",
                    _config(s, "no-redis", target_records=target,
                            strategy={"type": "fixed", "weights": weights}, redistribute=False)])
    assert "redistribute is off" in line


def test_fixed_and_temperature_weights_match_their_formulas(scanned):
    s = scanned
    probe = _plan_rows(s, _config(s, "probe-w"))
    domains = sorted(probe)
    raw = {d: float(i + 1) for i, d in enumerate(domains)}
    target = 5
    fixed = _plan_rows(s, _config(s, "fixed", strategy={"type": "fixed", "weights": raw},
                                  target_records=target, allow_shortfall=True))
    for d in domains:
        assert fixed[d]["weight"] == pytest.approx(raw[d] / sum(raw.values()))
        assert abs(fixed[d]["quota"] - target * raw[d] / sum(raw.values())) < 1
    assert sum(r["quota"] for r in fixed.values()) == target

    temp = _plan_rows(s, _config(s, "temp", strategy={"type": "temperature", "temperature": 3.0},
                                 target_records=target, allow_shortfall=True))
    n = {d: temp[d]["available_after_dedup"] for d in domains}
    z = sum(v ** (1 / 3) for v in n.values())
    for d in domains:
        assert temp[d]["weight"] == pytest.approx(n[d] ** (1 / 3) / z)
    assert sum(r["quota"] for r in temp.values()) == target
