"""`snapshot create|validate`: immutable snapshot packages."""

from __future__ import annotations

import argparse

from near_dedup_core.commands.options import CommandParser, Subcommands, location


def add_parsers(sub: Subcommands) -> None:
    sn = sub.add_parser("snapshot", help="snapshot packages",
                        description="Create or validate snapshot packages.")
    sns = sn.add_subparsers(dest="snapshot_command", required=True, parser_class=CommandParser,
                            title="commands", metavar="COMMAND")
    cr = sns.add_parser("create", help="create a package from plain JSONL files",
                        description="Create an immutable snapshot package (manifest, "
                                    "checksums, data shards) from JSONL files with one "
                                    "record per line.")
    cr.set_defaults(command_name="snapshot create")
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
    cr.add_argument("--output", type=location, required=True, metavar="DIR",
                    help="new package folder or URL (must not exist)")
    va = sns.add_parser("validate", help="validate packages (together, as one command's inputs)",
                        description="Fully validate packages: manifests, checksums, every "
                                    "line and the references between them.")
    va.set_defaults(command_name="snapshot validate")
    va.add_argument("packages", nargs="+", type=location, metavar="PACKAGE",
                    help="package folders, validated together")


def create(args: argparse.Namespace) -> None:
    from near_dedup_core import package
    from near_dedup_core.wording import count

    pkg = package.create_package(
        kind=args.kind, package_id=args.package_id, tokenizer=args.tokenizer,
        splits=package.parse_split_args(args.split), depends_on=args.depends_on,
        parents=args.parent, created_at=args.created_at, output=args.output)
    print(f"created {pkg.package_id} at {pkg.path} ({count(pkg.record_count, 'record')})")


def validate(args: argparse.Namespace) -> None:
    from near_dedup_core import package
    from near_dedup_core.wording import count

    for pkg in package.validate_packages(args.packages):
        print(f"valid: {pkg.package_id} ({pkg.kind}, {count(pkg.record_count, 'record')}, "
              f"manifest sha256 {pkg.manifest_sha256})")
