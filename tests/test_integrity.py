"""An index or a report that was damaged or replaced is refused in one line, exit 1, with
nothing written: flipped bytes inside a stored text or an Iceberg data file, a foreign or
empty ``catalog.db``, commit pointers that disagree, a malformed
``NEAR_DEDUP_ICEBERG_BUCKETS``, a report whose inputs were redirected (docs/tamper.md,
docs/iceberg.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SAMPLES, refused, run_cli

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

CPT = SAMPLES / "cpt"
V1 = CPT / "2026-11-25" / "cpt-v1"
V2 = CPT / "2026-11-26" / "cpt-v2"


def ice(folder: Path) -> str:
    return f"iceberg://{folder.resolve()}"


@pytest.mark.parametrize("value", ["0", "-3", "many", "65537"])
def test_a_malformed_bucket_count_is_one_line_and_writes_nothing(tmp_path, monkeypatch, value):
    monkeypatch.setenv("NEAR_DEDUP_ICEBERG_BUCKETS", value)
    line = refused(["--index", ice(tmp_path / "ice"), "index", "--inputs", V1],
                   "NEAR_DEDUP_ICEBERG_BUCKETS", "from 1 to 65,536")
    assert "Warning" not in line
    assert not (tmp_path / "ice").exists()


def test_a_bucket_count_in_range_is_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("NEAR_DEDUP_ICEBERG_BUCKETS", "3")
    code, _, err = run_cli("--quiet", "--index", ice(tmp_path / "ice"), "index", "--inputs", V1)
    assert (code, err) == (0, "")
    code, out, err = run_cli("--index", ice(tmp_path / "ice"), "index", "check")
    assert code == 0, err
