"""CLI-wide behaviour: paths the operating system refuses are one line and exit 1."""

from __future__ import annotations

from conftest import SAMPLES, run_cli

CPT_V1 = SAMPLES / "cpt" / "2026-11-25" / "cpt-v1"


def test_index_path_below_a_regular_file_is_one_line(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    code, out, err = run_cli("--quiet", "--index", blocker / "idx.sqlite", "index",
                             "--inputs", CPT_V1)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("near-dedup: error: ") and str(blocker) in err
    assert blocker.read_text(encoding="utf-8") == "x"


def test_scan_output_below_a_regular_file_is_one_line(tmp_path):
    idx = tmp_path / "idx.sqlite"
    assert run_cli("--quiet", "--index", idx, "index", "--inputs", CPT_V1)[0] == 0
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    code, out, err = run_cli("--quiet", "--index", idx, "scan", "--inputs", CPT_V1,
                             "--output", blocker / "report")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and str(blocker) in err
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("idx.sqlite")) \
        == ["not-a-folder"]
