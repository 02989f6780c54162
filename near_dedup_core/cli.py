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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="near-dedup", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"near-dedup {__version__}")
    p.add_argument("--index", help="the near-dedup SQLite index (a dedicated file)")
    p.add_argument("--config", type=Path, help="near-dedup config JSON (default: shipped defaults)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ix = sub.add_parser("index", help="append one batch of snapshot packages to the index")
    ix.add_argument("--inputs", nargs="+", type=Path, required=True)
    ix.add_argument("--workers", type=_workers, default=os.cpu_count() or 1)

    sc = sub.add_parser("scan", help="freeze the near-dedup report of one input pool")
    sc.add_argument("--inputs", nargs="+", type=Path, required=True)
    sc.add_argument("--output", type=Path, required=True)
    sc.add_argument("--workers", type=_workers, default=os.cpu_count() or 1)

    rp = sub.add_parser("report", help="frozen reports")
    rps = rp.add_subparsers(dest="report_command", required=True, parser_class=_Parser)
    rv = rps.add_parser("verify", help="verify a report's checksums and consistency")
    rv.add_argument("report", type=Path)

    sn = sub.add_parser("snapshot", help="snapshot packages")
    sns = sn.add_subparsers(dest="snapshot_command", required=True, parser_class=_Parser)
    cr = sns.add_parser("create", help="create a package from plain JSONL files")
    cr.add_argument("--kind", choices=["cpt", "sft"], required=True)
    cr.add_argument("--package-id", required=True)
    cr.add_argument("--tokenizer", help="NAME@REVISION (required for cpt)")
    cr.add_argument("--split", action="append", required=True, metavar="SPLIT=FILE",
                    help="records of one split; repeat for more splits or files")
    cr.add_argument("--depends-on", nargs="*", default=[], metavar="PACKAGE_ID")
    cr.add_argument("--parent", nargs="*", default=[], metavar="PACKAGE_ID",
                    help="lineage parents (informational)")
    cr.add_argument("--created-at", help="ISO timestamp (default: now, UTC)")
    cr.add_argument("--output", type=Path, required=True)
    va = sns.add_parser("validate", help="validate packages (together, as one command's inputs)")
    va.add_argument("packages", nargs="+", type=Path)

    mx = sub.add_parser("mixture", help="mixtures built on a frozen report")
    mxs = mx.add_subparsers(dest="mixture_command", required=True, parser_class=_Parser)
    mp = mxs.add_parser("plan", help="compute and print the per-domain plan")
    mp.add_argument("config", type=Path)
    mp.add_argument("--output", type=Path)
    mb = mxs.add_parser("build", help="build an immutable mixture package")
    mb.add_argument("config", type=Path)
    mb.add_argument("--output", type=Path, required=True)
    mv = mxs.add_parser("verify", help="verify a mixture package without the index")
    mv.add_argument("mixture", type=Path)
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
