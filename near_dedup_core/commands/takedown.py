"""`takedown add|lift|list|show|check`: takedowns recorded in the index (docs/takedowns.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from near_dedup_core.commands.options import CommandParser, Subcommands, need_index
from near_dedup_core.errors import NearDedupError


def add_parsers(sub: Subcommands) -> None:
    td = sub.add_parser("takedown", help="record takedowns in the index, which every later "
                                         "scan applies",
                        description="Record, lift, list and show takedowns kept in the index: "
                                    "every later scan excludes each pool sample that is a "
                                    "taken-down text or a near copy of it (docs/takedowns.md).")
    tds = td.add_subparsers(dest="takedown_command", required=True, parser_class=CommandParser,
                            title="commands", metavar="COMMAND")
    ta = tds.add_parser("add", help="record a takedown (its texts' fingerprints, not the texts)",
                        description="Record one takedown request in the index, in one "
                                    "transaction: who, when, why and each text's fingerprint "
                                    "(never the text itself unless --keep-text).")
    ta.set_defaults(command_name="takedown add")
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
    tl.set_defaults(command_name="takedown lift")
    tl.add_argument("request", metavar="ID", help="the request's id")
    tl.add_argument("--reason", required=True, metavar="TEXT", help="why")
    tl.add_argument("--by", metavar="WHO", help="who lifts it (default: the OS user)")
    tds.add_parser("list", help="every takedown request, in force or lifted",
                   description="One line per request: id, state, texts, recorded at, by, "
                               "reason (tab-separated)."
                   ).set_defaults(command_name="takedown list")
    ts = tds.add_parser("show", help="everything recorded about one request",
                        description="The request's acts and its texts' ids and digests.")
    ts.set_defaults(command_name="takedown show")
    ts.add_argument("request", metavar="ID", help="the request's id")
    ts.add_argument("--json", action="store_true", help="one JSON object")
    tc = tds.add_parser("check", help="built mixtures hold nothing the takedowns in force "
                                      "take down",
                        description="Compare every record of built mixtures with the "
                                    "takedowns in force in the index now (a takedown recorded "
                                    "after a mixture's report is not in its report).")
    tc.set_defaults(command_name="takedown check")
    tc.add_argument("mixtures", nargs="+", type=Path, metavar="MIXTURE",
                    help="mixture folders")


def add(args: argparse.Namespace) -> None:
    from near_dedup_core.takedown import record

    index = need_index(args)
    if args.sample and args.package is None:
        raise NearDedupError("usage: takedown add --sample goes with --package DIR")
    texts = (record.texts_from_file(args.text) if args.text is not None else
             record.texts_from_jsonl(args.jsonl) if args.jsonl is not None else
             record.texts_from_package(args.package, args.sample))
    print(record.summary(record.add(index, args.request, args.reason, texts, by=args.by,
                                    keep_text=args.keep_text), index.label))


def lift(args: argparse.Namespace) -> None:
    from near_dedup_core.takedown import record

    index = need_index(args)
    print(record.summary(record.lift(index, args.request, args.reason, by=args.by),
                         index.label))


def list_all(args: argparse.Namespace) -> None:
    from near_dedup_core.takedown import record

    acts, _config = record.read_acts(need_index(args))
    for line in record.list_lines(acts):
        print(line)


def show(args: argparse.Namespace) -> None:
    import orjson

    from near_dedup_core.takedown import record

    index = need_index(args)
    acts, _config = record.read_acts(index)
    shown = record.show(acts, args.request, index.label)
    print(orjson.dumps(shown, option=orjson.OPT_SORT_KEYS).decode() if args.json
          else record.show_text(shown))


def check(args: argparse.Namespace) -> None:
    """`takedown check`: built mixtures against the takedowns in force now."""
    from near_dedup_core.mixture.takedowns import check_mixture_takedowns

    index = need_index(args)
    for folder in args.mixtures:
        print(check_mixture_takedowns(folder, index))
