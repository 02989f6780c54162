"""`report verify|explain|diff|html`: frozen reports, read without the index."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from near_dedup_core.commands.options import (
    CommandParser,
    Subcommands,
    location,
    packages_option,
    workers_count,
)
from near_dedup_core.errors import NearDedupError

if TYPE_CHECKING:
    from near_dedup_core.storage import Location


def add_parsers(sub: Subcommands) -> None:
    rp = sub.add_parser("report", help="frozen reports",
                        description="Work with frozen near-dedup reports.")
    rps = rp.add_subparsers(dest="report_command", required=True, parser_class=CommandParser,
                            title="commands", metavar="COMMAND")
    rv = rps.add_parser("verify", help="verify a report's checksums and consistency "
                                       "(near-dedup or contamination report)",
                        description="Check a report folder against its checksums.sha256 and "
                                    "its manifest's counts; no index needed.")
    rv.set_defaults(command_name="report verify")
    rv.add_argument("report", type=location, metavar="REPORT", help="the report folder")
    rv.add_argument("--inputs", nargs="+", type=location, metavar="PACKAGE",
                    help="also re-check the report against every package it names: a "
                         "near-dedup report's decisions (text_sha256) and origins must match "
                         "their records; a contamination report's pairs are re-derived from "
                         "its eval and pool packages and must be the report's")
    rx = rps.add_parser("explain", help="why one sample was kept or excluded, and by what",
                        description="Explain one sample's decision from the report files and "
                                    "the input packages (no index needed): the kept partner, "
                                    "every relation, guard sequences and a diff of the texts. "
                                    "For a contamination report: every pair of one eval item "
                                    "or training sample, with the method, the figures and the "
                                    "matched span's offsets and text in both, and what was "
                                    "set aside.")
    rx.set_defaults(command_name="report explain")
    rx.add_argument("report", type=location, metavar="REPORT", help="the report folder")
    rx.add_argument("package_id", metavar="PACKAGE_ID", help="the sample's package id")
    rx.add_argument("sample_id", metavar="SAMPLE_ID", help="the sample's id")
    rx.add_argument("--json", action="store_true", help="one JSON object on stdout")
    packages_option(rx)
    rd = rps.add_parser("diff", help="decisions that changed between two reports",
                        description="Compare two reports: config changes first, then counts "
                                    "and the samples whose decision or kept partner changed. "
                                    "Two contamination reports: per eval package "
                                    "(benchmark), the items newly contaminated and cleared.")
    rd.set_defaults(command_name="report diff")
    rd.add_argument("old_report", type=location, metavar="OLD", help="the older report folder")
    rd.add_argument("new_report", type=location, metavar="NEW", help="the newer report folder")
    rd.add_argument("--json", action="store_true", help="one JSON object on stdout")
    rd.add_argument("--limit", type=workers_count, default=20, metavar="N",
                    help="samples shown per list (default 20; --json lists all)")
    packages_option(rd)

    rh = rps.add_parser("html", help="a report as a static site (HTML, no server needed)",
                        description="Write a self-contained static site of a verified report "
                                    "(overview, clusters with text diffs, guard pairs, per "
                                    "source, find a sample) from the report files and the "
                                    "input packages (no index needed); open index.html.")
    rh.set_defaults(command_name="report html")
    rh.add_argument("report", type=location, metavar="REPORT", help="the report folder")
    rh.add_argument("--against", type=location, metavar="OLD_REPORT",
                    help="also a page of the changes since this report (report diff)")
    rh.add_argument("--contamination", type=location, metavar="DIR",
                    help="also a page of this contamination report's contaminated samples")
    rh.add_argument("--inputs", nargs="+", type=Path, default=[], metavar="PACKAGE",
                    help="input packages to read texts from, if they moved since the report "
                         "was frozen (default: the paths in the report's manifest, also "
                         "looked for below the report's folders and in --packages)")
    rh.add_argument("--output", type=location, required=True, metavar="DIR",
                    help="new site folder or URL (must not exist)")
    packages_option(rh)


def verify(args: argparse.Namespace) -> None:
    print(verify_any_report(args.report, args.inputs))


def explain_or_diff(args: argparse.Namespace) -> None:
    import contextlib

    import orjson

    from near_dedup_core import audit
    from near_dedup_core.audit import render
    from near_dedup_core.audit.sources import searching
    from near_dedup_core.contamination import audit as contam_audit
    from near_dedup_core.contamination import is_contamination_report
    from near_dedup_core.storage import in_place, local_folder

    result: (audit.Explanation | audit.ReportDiff | contam_audit.ContaminationExplanation
             | contam_audit.ContaminationDiff)
    explain = args.report_command == "explain"
    with contextlib.ExitStack() as stack:  # reports on object storage: `local_folder`
        stack.enter_context(searching(args.packages))
        given = [args.report] if explain else [args.old_report, args.new_report]
        folders = [stack.enter_context(local_folder(where)) for where in given]
        contam = [is_contamination_report(f) for f in folders]
        if any(contam) and not all(contam):
            raise NearDedupError(f"{given[contam.index(False)]}: not a contamination report "
                                 f"(report diff compares two reports of one kind)")
        if all(contam) and explain:
            result = contam_audit.explain_contamination(folders[0], args.package_id,
                                                        args.sample_id)
            text = None if args.json else result.text()
        elif all(contam):
            result = contam_audit.diff_contamination(folders[0], folders[1])
            text = None if args.json else result.text(args.limit)
        elif explain:
            result = audit.explain_sample(folders[0], args.package_id, args.sample_id)
            text = None if args.json else render.explanation_text(result)
        else:
            result = audit.diff_reports(folders[0], folders[1])
            text = None if args.json else render.diff_text(result, args.limit)
        if text is None:
            text = orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode()
        notes = list(result.notes)
        for folder, where in zip(folders, given, strict=True):
            text = in_place(text, folder, where)
            notes = [in_place(note, folder, where) for note in notes]
    notes_then(notes, text)


def html(args: argparse.Namespace) -> None:
    from near_dedup_core.audit.sources import searching
    from near_dedup_core.site import publish_site

    with searching(args.packages):
        site = publish_site(args.report, args.output, against=args.against,
                            contamination=args.contamination, inputs=args.inputs,
                            progress=not args.quiet)
    notes_then(site.notes, site.summary())


def notes_then(notes: Iterable[str], text: str) -> None:
    """A command's notes on stderr, one line each, then its text on stdout."""
    for note in notes:
        print(f"near-dedup: note: {note}", file=sys.stderr)
    print_to_reader(text)


def print_to_reader(text: str) -> None:
    """Print ``text`` on stdout; a reader that stops early (``… | head``) ends the output
    quietly (Python's documented handling of SIGPIPE: stdout pointed at devnull, so the
    interpreter's last flush does not fail again)."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def verify_any_report(path: Path | Location,
                      inputs: list[Path] | list[Location] | None = None) -> str:
    """Verify a frozen report of either format (dispatch on its manifest's ``format``);
    returns the one-line summary. With ``inputs``, a near-dedup report is also checked
    against its input packages (`report.inputs.verify_report_inputs`). A report on object
    storage is read through `storage.local_folder`."""
    from near_dedup_core.storage import in_place, local_folder

    with local_folder(path) as folder:
        return in_place(_verify_local_report(folder, inputs), folder, path)


def _verify_local_report(path: Path, inputs: list[Path] | list[Location] | None) -> str:
    from near_dedup_core.contamination import is_contamination_report, verify_contamination
    from near_dedup_core.report import verify_report

    if is_contamination_report(path):
        return verify_contamination(path, None if inputs is None
                                    else [str(p) for p in inputs], recorded=True).summary()
    if inputs:
        from near_dedup_core.report.inputs import verify_report_inputs

        return verify_report_inputs(path, inputs).summary()
    return verify_report(path).summary()
