"""`index` (append a batch) and `index check|compact|expire`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from near_dedup_core.commands.options import (
    CommandParser,
    Subcommands,
    duration,
    location,
    need_index,
    workers_option,
)
from near_dedup_core.errors import NearDedupError

if TYPE_CHECKING:
    from near_dedup_core.history.queries import Query


def add_parsers(sub: Subcommands) -> None:
    ix = sub.add_parser("index", help="append one batch of snapshot packages to the index; "
                                      "`index check` verifies the index",
                        usage="near-dedup index --inputs PACKAGE... [--workers N] "
                              "[--executor {local,ray}] [global options]\n"
                              "       near-dedup index check|compact|expire [global options]\n"
                              "       near-dedup index find (--text FILE... | --jsonl FILE... | "
                              "--package DIR --sample ID... | --hash HASH...) [--mixtures "
                              "DIR...] [--json] [global options]",
                        description="Append the packages to the index as one batch, in one "
                                    "transaction. Packages already indexed are skipped; index "
                                    "each version in its own batch, oldest first. "
                                    "`near-dedup --index PATH|URL index check` checks the "
                                    "index's own invariants instead (a SQLite file after "
                                    "its integrity check; a PostgreSQL database in one "
                                    "read-only snapshot, its pages left to pg_amcheck; "
                                    "Iceberg tables with every data file). An iceberg:// "
                                    "index also has `index compact` and `index expire`.")
    ix.set_defaults(command_name="index")
    ixs = ix.add_subparsers(dest="action", required=False, parser_class=CommandParser,
                            title="commands", metavar="COMMAND")
    ixs.add_parser("check", help="check the index's own invariants (and SQLite's "
                                 "integrity_check) instead of appending",
                   description="Check the index's own invariants: a SQLite file after its "
                               "integrity check; a PostgreSQL database in one read-only "
                               "snapshot, its pages left to pg_amcheck."
                   ).set_defaults(command_name="index check")
    cp = ixs.add_parser(
        "compact", help="an iceberg:// index: merge the files of each size tier, as a new "
                        "commit",
        description="Merge an Iceberg index's data files of about the same size (a band "
                    "bucket's, the lookups'), four or more of a size tier into one sorted "
                    "file, so that a day's compaction rewrites about the day; grow the band "
                    "buckets when the index has outgrown them; published as a new commit "
                    "(docs/iceberg.md, \"Compaction\").")
    cp.set_defaults(command_name="index compact")
    cp.add_argument("--full", action="store_true",
                    help="merge every bucket's files into one, whatever their sizes")
    expire = ixs.add_parser(
        "expire", help="an iceberg:// index: drop old snapshots and the data files only they "
                       "referenced",
        description="Drop every snapshot of an Iceberg index but the published one and remove "
                    "the data files no kept snapshot references; refused while a scan reads "
                    "the index. With --older-than (always, 24h by default, with a shared "
                    "catalog): keep every snapshot made or published within that time "
                    "(docs/iceberg.md).")
    expire.set_defaults(command_name="index expire")
    expire.add_argument("--older-than", type=duration, metavar="DURATION",
                        help="keep what was made or still published within this time: 90s, "
                             "30m, 24h, 7d")
    fd = ixs.add_parser(
        "find", help="every indexed copy (same text or near copy) of texts, samples or hashes, "
                     "with every source and batch",
        usage="near-dedup index find (--text FILE... | --jsonl FILE... | --package DIR "
              "--sample ID... | --hash HASH...) [--mixtures DIR...] [--json] [--workers N] "
              "[--executor {local,ray}] [global options]",
        description="For each query, every indexed content that is the same text (normalized) "
                    "or a near copy (exact Jaccard at or above the index's threshold, found "
                    "through the scan's LSH bands; the numeric/unit guard's verdict shown, not "
                    "applied), each with every sample it was ingested from: package, sample, "
                    "split, scope, batch and date (docs/provenance.md). Exit 0 whether or not "
                    "anything matched.")
    fd.set_defaults(command_name="index find")
    fd.add_argument("--text", nargs="+", type=Path, default=[], metavar="FILE",
                    help="a file holding one text (UTF-8), compared as a CPT text")
    fd.add_argument("--jsonl", nargs="+", type=Path, default=[], metavar="FILE",
                    help='one query per line: {"id", "text"} or an SFT record (id, task, '
                         'messages, …) as packages carry it')
    fd.add_argument("--package", type=location, metavar="DIR",
                    help="a package whose samples (--sample) are the queries")
    fd.add_argument("--sample", nargs="+", default=[], metavar="ID", help="sample ids of --package")
    fd.add_argument("--hash", nargs="+", default=[], metavar="HASH",
                    help="a content_id (32 hex digits) or text_sha256 (64) of a report")
    fd.add_argument("--mixtures", nargs="+", type=location, metavar="DIR",
                    help="shipped mixture folders, or folders of them (the release's "
                         "mixture root): say which held each matching sample")
    fd.add_argument("--json", action="store_true", help="one JSON object per query")
    workers_option(fd)
    ix.add_argument("--inputs", nargs="+", type=location, metavar="PACKAGE",
                    help="package folders of the batch (with the packages they depend on)")
    workers_option(ix)


def append(args: argparse.Namespace) -> None:
    from near_dedup_core.config import load_config
    from near_dedup_core.ingest.run import index_packages

    if not args.inputs:
        raise NearDedupError("usage: index needs --inputs PACKAGE... (see near-dedup --help)")
    print(index_packages(need_index(args), load_config(args.config), args.inputs,
                         workers=args.workers, executor=args.executor,
                         progress=not args.quiet).summary())


def action(args: argparse.Namespace) -> None:
    """`index check`; `index compact` and `index expire`, which the backend refuses unless
    it needs them (an index kept as Iceberg tables)."""
    if args.inputs:
        raise NearDedupError(f"usage: index {args.action} takes no --inputs (see near-dedup "
                             f"--help)")
    index = need_index(args)
    if args.action == "check":
        print(index.check().summary())
    else:
        print(index.maintain(args.action, getattr(args, "older_than", None),
                             full=getattr(args, "full", False), progress=not args.quiet))


def find(args: argparse.Namespace) -> None:
    """`index find`: the queries read and checked first (nothing is opened before every
    query is known good), then the mixtures, then the join (`history.find_texts`)."""
    from near_dedup_core.history.find import find_texts

    if args.inputs:
        raise NearDedupError("usage: index find takes no --inputs (see near-dedup index find "
                             "--help)")
    queries = _find_queries(args)
    mixtures = None
    if args.mixtures is not None:
        from near_dedup_core.history.mixtures import ShippedMixtures

        mixtures = ShippedMixtures.read(args.mixtures)
    found = find_texts(need_index(args), queries, workers=args.workers,
                       executor=args.executor, mixtures=mixtures, progress=not args.quiet)
    print(found.json_lines() if args.json else found.table() + "\n", end="")


def _find_queries(args: argparse.Namespace) -> list[Query]:
    """The queries of the command line, in the order of its options' kinds: texts, JSONL
    lines, package samples, hashes."""
    from near_dedup_core.history.queries import (
        hash_query,
        jsonl_queries,
        sample_queries,
        text_query,
    )

    if (args.package is None) != (not args.sample):
        raise NearDedupError("usage: index find takes --package DIR with --sample ID... "
                             "(both or neither)")
    queries: list[Query] = [text_query(p) for p in args.text]
    for path in args.jsonl:
        queries += jsonl_queries(path)
    if args.package is not None:
        queries += sample_queries(args.package, args.sample)
    queries += [hash_query(h) for h in args.hash]
    if not queries:
        raise NearDedupError("usage: index find needs --text FILE, --jsonl FILE, --package "
                             "DIR --sample ID... or --hash HASH (see near-dedup index find "
                             "--help)")
    return queries
