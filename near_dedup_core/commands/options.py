"""The parsers of the command line and the option types its commands share: options go by
their full names only, usage errors are one line (exit 1), and the global options (--index,
--config, --quiet) go before or after the command's name."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from near_dedup_core.errors import NearDedupError
from near_dedup_core.workers import EXECUTORS

if TYPE_CHECKING:
    from near_dedup_core.index_store import Index
    from near_dedup_core.storage import Location

#: What ``ArgumentParser.add_subparsers`` returns, to which each group of commands adds its
#: parsers (``add_parser``); argparse names its class privately.
Subcommands = Any


class Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 1, takes options only
    by their full names (``--input`` is not ``--inputs``), and names an unknown option
    first: ``--ouptut`` is reported as unknown, not as a missing ``--output``."""

    def __init__(self, **kwargs) -> None:
        #: every option string of this parser, its parents' included
        self.option_names: set[str] = set()
        for parent in kwargs.get("parents", ()):
            self.option_names |= getattr(parent, "option_names", set())
        self._given: list[str] = []
        super().__init__(allow_abbrev=False, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        self.option_names.update(action.option_strings)
        return action

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        unknown = self._unknown_option()
        if unknown is not None and not message.startswith("unrecognized"):
            close = difflib.get_close_matches(unknown, sorted(self.option_names), n=1)
            message = f"unrecognized argument: {unknown}" + \
                (f" (did you mean {close[0]}?)" if close else "")
        raise NearDedupError(f"usage: {message} (see near-dedup --help)")

    def _unknown_option(self) -> str | None:
        """The first option this parser was given that it does not know, if any."""
        for token in self._given:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if name.startswith("--") or (len(name) == 2 and name[0] == "-"
                                         and not name[1].isdigit()):
                if name not in self.option_names:
                    return name
        return None


def workers_count(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


EXECUTOR_HELP = ("where the parallel work runs: local (this machine's worker processes) or "
                  "ray (the Ray cluster of RAY_ADDRESS, or a local Ray of --workers CPUs; needs "
                  "pip install 'near-dedup[ray]'); the report does not depend on it")
WORKERS_HELP = "worker processes (default: one per CPU core; results do not depend on it)"


def global_options(*, after_command: bool, config: bool = True) -> CommandParser:
    """The global options --index, --config and --quiet, as a parent parser: of the program
    itself, or (``after_command``) of each command, so that they go before or after its name
    (``near-dedup scan --index X …``). After the command an option not given there leaves
    the value given before it (``argparse.SUPPRESS`` as its default), and one given there
    wins. ``config=False``: for a command whose own argument is named config."""
    unset: dict = {"default": argparse.SUPPRESS} if after_command else {}
    options = CommandParser(add_help=False, parents=[])
    options.add_argument("--index", metavar="PATH|URL", **unset,
                         help="the near-dedup index, bound to the config (needed by index and "
                              "scan; contamination reads an indexed pool from it): a dedicated "
                              "SQLite file, postgresql://user@host:port/dbname, "
                              "iceberg:///absolute/folder[?catalog=postgresql://…] or "
                              "iceberg+s3://bucket/prefix?catalog=postgresql://…")
    if config:
        options.add_argument("--config", type=Path, metavar="PATH", **unset,
                             help="near-dedup config JSON (default: the shipped defaults)")
    options.add_argument("--quiet", action="store_true", **unset,
                         help="no progress lines on stderr")
    return options


class CommandParser(Parser):
    """A command's parser: the global options go after the command's name as well (with
    the program's own, `global_options`), unless the command gives its own ``parents``."""

    def __init__(self, **kwargs) -> None:
        if "parents" not in kwargs:
            kwargs["parents"] = [global_options(after_command=True)]
        super().__init__(**kwargs)


def workers_option(parser: argparse.ArgumentParser, *, executor: bool = True) -> None:
    """``--workers N`` (and ``--executor``) of a command that runs parallel work."""
    parser.add_argument("--workers", type=workers_count, default=os.cpu_count() or 1,
                        metavar="N", help=WORKERS_HELP)
    if executor:
        parser.add_argument("--executor", choices=EXECUTORS, default="local",
                            help=EXECUTOR_HELP)


def packages_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--packages", nargs="+", type=Path, default=[], metavar="DIR",
                        help="folders to look for the input packages in, if they are not at "
                             "the paths the report recorded: the folder the scan ran in (a "
                             "relative path is looked for below it), or one holding the "
                             "package folders (docs/audit.md)")


def location(text: str) -> Location:
    """A package, report or mixture argument: a local path or a URL (`storage`), parsed
    once; a URL whose storage package is missing is one line with its install command."""
    from near_dedup_core.storage import parse_location

    return parse_location(text)


def need_index(args: argparse.Namespace) -> Index:
    """The ``--index`` of a command that needs one, parsed into its backend."""
    if args.index is None:
        raise NearDedupError(f"usage: {args.command} needs --index PATH|URL (before or after "
                             f"the command)")
    from near_dedup_core.index_store import open_index

    return open_index(args.index)


def duration(text: str) -> float:
    """``90s``, ``30m``, ``24h``, ``7d`` (or plain seconds) as seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        value = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (90s, 30m, 24h, 7d)") \
            from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (90s, 30m, 24h, 7d)")
    return value
