"""The `takedown` command's arguments and its work (add, lift, list, show), for the CLI
(`near_dedup_core.cli`); ``takedown check`` reads mixtures, a floor above, and stays there.
Nothing heavy is imported before a subcommand runs: the CLI builds this parser for every
command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from near_dedup_core.errors import NearDedupError

if TYPE_CHECKING:
    from near_dedup_core import index_store as db


def add_parser(sub: Any, parser_class: type) -> None:
    """The `takedown` command and its subcommands on ``sub`` (the CLI's subparsers;
    ``parser_class``: its command parser, which takes the global options)."""
    td = sub.add_parser("takedown", help="record takedowns in the index, which every later "
                                         "scan applies",
                        description="Record, lift, list and show takedowns kept in the index: "
                                    "every later scan excludes each pool sample that is a "
                                    "taken-down text or a near copy of it (docs/takedowns.md).")
    tds = td.add_subparsers(dest="takedown_command", required=True, parser_class=parser_class,
                            title="commands", metavar="COMMAND")
    ta = tds.add_parser("add", help="record a takedown (its texts' fingerprints, not the texts)",
                        description="Record one takedown request in the index, in one "
                                    "transaction: who, when, why and each text's fingerprint "
                                    "(never the text itself unless --keep-text).")
    ta.add_argument("--request", required=True, metavar="ID", help="the request's id (used once)")
    ta.add_argument("--reason", required=True, metavar="TEXT", help="why")
    ta.add_argument("--by", metavar="WHO", help="who records it (default: the OS user)")
    given = ta.add_mutually_exclusive_group(required=True)
    given.add_argument("--text", type=Path, metavar="FILE", help="one text, a UTF-8 file")
    given.add_argument("--jsonl", type=Path, metavar="FILE",
                       help='texts, one {"id", "text"} or {"id", "messages"} per line')
    given.add_argument("--package", type=Path, metavar="DIR",
                       help="samples of a package (with --sample)")
    ta.add_argument("--sample", nargs="+", default=[], metavar="ID",
                    help="the package's sample ids")
    ta.add_argument("--keep-text", action="store_true",
                    help="also keep the texts themselves in the index")
    tl = tds.add_parser("lift", help="record that a takedown no longer applies",
                        description="Record the lifting of a takedown (a new act; the "
                                    "takedown stays in the log).")
    tl.add_argument("request", metavar="ID", help="the request's id")
    tl.add_argument("--reason", required=True, metavar="TEXT", help="why")
    tl.add_argument("--by", metavar="WHO", help="who lifts it (default: the OS user)")
    tds.add_parser("list", help="every takedown request, in force or lifted",
                   description="One line per request: id, state, texts, recorded at, by, "
                               "reason (tab-separated).")
    ts = tds.add_parser("show", help="everything recorded about one request",
                        description="The request's acts and its texts' ids and digests.")
    ts.add_argument("request", metavar="ID", help="the request's id")
    ts.add_argument("--json", action="store_true", help="one JSON object")
    tc = tds.add_parser("check", help="built mixtures hold nothing the takedowns in force "
                                      "take down",
                        description="Compare every record of built mixtures with the "
                                    "takedowns in force in the index now (a takedown recorded "
                                    "after a mixture's report is not in its report).")
    tc.add_argument("mixtures", nargs="+", type=Path, metavar="MIXTURE",
                    help="mixture folders")


def run(args: argparse.Namespace, index: db.Index) -> list[str]:
    """The lines `takedown add|lift|list|show` prints."""
    from near_dedup_core.takedown import record

    sub = args.takedown_command
    if sub == "add":
        if args.sample and args.package is None:
            raise NearDedupError("usage: takedown add --sample goes with --package DIR")
        texts = (record.texts_from_file(args.text) if args.text is not None else
                 record.texts_from_jsonl(args.jsonl) if args.jsonl is not None else
                 record.texts_from_package(args.package, args.sample))
        act = record.add(index, args.request, args.reason, texts, by=args.by,
                         keep_text=args.keep_text)
        return [record.summary(act, index.label)]
    if sub == "lift":
        return [record.summary(record.lift(index, args.request, args.reason, by=args.by),
                               index.label)]
    acts, _config = record.read_acts(index)
    if sub == "list":
        return record.list_lines(acts)
    import orjson

    shown = record.show(acts, args.request, index.label)
    return [orjson.dumps(shown, option=orjson.OPT_SORT_KEYS).decode() if args.json
            else record.show_text(shown)]
