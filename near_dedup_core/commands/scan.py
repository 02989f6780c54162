"""`scan` (the near-dedup report of a pool) and `contamination` (eval items in the pool)."""

from __future__ import annotations

import argparse
from pathlib import Path

from near_dedup_core.commands.options import Subcommands, location, need_index, workers_option


def add_parsers(sub: Subcommands) -> None:
    sc = sub.add_parser("scan", help="freeze the near-dedup report of one input pool",
                        description="Decide keep/exclude for every sample of the input pool "
                                    "against the pool and the index's history, and write the "
                                    "report folder atomically.")
    sc.set_defaults(command_name="scan")
    sc.add_argument("--inputs", nargs="+", type=location, required=True, metavar="PACKAGE",
                    help="package folders of the input pool (all must be indexed)")
    sc.add_argument("--output", type=location, required=True, metavar="DIR",
                    help="new report folder (must not exist)")
    workers_option(sc)

    ct = sub.add_parser("contamination",
                        help="freeze the report of eval items contained in training samples",
                        description="Find every training sample of the pool that contains an "
                                    "evaluation item (exact containment of the item's shingles "
                                    "at or above contamination_threshold in one nearly "
                                    "contiguous span; an item shorter than "
                                    "contamination_min_chars as one exact run of its words), "
                                    "set aside items common in the pool (whole or as a "
                                    "template) or allowlisted, and "
                                    "write the report folder atomically. No index needed; with --index "
                                    "(every input indexed, as for scan) the pool's normalized "
                                    "texts are read from the index instead of the packages: "
                                    "faster, the same report.")
    ct.set_defaults(command_name="contamination")
    ct.add_argument("--evals", nargs="+", type=location, required=True, metavar="EVAL_PKG",
                    help="snapshot packages holding the evaluation items")
    ct.add_argument("--inputs", nargs="+", type=location, required=True, metavar="POOL_PKG",
                    help="package folders of the training pool")
    ct.add_argument("--output", type=location, required=True, metavar="DIR",
                    help="new report folder (must not exist)")
    workers_option(ct)
    ct.add_argument("--allowlist", type=Path, metavar="FILE",
                    help="public text expected in the pool, one JSON object per line with "
                         "text and reason (overrides contamination_allowlist)")


def scan(args: argparse.Namespace) -> None:
    from near_dedup_core.config import load_config
    from near_dedup_core.scan import scan_pool

    print(scan_pool(need_index(args), load_config(args.config), args.inputs, args.output,
                    workers=args.workers, executor=args.executor,
                    progress=not args.quiet).summary())


def contamination(args: argparse.Namespace) -> None:
    from near_dedup_core.config import load_config
    from near_dedup_core.contamination import contamination_report

    print(contamination_report(load_config(args.config), args.evals, args.inputs, args.output,
                               workers=args.workers, progress=not args.quiet,
                               index=None if args.index is None else need_index(args),
                               executor=args.executor, allowlist=args.allowlist).summary())
