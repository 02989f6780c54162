"""The command line follows a user's habits: the global options (--index, --config, --quiet)
go before or after the command, and `index check` is a command of its own."""

from __future__ import annotations

import contextlib
import io

import pytest
from helpers import REPO, SAMPLES, run_cli, tree_bytes

from near_dedup_core import cli

V1 = SAMPLES / "cpt" / "2026-11-25" / "cpt-v1"
V2 = SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"
CONFIG = REPO / "config" / "near-dedup.json"


def test_global_options_after_the_command_give_the_same_index_and_report(tmp_path):
    before, after = tmp_path / "before.sqlite", tmp_path / "after.sqlite"
    for day in (V1, V2):
        assert run_cli("--quiet", "--index", before, "--config", CONFIG, "index",
                       "--inputs", day)[::2] == (0, "")
        assert run_cli("index", "--index", after, "--inputs", day, "--config", CONFIG,
                       "--quiet")[::2] == (0, "")
    assert run_cli("--quiet", "--index", before, "--config", CONFIG, "scan", "--inputs", V2,
                   "--output", tmp_path / "r-before", "--workers", 1)[::2] == (0, "")
    code, out, err = run_cli("scan", "--index", after, "--inputs", V2, "--output",
                             tmp_path / "r-after", "--quiet", "--config", CONFIG,
                             "--workers", 1)
    assert (code, err) == (0, "") and out.startswith(f"report {tmp_path / 'r-after'}:")
    assert tree_bytes(tmp_path / "r-after") == tree_bytes(tmp_path / "r-before")

    for argv in (["--index", after, "index", "check"], ["index", "check", "--index", after]):
        code, out, err = run_cli(*argv)
        assert (code, err) == (0, "") and out.startswith(f"index {after}: OK"), argv


def test_an_option_after_the_command_wins_over_the_one_before(tmp_path):
    index = tmp_path / "i.sqlite"
    assert run_cli("--quiet", "--index", index, "index", "--inputs", V1)[0] == 0
    code, _, err = run_cli("--index", tmp_path / "elsewhere.sqlite", "scan", "--index", index,
                           "--quiet", "--inputs", V1, "--output", tmp_path / "r",
                           "--workers", 1)
    assert (code, err) == (0, "")
    assert not (tmp_path / "elsewhere.sqlite").exists()


def test_a_missing_index_says_where_it_goes_in_one_line(tmp_path):
    code, out, err = run_cli("index", "--inputs", V1)
    assert (code, out) == (1, "")
    assert err == ("near-dedup: error: usage: index needs --index PATH|URL (before or after "
                   "the command)\n")
    code, _, err = run_cli("index", "--index", tmp_path / "i.sqlite", "verify")
    assert code == 1 and err.count("\n") == 1
    assert "invalid choice: 'verify' (choose from 'check', 'compact', 'expire', 'find')" in err and "action" not in err


def test_index_check_reads_as_a_command_in_the_help():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["index", "--help"])
    text = out.getvalue()
    assert "near-dedup index check|compact|expire [global options]" in text
    commands = text.split("commands:", 1)[1]
    assert all(f"    {action} " in commands for action in ("check", "compact", "expire"))
    assert "{check" not in text
    assert "--index PATH|URL" in text  # the global options are listed with the command
