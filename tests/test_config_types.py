"""Config files are read with strict JSON types: a string, boolean or fraction where a number
or an integer belongs is refused in one line, never coerced; an integer is a valid float."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import refused, run_cli

from near_dedup_core.config import NearDedupConfig, load_config
from near_dedup_core.mixture import load_mixture_config


def _write(tmp_path: Path, name: str, obj: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


@pytest.mark.parametrize("change, field, expected", [
    ({"threshold": "0.9"}, "threshold", "valid number"),
    ({"threshold": True}, "threshold", "valid number"),
    ({"num_perm": "128"}, "num_perm", "valid integer"),
    ({"num_perm": 128.0}, "num_perm", "valid integer"),
    ({"num_perm": True}, "num_perm", "valid integer"),
    ({"seed": "1"}, "seed", "valid integer"),
    ({"retained_splits": "validation"}, "retained_splits", "valid list"),
    ({"extra_units": [{"tokens": ["kg"], "domains": "web"}]}, "extra_units.0.domains",
     "valid list"),
], ids=["threshold-string", "threshold-bool", "num_perm-string", "num_perm-float",
        "num_perm-bool", "seed-string", "splits-string", "domains-string"])
def test_near_dedup_config_types_are_strict(tmp_path, change, field, expected):
    path = _write(tmp_path, "near-dedup.json", change)
    code, out, err = run_cli("--config", path, "--index", tmp_path / "i.sqlite", "index",
                             "--inputs", tmp_path / "missing")
    assert code == 1 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"near-dedup: error: config {path}: {field}: ") and expected in err
    assert not (tmp_path / "i.sqlite").exists()


def test_an_integer_is_a_valid_float(tmp_path):
    config = load_config(_write(tmp_path, "c.json", {"threshold": 1}))
    assert config.threshold == 1.0 and isinstance(config.threshold, float)
    assert config.fingerprint() == NearDedupConfig(threshold=1.0).fingerprint()


MIXTURE = {"name": "m", "kind": "cpt", "inputs": ["x"], "target_records": 10,
           "strategy": {"type": "temperature", "temperature": 2}}


@pytest.mark.parametrize("change, field", [
    ({"target_records": "10"}, "target_records"),
    ({"target_records": 10.0}, "target_records"),
    ({"seed": True}, "seed"),
    ({"allow_shortfall": "false"}, "allow_shortfall"),
    ({"redistribute": 1}, "redistribute"),
    ({"strategy": {"type": "temperature", "temperature": "2"}}, "strategy.temperature"),
    ({"strategy": {"type": "fixed", "weights": {"web": "1"}}}, "strategy.fixed.weights.web"),
    ({"quality": {"min_chars": "0"}}, "quality.min_chars"),
], ids=["target-string", "target-float", "seed-bool", "shortfall-string",
        "redistribute-int", "temperature-string", "weight-string", "min_chars-string"])
def test_mixture_config_types_are_strict(tmp_path, change, field):
    path = _write(tmp_path, "mix.json", MIXTURE | change)
    code, out, err = run_cli("--quiet", "mixture", "plan", path)
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"near-dedup: error: mixture config {path}: ") and field in err, err


def test_mixture_integers_are_valid_floats(tmp_path):
    cfg = load_mixture_config(_write(tmp_path, "mix.json", MIXTURE | {
        "strategy": {"type": "fixed", "weights": {"web": 3, "code": 1}}}))
    assert cfg.strategy.weights == {"web": 3.0, "code": 1.0}


@pytest.mark.parametrize("bands, rows, relation", [(10, 8, "is less than"), (16, 9, "exceeds")])
def test_banding_must_use_every_permutation_once(tmp_path, bands, rows, relation):
    """10 × 8 bands over 128 permutations would leave 48 signature values that no band reads."""
    path = _write(tmp_path, "near-dedup.json", {"num_perm": 128, "bands": bands, "rows": rows})
    line = refused(["--config", path, "--index", tmp_path / "i.sqlite", "index",
                    "--inputs", tmp_path / "missing"])
    assert line == (f"near-dedup: error: config {path}: bands × rows = {bands} × {rows} = "
                    f"{bands * rows} {relation} num_perm = 128; they must be equal")
    assert not (tmp_path / "i.sqlite").exists()
