"""`near-dedup` command line: argument parsing and exit codes only; the work is in the modules.

Exit codes: 0 success, 1 invalid input/usage/state (one line on stderr), 2 a limit was exceeded.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from near_dedup_core import __version__
from near_dedup_core.errors import NearDedupError


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 1."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise NearDedupError(f"usage: {message} (see near-dedup --help)")


def _workers(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


DESCRIPTION = """\
Find near-duplicate training samples across released snapshot packages and build mixtures
without them. `index` adds packages to a persistent SQLite index; `scan` freezes an auditable
near-duplicate report of an input pool against that index; `mixture build` builds a mixture
on the frozen report, which `report verify` and `mixture verify` check later without the
index."""

EPILOG = """\
global options (--index, --config, --quiet) go before the command:
  near-dedup --index data/indexes/cpt-near.sqlite --config config/near-dedup.json \\
    index --inputs samples/cpt/2026-11-25/cpt-v1

exit codes:
  0  success
  1  invalid input, usage or state: one line on stderr naming the package, file and line;
     nothing is written
  2  a configured limit was exceeded (max_chars, max_candidates, max_pool_records)

`near-dedup COMMAND --help` describes each command."""

_WORKERS_HELP = "worker processes (default: one per CPU core; results do not depend on it)"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="near-dedup", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"near-dedup {__version__}",
                   help="print the version and exit")
    p.add_argument("--index", metavar="PATH|URL",
                   help="the near-dedup index, bound to the config (needed by index and scan): "
                        "a dedicated SQLite file, or postgresql://user@host:port/dbname")
    p.add_argument("--config", type=Path, metavar="PATH",
                   help="near-dedup config JSON (default: the shipped defaults)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser,
                           title="commands", metavar="COMMAND")

    ix = sub.add_parser("index", help="append one batch of snapshot packages to the index",
                        description="Append the packages to the index as one batch, in one "
                                    "transaction. Packages already indexed are skipped; index "
                                    "each version in its own batch, oldest first.")
    ix.add_argument("--inputs", nargs="+", type=Path, required=True, metavar="PACKAGE",
                    help="package folders of the batch (with the packages they depend on)")
    ix.add_argument("--workers", type=_workers, default=os.cpu_count() or 1, metavar="N",
                    help=_WORKERS_HELP)

    sc = sub.add_parser("scan", help="freeze the near-dedup report of one input pool",
                        description="Decide keep/exclude for every sample of the input pool "
                                    "against the pool and the index's history, and write the "
                                    "report folder atomically.")
    sc.add_argument("--inputs", nargs="+", type=Path, required=True, metavar="PACKAGE",
                    help="package folders of the input pool (all must be indexed)")
    sc.add_argument("--output", type=Path, required=True, metavar="DIR",
                    help="new report folder (must not exist)")
    sc.add_argument("--workers", type=_workers, default=os.cpu_count() or 1, metavar="N",
                    help=_WORKERS_HELP)

    rp = sub.add_parser("report", help="frozen reports",
                        description="Work with frozen near-dedup reports.")
    rps = rp.add_subparsers(dest="report_command", required=True, parser_class=_Parser,
                            title="commands", metavar="COMMAND")
    rv = rps.add_parser("verify", help="verify a report's checksums and consistency",
                        description="Check a report folder against its checksums.sha256 and "
                                    "its manifest's counts; no index needed.")
    rv.add_argument("report", type=Path, metavar="REPORT", help="the report folder")

    sn = sub.add_parser("snapshot", help="snapshot packages",
                        description="Create or validate snapshot packages.")
    sns = sn.add_subparsers(dest="snapshot_command", required=True, parser_class=_Parser,
                            title="commands", metavar="COMMAND")
    cr = sns.add_parser("create", help="create a package from plain JSONL files",
                        description="Create an immutable snapshot package (manifest, "
                                    "checksums, data shards) from JSONL files with one "
                                    "record per line.")
    cr.add_argument("--kind", choices=["cpt", "sft"], required=True,
                    help="cpt (records with text) or sft (records with messages)")
    cr.add_argument("--package-id", required=True, metavar="ID",
                    help="the new package's id: letters, digits, '.', '_' and '-'")
    cr.add_argument("--tokenizer", metavar="NAME@REVISION", help="tokenizer (required for cpt)")
    cr.add_argument("--split", action="append", required=True, metavar="SPLIT=FILE",
                    help="records of one split; repeat for more splits or files")
    cr.add_argument("--depends-on", nargs="*", default=[], metavar="PACKAGE_ID",
                    help="packages whose records this one refers to (incremental package)")
    cr.add_argument("--parent", nargs="*", default=[], metavar="PACKAGE_ID",
                    help="lineage parents (informational)")
    cr.add_argument("--created-at", metavar="TIMESTAMP",
                    help="ISO timestamp (default: now, UTC)")
    cr.add_argument("--output", type=Path, required=True, metavar="DIR",
                    help="new package folder (must not exist)")
    va = sns.add_parser("validate", help="validate packages (together, as one command's inputs)",
                        description="Fully validate packages: manifests, checksums, every "
                                    "line and the references between them.")
    va.add_argument("packages", nargs="+", type=Path, metavar="PACKAGE",
                    help="package folders, validated together")

    mx = sub.add_parser("mixture", help="mixtures built on a frozen report",
                        description="Plan, build and verify mixtures on a frozen report.")
    mxs = mx.add_subparsers(dest="mixture_command", required=True, parser_class=_Parser,
                            title="commands", metavar="COMMAND")
    mp = mxs.add_parser("plan", help="compute and print the per-domain plan",
                        description="Print the per-domain plan of a mixture config without "
                                    "building it.")
    mp.add_argument("config", type=Path, metavar="MIXTURE_JSON", help="the mixture config")
    mp.add_argument("--output", type=Path, metavar="FILE", help="also write the plan as JSON")
    mb = mxs.add_parser("build", help="build an immutable mixture package",
                        description="Build the mixture package of a mixture config, "
                                    "atomically.")
    mb.add_argument("config", type=Path, metavar="MIXTURE_JSON", help="the mixture config")
    mb.add_argument("--output", type=Path, required=True, metavar="DIR",
                    help="new mixture folder (must not exist)")
    mv = mxs.add_parser("verify", help="verify a mixture package without the index",
                        description="Check a mixture folder's checksums, its records and the "
                                    "near-dedup report embedded in it.")
    mv.add_argument("mixture", type=Path, metavar="MIXTURE", help="the mixture folder")
    return p


def _need_index(args: argparse.Namespace) -> Path:
    if args.index is None:
        raise NearDedupError(f"usage: {args.command} needs --index PATH before the command")
    return args.index


def run(args: argparse.Namespace) -> None:
    from near_dedup_core.config import load_config

    progress = not args.quiet
    if args.command == "index":
        from near_dedup_core.ingest import index_packages

        result = index_packages(_need_index(args), load_config(args.config), args.inputs,
                                workers=args.workers, progress=progress)
        print(result.summary())
    elif args.command == "scan":
        from near_dedup_core.scan import scan_pool

        result = scan_pool(_need_index(args), load_config(args.config), args.inputs, args.output,
                           workers=args.workers, progress=progress)
        print(result.summary())
    elif args.command == "report":
        from near_dedup_core.report import verify_report

        print(verify_report(args.report).summary())
    elif args.command == "snapshot":
        from near_dedup_core import package

        if args.snapshot_command == "create":
            pkg = package.create_package(
                kind=args.kind, package_id=args.package_id, tokenizer=args.tokenizer,
                splits=package.parse_split_args(args.split), depends_on=args.depends_on,
                parents=args.parent, created_at=args.created_at, output=args.output)
            print(f"created {pkg.package_id} at {pkg.path} ({pkg.record_count} records)")
        else:
            for pkg in package.validate_packages(args.packages):
                print(f"valid: {pkg.package_id} ({pkg.kind}, {pkg.record_count} records, "
                      f"manifest sha256 {pkg.manifest_sha256})")
    elif args.command == "mixture":
        from near_dedup_core import mixture

        if args.mixture_command == "plan":
            plan = mixture.plan_mixture(mixture.load_mixture_config(args.config), progress=progress)
            print(plan.table())
            if args.output:
                plan.write(args.output)
        elif args.mixture_command == "build":
            print(mixture.build_mixture(mixture.load_mixture_config(args.config),
                                        args.output, progress=progress).summary())
        else:
            print(mixture.verify_mixture(args.mixture).summary())


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        run(args)
    except NearDedupError as exc:
        print(f"near-dedup: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a path that cannot be read or written: bad input or state
        where_ = f"{exc.filename}: " if exc.filename else ""
        print(f"near-dedup: error: {where_}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("near-dedup: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
