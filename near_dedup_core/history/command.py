"""`near-dedup index find` from its parsed command line: the queries read and checked first
(nothing is opened before every query is known good), then the mixtures, then the join."""

from __future__ import annotations

import argparse

from near_dedup_core import index_store as db
from near_dedup_core.errors import NearDedupError
from near_dedup_core.history.find import find_texts
from near_dedup_core.history.mixtures import ShippedMixtures
from near_dedup_core.history.queries import (
    Query,
    hash_query,
    jsonl_queries,
    sample_queries,
    text_query,
)

USAGE = ("usage: index find needs --text FILE, --jsonl FILE, --package DIR --sample ID... or "
         "--hash HASH (see near-dedup index find --help)")


def read_queries(args: argparse.Namespace) -> list[Query]:
    """The queries of the command line, in the order of its options' kinds: texts, JSONL
    lines, package samples, hashes."""
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
        raise NearDedupError(USAGE)
    return queries


def run_find(args: argparse.Namespace, index: db.Index) -> str:
    """What `index find` prints: one JSON line per query (``--json``) or the table."""
    if getattr(args, "inputs", None):
        raise NearDedupError("usage: index find takes no --inputs (see near-dedup index find "
                             "--help)")
    queries = read_queries(args)
    mixtures = None if args.mixtures is None else ShippedMixtures.read(args.mixtures)
    found = find_texts(index, queries, workers=args.workers, executor=args.executor,
                       mixtures=mixtures, progress=not args.quiet)
    return found.json_lines() if args.json else found.table() + "\n"
