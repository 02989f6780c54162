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


def _help(*path: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        cli.main([*path, "--help"])
    assert stop.value.code == 0
    return out.getvalue()


def _entries(text: str, section: str, indent: int) -> dict[str, bool]:
    """The entries of a help section (its options, its commands), each with whether it has a
    description: on the entry's line after two spaces, or on the deeper lines below it."""
    lines = text.split("\n")
    if f"{section}:" not in lines:
        return {}
    entries: dict[str, bool] = {}
    name = None
    for line in lines[lines.index(f"{section}:") + 1:]:
        if not line.strip():
            break
        if line.startswith(" " * indent) and not line[indent].isspace():
            name, _, description = line[indent:].partition("  ")
            entries[name.strip()] = bool(description.strip())
        elif name is not None and line.startswith(" " * (indent + 2)):
            entries[name.strip()] = True
    return entries


def _commands(*path: str):
    """Every command path below ``path`` with its help text, depth first."""
    for name in _entries(_help(*path), "commands", 4):
        yield (*path, name), _help(*path, name)
        yield from _commands(*path, name)


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
    commands = dict(_commands())
    assert {("index",), ("index", "check"), ("scan",), ("report", "verify"),
            ("snapshot", "create"), ("snapshot", "validate"), ("mixture", "plan"),
            ("mixture", "build"), ("mixture", "verify")} <= set(commands)
    for path, text in [((), _help()), *commands.items()]:
        usage, _, rest = text.partition("\n\n")
        assert usage.startswith("usage: near-dedup"), path
        assert rest.strip() and not rest.startswith("options:"), path  # a description
        options = _entries(text, "options", 2)
        assert "-h, --help" in options, path
        assert all(options.values()), (path, options)
        assert all(_entries(text, "commands", 4).values()), path


def _leaf_commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    """The commands a parser chooses between, as typed: a parser whose sub-commands are
    optional (`index`) is a command of its own as well."""
    names = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if not action.required and prefix:
                names.append(prefix.strip())
            for name, child in action.choices.items():
                names += _leaf_commands(child, f"{prefix}{name} ")
            return names
    return [prefix.strip()]


def test_every_command_is_a_row_of_the_command_table_and_each_row_a_command():
    from near_dedup_core.commands import COMMANDS, build_parser, chosen

    parser = build_parser()
    leaves = _leaf_commands(parser)
    assert sorted(leaves) == sorted(command.name for command in COMMANDS)
    for name in leaves:  # each parse names its own row
        extra = {"report verify": ["r"], "report explain": ["r", "p", "s"],
                 "report diff": ["a", "b"], "report html": ["r", "--output", "o"],
                 "snapshot validate": ["p"], "mixture plan": ["c"], "mixture build":
                 ["c", "--output", "o"], "mixture verify": ["m"],
                 "scan": ["--inputs", "p", "--output", "o"],
                 "contamination": ["--evals", "e", "--inputs", "p", "--output", "o"],
                 "takedown add": ["--request", "r", "--reason", "x", "--text", "f"],
                 "takedown lift": ["r", "--reason", "x"], "takedown show": ["r"],
                 "takedown check": ["m"],
                 "snapshot create": ["--kind", "cpt", "--package-id", "x", "--split",
                                     "train=f", "--output", "o"]}.get(name, [])
        assert chosen(parser.parse_args([*name.split(), *extra])).name == name
