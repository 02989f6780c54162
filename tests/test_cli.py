"""CLI-wide behaviour: help, and paths the operating system refuses are one line and exit 1."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from helpers import SAMPLES, run_cli

from near_dedup_core import cli

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


def _subparsers(parser: argparse.ArgumentParser):
    """Every (command path, parser) below ``parser``, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for path, deeper in _subparsers(sub):
                    yield f"{name} {path}", deeper


def test_help_describes_the_tool_exit_codes_and_where_global_options_go():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    text = out.getvalue()
    assert "Find near-duplicate training samples" in text
    assert "global options (--index, --config, --quiet) go before or after the command" in text
    for line in ("0  success", "1  invalid input, usage or state", "2  a configured limit"):
        assert line in text
    assert "argument parsing" not in text  # not the module's developer docstring


def test_every_command_and_option_has_help():
    parser = cli.build_parser()
    commands = dict(_subparsers(parser))
    assert {"index", "scan", "report verify", "snapshot create", "snapshot validate",
            "mixture plan", "mixture build", "mixture verify"} <= set(commands)
    for path, sub in [("", parser), *commands.items()]:
        assert sub.description, path
        for action in sub._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, (path, action.dest)
    for path in ("index", "snapshot create", "mixture plan"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            cli.main([*path.split(), "--help"])
        assert commands[path].description.split()[0] in out.getvalue()
