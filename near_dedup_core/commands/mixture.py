"""`mixture plan|build|verify`: mixtures built on frozen reports."""

from __future__ import annotations

import argparse
from pathlib import Path

from near_dedup_core.commands.options import CommandParser, Subcommands, global_options, location


def add_parsers(sub: Subcommands) -> None:
    own_config = [global_options(after_command=True, config=False)]  # MIXTURE_JSON is theirs
    mx = sub.add_parser("mixture", help="mixtures built on a frozen report",
                        description="Plan, build and verify mixtures on a frozen report.")
    mxs = mx.add_subparsers(dest="mixture_command", required=True, parser_class=CommandParser,
                            title="commands", metavar="COMMAND")
    mp = mxs.add_parser("plan", parents=own_config, help="compute and print the per-domain plan",
                        description="Print the per-domain plan of a mixture config without "
                                    "building it.")
    mp.set_defaults(command_name="mixture plan")
    mp.add_argument("config", type=Path, metavar="MIXTURE_JSON", help="the mixture config")
    mp.add_argument("--output", metavar="FILE",
                    help="also write the plan as JSON (a new local file)")
    mb = mxs.add_parser("build", parents=own_config, help="build an immutable mixture package",
                        description="Build the mixture package of a mixture config, "
                                    "atomically.")
    mb.set_defaults(command_name="mixture build")
    mb.add_argument("config", type=Path, metavar="MIXTURE_JSON", help="the mixture config")
    mb.add_argument("--output", type=location, required=True, metavar="DIR",
                    help="new mixture folder (must not exist)")
    mv = mxs.add_parser("verify", help="verify a mixture package without the index",
                        description="Check a mixture folder's checksums, its records and the "
                                    "near-dedup report embedded in it.")
    mv.set_defaults(command_name="mixture verify")
    mv.add_argument("mixture", type=location, metavar="MIXTURE", help="the mixture folder")


def plan(args: argparse.Namespace) -> None:
    from near_dedup_core import mixture

    if args.output:  # refused before the work, and again as it is written
        mixture.require_new_plan(args.output)
    planned = mixture.plan_mixture(mixture.load_mixture_config(args.config),
                                   progress=not args.quiet)
    if args.output:  # a refused output prints no plan
        planned.write(Path(args.output))
    print(planned.table())


def build(args: argparse.Namespace) -> None:
    from near_dedup_core import mixture

    print(mixture.build_mixture(mixture.load_mixture_config(args.config), args.output,
                                progress=not args.quiet).summary())


def verify(args: argparse.Namespace) -> None:
    from near_dedup_core import mixture
    from near_dedup_core.storage import in_place, local_folder

    with local_folder(args.mixture) as folder:
        print(in_place(mixture.verify_mixture(folder, not args.quiet).summary(), folder,
                       args.mixture))
