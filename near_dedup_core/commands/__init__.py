"""The command line's commands, in one table (`COMMANDS`): each command's name as typed, the
function that runs it, its process set-up and its folder arguments. Each group of commands
keeps its parser and its functions in a module of this package (`index`, `scan`, `report`,
`snapshot`, `mixture`, `takedown`); `cli` parses, looks the command up here and maps failures
to exit codes. A new command is a parser in its group's module and a row here."""

from __future__ import annotations

import argparse

from near_dedup_core import __version__
from near_dedup_core.commands import index, mixture, report, scan, snapshot, takedown
from near_dedup_core.commands.options import CommandParser, Parser, global_options
from near_dedup_core.commands.table import Command, FolderArg

__all__ = ["COMMANDS", "Command", "FolderArg", "build_parser", "chosen"]

DESCRIPTION = """\
Find near-duplicate training samples across released snapshot packages and build mixtures
without them. `index` adds packages to a persistent index (a SQLite file, a PostgreSQL
database or Iceberg tables); `scan` freezes an auditable near-duplicate report of an input
pool against that index; `report explain` and `report diff` audit reports; `contamination`
finds evaluation items inside training samples; `mixture build` builds a mixture on the
frozen reports, which `report verify` and `mixture verify` check later without the index.
`index find` says where a text went (every release, package and mixture that held it or a
near copy); `takedown` records texts that every later scan excludes with their near copies."""

EPILOG = """\
global options (--index, --config, --quiet) go before or after the command:
  near-dedup --index data/indexes/cpt-near.sqlite --config config/near-dedup.json \\
    index --inputs samples/cpt/2026-11-25/cpt-v1
  near-dedup scan --index data/indexes/cpt-near.sqlite --inputs PACKAGE... --output DIR

exit codes:
  0  success
  1  invalid input, usage or state: one line on stderr naming the package, file and line;
     nothing is written
  2  a configured limit was exceeded (max_chars, max_candidates, max_pool_records)

`near-dedup COMMAND --help` describes each command."""


_PACKAGES = (FolderArg("inputs", ("package",), "package"),)
_REPORT = FolderArg("report", ("report", "contamination"), "report")

#: Every command, in the order of ``near-dedup --help``.
COMMANDS: tuple[Command, ...] = (
    Command("index", index.append, profile="index", folders=_PACKAGES),
    Command("index check", index.action),
    Command("index compact", index.action),
    Command("index expire", index.action),
    Command("index find", index.find, profile="index find"),
    Command("scan", scan.scan, profile="scan", folders=_PACKAGES),
    Command("contamination", scan.contamination, profile="contamination",
            folders=(FolderArg("evals", ("package",), "package"), *_PACKAGES)),
    Command("report verify", report.verify, profile="report", folders=(_REPORT,)),
    Command("report explain", report.explain_or_diff, profile="report", folders=(_REPORT,)),
    Command("report diff", report.explain_or_diff, profile="report",
            folders=(FolderArg("old_report", _REPORT.kinds, "report"),
                     FolderArg("new_report", _REPORT.kinds, "report"))),
    # --against given a contamination report: its own line says to pass it as --contamination
    Command("report html", report.html, profile="report",
            folders=(FolderArg("report", ("report",), "report"),
                     FolderArg("against", ("report", "contamination"), "--against"),
                     FolderArg("contamination", ("contamination",), "--contamination"))),
    Command("snapshot create", snapshot.create),
    Command("snapshot validate", snapshot.validate,
            folders=(FolderArg("packages", ("package",), "package"),)),
    Command("mixture plan", mixture.plan, profile="mixture"),
    Command("mixture build", mixture.build, profile="mixture"),
    Command("mixture verify", mixture.verify, profile="mixture",
            folders=(FolderArg("mixture", ("mixture",), "mixture"),)),
    Command("takedown add", takedown.add),
    Command("takedown lift", takedown.lift),
    Command("takedown list", takedown.list_all),
    Command("takedown show", takedown.show),
    Command("takedown check", takedown.check,
            folders=(FolderArg("mixtures", ("mixture",), "mixture"),)),
)

_BY_NAME = {command.name: command for command in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """The program's parser: the global options, then each group's commands; the command
    a parse chooses is its ``command_name`` (`chosen`)."""
    p = Parser(prog="near-dedup", description=DESCRIPTION, epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter,
               parents=[global_options(after_command=False)])
    p.add_argument("--version", action="version", version=f"near-dedup {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=CommandParser,
                           title="commands", metavar="COMMAND")
    for group in (index, scan, report, snapshot, mixture, takedown):
        group.add_parsers(sub)
    return p


def chosen(args: argparse.Namespace) -> Command:
    """The command a parse of `build_parser` chose."""
    return _BY_NAME[args.command_name]
