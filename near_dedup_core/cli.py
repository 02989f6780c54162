"""`near-dedup` command line: argument parsing and exit codes only; the work is in the modules.

Exit codes: 0 success, 1 invalid input/usage/state (one line on stderr), 2 a limit was exceeded.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import gc
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from near_dedup_core import __version__, runtime
from near_dedup_core.errors import NearDedupError
from near_dedup_core.progress import close_bars, command_clock
from near_dedup_core.workers import EXECUTORS, choose_executor

if TYPE_CHECKING:
    from near_dedup_core.index_store import Index
    from near_dedup_core.storage import Location


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 1, takes options only
    by their full names (``--input`` is not ``--inputs``), and names an unknown option
    first: ``--ouptut`` is reported as unknown, not as a missing ``--output``."""

    def __init__(self, **kwargs) -> None:
        #: every option string of this parser, its parents' included
        self.option_names: set[str] = set()
        for parent in kwargs.get("parents", ()):
            self.option_names |= getattr(parent, "option_names", set())
        self._given: list[str] = []
        super().__init__(allow_abbrev=False, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        self.option_names.update(action.option_strings)
        return action

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        unknown = self._unknown_option()
        if unknown is not None and not message.startswith("unrecognized"):
            close = difflib.get_close_matches(unknown, sorted(self.option_names), n=1)
            message = f"unrecognized argument: {unknown}" + \
                (f" (did you mean {close[0]}?)" if close else "")
        raise NearDedupError(f"usage: {message} (see near-dedup --help)")

    def _unknown_option(self) -> str | None:
        """The first option this parser was given that it does not know, if any."""
        for token in self._given:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if name.startswith("--") or (len(name) == 2 and name[0] == "-"
                                         and not name[1].isdigit()):
                if name not in self.option_names:
                    return name
        return None


def _workers(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


DESCRIPTION = """\
Find near-duplicate training samples across released snapshot packages and build mixtures
without them. `index` adds packages to a persistent index (a SQLite file, a PostgreSQL
database or Iceberg tables); `scan` freezes an auditable near-duplicate report of an input
pool against that index; `report explain` and `report diff` audit reports; `contamination`
finds evaluation items inside training samples; `mixture build` builds a mixture on the
frozen reports, which `report verify` and `mixture verify` check later without the index."""

EPILOG = """\
global options (--index, --config, --quiet) go before or after the command:
  near-dedup --index data/indexes/cpt-near.sqlite --config config/near-dedup.json \\
    index --inputs samples/cpt/2026-11-25/cpt-v1
  near-dedup scan --index data/indexes/cpt-near.sqlite --inputs PACKAGE... --output DIR

exit codes:
  0  success
  1  invalid input, usage or state: one line on stderr naming the package, file and line;
     nothing is written
  2  a configured limit was exceeded (max_chars, max_candidates, max_pool_records)

`near-dedup COMMAND --help` describes each command."""

_EXECUTOR_HELP = ("where the parallel work runs: local (this machine's worker processes) or "
                  "ray (the Ray cluster of RAY_ADDRESS, or a local Ray of --workers CPUs; needs "
                  "pip install 'near-dedup[ray]'); the report does not depend on it")
_WORKERS_HELP = "worker processes (default: one per CPU core; results do not depend on it)"


def _global_options(*, after_command: bool, config: bool = True) -> _CommandParser:
    """The global options --index, --config and --quiet, as a parent parser: of the program
    itself, or (``after_command``) of each command, so that they go before or after its name
    (``near-dedup scan --index X …``). After the command an option not given there leaves
    the value given before it (``argparse.SUPPRESS`` as its default), and one given there
    wins. ``config=False``: for a command whose own argument is named config."""
    unset: dict = {"default": argparse.SUPPRESS} if after_command else {}
    options = _CommandParser(add_help=False, parents=[])
    options.add_argument("--index", metavar="PATH|URL", **unset,
                         help="the near-dedup index, bound to the config (needed by index and "
                              "scan; contamination reads an indexed pool from it): a dedicated "
                              "SQLite file, postgresql://user@host:port/dbname, "
                              "iceberg:///absolute/folder[?catalog=postgresql://…] or "
                              "iceberg+s3://bucket/prefix?catalog=postgresql://…")
    if config:
        options.add_argument("--config", type=Path, metavar="PATH", **unset,
                             help="near-dedup config JSON (default: the shipped defaults)")
    options.add_argument("--quiet", action="store_true", **unset,
                         help="no progress lines on stderr")
    return options


class _CommandParser(_Parser):
    """A command's parser: the global options go after the command's name as well (with
    the program's own, `_global_options`), unless the command gives its own ``parents``."""

    def __init__(self, **kwargs) -> None:
        if "parents" not in kwargs:
            kwargs["parents"] = [_global_options(after_command=True)]
        super().__init__(**kwargs)


def build_parser() -> argparse.ArgumentParser:
    own_config = [_global_options(after_command=True, config=False)]  # MIXTURE_JSON is theirs
    p = _Parser(prog="near-dedup", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter,
                parents=[_global_options(after_command=False)])
    p.add_argument("--version", action="version", version=f"near-dedup {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_CommandParser,
                           title="commands", metavar="COMMAND")

    ix = sub.add_parser("index", help="append one batch of snapshot packages to the index; "
                                      "`index check` verifies the index",
                        usage="near-dedup index --inputs PACKAGE... [--workers N] "
                              "[--executor {local,ray}] [global options]\n"
                              "       near-dedup index check|compact|expire [global options]",
                        description="Append the packages to the index as one batch, in one "
                                    "transaction. Packages already indexed are skipped; index "
                                    "each version in its own batch, oldest first. "
                                    "`near-dedup --index PATH|URL index check` checks the "
                                    "index's own invariants instead (a SQLite file after "
                                    "its integrity check; a PostgreSQL database in one "
                                    "read-only snapshot, its pages left to pg_amcheck; "
                                    "Iceberg tables with every data file). An iceberg:// "
                                    "index also has `index compact` and `index expire`.")
    ixs = ix.add_subparsers(dest="action", required=False, parser_class=_CommandParser,
                            title="commands", metavar="COMMAND")
    ixs.add_parser("check", help="check the index's own invariants (and SQLite's "
                                 "integrity_check) instead of appending",
                   description="Check the index's own invariants: a SQLite file after its "
                               "integrity check; a PostgreSQL database in one read-only "
                               "snapshot, its pages left to pg_amcheck.")
    ixs.add_parser("compact", help="an iceberg:// index: rewrite each band bucket's files "
                                   "into one sorted file, as a new commit",
                   description="Rewrite the band files of every bucket of an Iceberg index "
                               "into one file sorted by key, published as a new commit "
                               "(docs/iceberg.md).")
    expire = ixs.add_parser(
        "expire", help="an iceberg:// index: drop old snapshots and the data files only they "
                       "referenced",
        description="Drop every snapshot of an Iceberg index but the published one and remove "
                    "the data files no kept snapshot references; refused while a scan reads "
                    "the index. With --older-than (always, 24h by default, with a shared "
                    "catalog): keep every snapshot made or published within that time "
                    "(docs/iceberg.md).")
    expire.add_argument("--older-than", type=_duration, metavar="DURATION",
                        help="keep what was made or still published within this time: 90s, "
                             "30m, 24h, 7d")
    ix.add_argument("--inputs", nargs="+", type=_location, metavar="PACKAGE",
                    help="package folders of the batch (with the packages they depend on)")
    ix.add_argument("--workers", type=_workers, default=os.cpu_count() or 1, metavar="N",
                    help=_WORKERS_HELP)
    ix.add_argument("--executor", choices=EXECUTORS, default="local",
                    help=_EXECUTOR_HELP)

    sc = sub.add_parser("scan", help="freeze the near-dedup report of one input pool",
                        description="Decide keep/exclude for every sample of the input pool "
                                    "against the pool and the index's history, and write the "
                                    "report folder atomically.")
    sc.add_argument("--inputs", nargs="+", type=_location, required=True, metavar="PACKAGE",
                    help="package folders of the input pool (all must be indexed)")
    sc.add_argument("--output", type=_location, required=True, metavar="DIR",
                    help="new report folder (must not exist)")
    sc.add_argument("--workers", type=_workers, default=os.cpu_count() or 1, metavar="N",
                    help=_WORKERS_HELP)
    sc.add_argument("--executor", choices=EXECUTORS, default="local",
                    help=_EXECUTOR_HELP)

    ct = sub.add_parser("contamination",
                        help="freeze the report of eval items contained in training samples",
                        description="Find every training sample of the pool that contains an "
                                    "evaluation item (exact containment of the item's shingles "
                                    "at or above contamination_threshold in one nearly "
                                    "contiguous span; an item shorter than "
                                    "contamination_min_chars as one exact run of its words), "
                                    "set aside items common in the pool or allowlisted, and "
                                    "write the report folder atomically. No index needed; with --index "
                                    "(every input indexed, as for scan) the pool's normalized "
                                    "texts are read from the index instead of the packages: "
                                    "faster, the same report.")
    ct.add_argument("--evals", nargs="+", type=_location, required=True, metavar="EVAL_PKG",
                    help="snapshot packages holding the evaluation items")
    ct.add_argument("--inputs", nargs="+", type=_location, required=True, metavar="POOL_PKG",
                    help="package folders of the training pool")
    ct.add_argument("--output", type=_location, required=True, metavar="DIR",
                    help="new report folder (must not exist)")
    ct.add_argument("--workers", type=_workers, default=os.cpu_count() or 1, metavar="N",
                    help=_WORKERS_HELP)
    ct.add_argument("--executor", choices=EXECUTORS, default="local",
                    help=_EXECUTOR_HELP)
    ct.add_argument("--allowlist", type=Path, metavar="FILE",
                    help="public text expected in the pool, one JSON object per line with "
                         "text and reason (overrides contamination_allowlist)")

    rp = sub.add_parser("report", help="frozen reports",
                        description="Work with frozen near-dedup reports.")
    rps = rp.add_subparsers(dest="report_command", required=True, parser_class=_CommandParser,
                            title="commands", metavar="COMMAND")
    rv = rps.add_parser("verify", help="verify a report's checksums and consistency "
                                       "(near-dedup or contamination report)",
                        description="Check a report folder against its checksums.sha256 and "
                                    "its manifest's counts; no index needed.")
    rv.add_argument("report", type=_location, metavar="REPORT", help="the report folder")
    rv.add_argument("--inputs", nargs="+", type=_location, metavar="PACKAGE",
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
    rx.add_argument("report", type=_location, metavar="REPORT", help="the report folder")
    rx.add_argument("package_id", metavar="PACKAGE_ID", help="the sample's package id")
    rx.add_argument("sample_id", metavar="SAMPLE_ID", help="the sample's id")
    rx.add_argument("--json", action="store_true", help="one JSON object on stdout")
    _packages_option(rx)
    rd = rps.add_parser("diff", help="decisions that changed between two reports",
                        description="Compare two reports: config changes first, then counts "
                                    "and the samples whose decision or kept partner changed. "
                                    "Two contamination reports: per eval package "
                                    "(benchmark), the items newly contaminated and cleared.")
    rd.add_argument("old_report", type=_location, metavar="OLD", help="the older report folder")
    rd.add_argument("new_report", type=_location, metavar="NEW", help="the newer report folder")
    rd.add_argument("--json", action="store_true", help="one JSON object on stdout")
    rd.add_argument("--limit", type=_workers, default=20, metavar="N",
                    help="samples shown per list (default 20; --json lists all)")
    _packages_option(rd)

    rh = rps.add_parser("html", help="a report as a static site (HTML, no server needed)",
                        description="Write a self-contained static site of a verified report "
                                    "(overview, clusters with text diffs, guard pairs, per "
                                    "source, find a sample) from the report files and the "
                                    "input packages (no index needed); open index.html.")
    rh.add_argument("report", type=_location, metavar="REPORT", help="the report folder")
    rh.add_argument("--against", type=_location, metavar="OLD_REPORT",
                    help="also a page of the changes since this report (report diff)")
    rh.add_argument("--contamination", type=_location, metavar="DIR",
                    help="also a page of this contamination report's contaminated samples")
    rh.add_argument("--inputs", nargs="+", type=Path, default=[], metavar="PACKAGE",
                    help="input packages to read texts from, if they moved since the report "
                         "was frozen (default: the paths in the report's manifest, also "
                         "looked for below the report's folders and in --packages)")
    rh.add_argument("--output", type=_location, required=True, metavar="DIR",
                    help="new site folder or URL (must not exist)")
    _packages_option(rh)

    sn = sub.add_parser("snapshot", help="snapshot packages",
                        description="Create or validate snapshot packages.")
    sns = sn.add_subparsers(dest="snapshot_command", required=True, parser_class=_CommandParser,
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
    cr.add_argument("--output", type=_location, required=True, metavar="DIR",
                    help="new package folder or URL (must not exist)")
    va = sns.add_parser("validate", help="validate packages (together, as one command's inputs)",
                        description="Fully validate packages: manifests, checksums, every "
                                    "line and the references between them.")
    va.add_argument("packages", nargs="+", type=_location, metavar="PACKAGE",
                    help="package folders, validated together")

    mx = sub.add_parser("mixture", help="mixtures built on a frozen report",
                        description="Plan, build and verify mixtures on a frozen report.")
    mxs = mx.add_subparsers(dest="mixture_command", required=True, parser_class=_CommandParser,
                            title="commands", metavar="COMMAND")
    mp = mxs.add_parser("plan", parents=own_config, help="compute and print the per-domain plan",
                        description="Print the per-domain plan of a mixture config without "
                                    "building it.")
    mp.add_argument("config", type=Path, metavar="MIXTURE_JSON", help="the mixture config")
    mp.add_argument("--output", metavar="FILE",
                    help="also write the plan as JSON (a new local file)")
    mb = mxs.add_parser("build", parents=own_config, help="build an immutable mixture package",
                        description="Build the mixture package of a mixture config, "
                                    "atomically.")
    mb.add_argument("config", type=Path, metavar="MIXTURE_JSON", help="the mixture config")
    mb.add_argument("--output", type=_location, required=True, metavar="DIR",
                    help="new mixture folder (must not exist)")
    mv = mxs.add_parser("verify", help="verify a mixture package without the index",
                        description="Check a mixture folder's checksums, its records and the "
                                    "near-dedup report embedded in it.")
    mv.add_argument("mixture", type=_location, metavar="MIXTURE", help="the mixture folder")
    return p


def _packages_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--packages", nargs="+", type=Path, default=[], metavar="DIR",
                        help="folders to look for the input packages in, if they are not at "
                             "the paths the report recorded: the folder the scan ran in (a "
                             "relative path is looked for below it), or one holding the "
                             "package folders (docs/audit.md)")


def _location(text: str) -> Location:
    """A package, report or mixture argument: a local path or a URL (`storage`), parsed
    once; a URL whose storage package is missing is one line with its install command."""
    from near_dedup_core.storage import parse_location

    return parse_location(text)


def _need_index(args: argparse.Namespace) -> Index:
    """The ``--index`` of a command that needs one, parsed into its backend."""
    if args.index is None:
        raise NearDedupError(f"usage: {args.command} needs --index PATH|URL (before or after "
                             f"the command)")
    from near_dedup_core.index_store import open_index

    return open_index(args.index)


def _duration(text: str) -> float:
    """``90s``, ``30m``, ``24h``, ``7d`` (or plain seconds) as seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        value = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (90s, 30m, 24h, 7d)") \
            from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (90s, 30m, 24h, 7d)")
    return value


def _index_action(args: argparse.Namespace) -> str:
    """`index check`; `index compact` and `index expire`, which the backend refuses unless
    it needs them (an index kept as Iceberg tables)."""
    if args.inputs:
        raise NearDedupError(f"usage: index {args.action} takes no --inputs (see near-dedup "
                             f"--help)")
    index = _need_index(args)
    if args.action == "check":
        return index.check().summary()
    return index.maintain(args.action, getattr(args, "older_than", None),
                          progress=not args.quiet)


def _report_audit(args: argparse.Namespace) -> None:
    import contextlib

    import orjson

    from near_dedup_core import audit
    from near_dedup_core.audit import render
    from near_dedup_core.contamination import audit as contam_audit
    from near_dedup_core.contamination import is_contamination_report
    from near_dedup_core.storage import in_place, local_folder

    result: (audit.Explanation | audit.ReportDiff | contam_audit.ContaminationExplanation
             | contam_audit.ContaminationDiff)
    with contextlib.ExitStack() as stack:  # reports on object storage: `local_folder`
        given = [args.report] if args.report_command == "explain" else \
            [args.old_report, args.new_report]
        folders = [stack.enter_context(local_folder(where)) for where in given]
        contam = [is_contamination_report(f) for f in folders]
        if any(contam) and not all(contam):
            raise NearDedupError(f"{given[contam.index(False)]}: not a contamination report "
                                 f"(report diff compares two reports of one kind)")
        if all(contam) and args.report_command == "explain":
            result = contam_audit.explain_contamination(folders[0], args.package_id,
                                                        args.sample_id)
            text = None if args.json else result.text()
        elif all(contam):
            result = contam_audit.diff_contamination(folders[0], folders[1])
            text = None if args.json else result.text(args.limit)
        elif args.report_command == "explain":
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
    for note in notes:
        print(f"near-dedup: note: {note}", file=sys.stderr)
    _print_to_reader(text)


def _print_to_reader(text: str) -> None:
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


def run(args: argparse.Namespace) -> None:
    """The command of ``args``, in the process set-up of its profile (`runtime.command`)."""
    if hasattr(args, "executor"):  # chosen once: the stages ask it, never which one it is
        args.executor = choose_executor(args.executor, args.workers)
    action = getattr(args, "action", None)
    name = f"index {action}" if action in ("check", "compact", "expire") else args.command
    with command_clock(progress=not args.quiet), \
            runtime.command(name, inputs=getattr(args, "inputs", None) or (),
                            workers=getattr(args, "workers", 1),
                            executor=getattr(args, "executor", "local"), index=args.index):
        try:
            _run(args)
        except NearDedupError as exc:
            hint = None if exc.exit_code != 1 or str(exc).startswith("usage:") \
                else _misplaced_folder(args)
            if hint is None:
                raise
            raise NearDedupError(hint) from exc


#: The folder arguments of each command: attribute, the kinds it takes (`folders.KINDS`),
#: and how the command's messages name it.
_FOLDER_ARGS: dict[str, tuple[tuple[str, tuple[str, ...], str], ...]] = {
    "index": (("inputs", ("package",), "package"),),
    "scan": (("inputs", ("package",), "package"),),
    "contamination": (("evals", ("package",), "package"), ("inputs", ("package",), "package")),
    "report verify": (("report", ("report", "contamination"), "report"),),
    "report explain": (("report", ("report", "contamination"), "report"),),
    "report diff": (("old_report", ("report", "contamination"), "report"),
                    ("new_report", ("report", "contamination"), "report")),
    # --against given a contamination report: its own line says to pass it as --contamination
    "report html": (("report", ("report",), "report"),
                    ("against", ("report", "contamination"), "--against"),
                    ("contamination", ("contamination",), "--contamination")),
    "snapshot validate": (("packages", ("package",), "package"),),
    "mixture verify": (("mixture", ("mixture",), "mixture"),),
}


def _misplaced_folder(args: argparse.Namespace) -> str | None:
    """The one line for a local folder argument that is another kind of folder than the
    command takes (a mixture given to `report verify`, a release day's folder of packages
    given to `snapshot validate`), or None (`folders.misplaced`)."""
    from near_dedup_core.folders import misplaced
    from near_dedup_core.storage import Location

    sub = getattr(args, f"{args.command}_command", None)
    for attr, wanted, what in _FOLDER_ARGS.get(f"{args.command} {sub}" if sub else args.command,
                                               ()):
        value = getattr(args, attr, None)
        for given in value if isinstance(value, list) else [value]:
            if isinstance(given, Location):
                given = given.local_path
            if isinstance(given, Path):
                hint = misplaced(given, wanted, what, str(given))
                if hint is not None:
                    return hint
    return None


def _run(args: argparse.Namespace) -> None:
    from near_dedup_core.config import load_config

    progress = not args.quiet
    if args.command == "index" and args.action is not None:
        print(_index_action(args))
    elif args.command == "index":
        from near_dedup_core.ingest.run import index_packages

        if not args.inputs:
            raise NearDedupError("usage: index needs --inputs PACKAGE... (see near-dedup --help)")
        indexed = index_packages(_need_index(args), load_config(args.config), args.inputs,
                                 workers=args.workers, executor=args.executor,
                                 progress=progress)
        print(indexed.summary())
    elif args.command == "scan":
        from near_dedup_core.scan import scan_pool

        scanned = scan_pool(_need_index(args), load_config(args.config), args.inputs,
                            args.output, workers=args.workers, executor=args.executor,
                            progress=progress)
        print(scanned.summary())
    elif args.command == "contamination":
        from near_dedup_core.contamination import contamination_report

        print(contamination_report(load_config(args.config), args.evals, args.inputs,
                                   args.output, workers=args.workers, progress=progress,
                                   index=None if args.index is None else _need_index(args),
                                   executor=args.executor, allowlist=args.allowlist).summary())
    elif args.command == "report":
        from near_dedup_core.audit.sources import searching

        with searching(getattr(args, "packages", ())):  # report explain, diff, html
            _run_report(args)
    elif args.command == "snapshot":
        from near_dedup_core import package
        from near_dedup_core.wording import count

        if args.snapshot_command == "create":
            pkg = package.create_package(
                kind=args.kind, package_id=args.package_id, tokenizer=args.tokenizer,
                splits=package.parse_split_args(args.split), depends_on=args.depends_on,
                parents=args.parent, created_at=args.created_at, output=args.output)
            print(f"created {pkg.package_id} at {pkg.path} ({count(pkg.record_count, 'record')})")
        else:
            for pkg in package.validate_packages(args.packages):
                print(f"valid: {pkg.package_id} ({pkg.kind}, {count(pkg.record_count, 'record')}, "
                      f"manifest sha256 {pkg.manifest_sha256})")
    elif args.command == "mixture":
        from near_dedup_core import mixture

        if args.mixture_command == "plan":
            if args.output:  # refused before the work, and again as it is written
                mixture.require_new_plan(args.output)
            plan = mixture.plan_mixture(mixture.load_mixture_config(args.config), progress=progress)
            if args.output:  # a refused output prints no plan
                plan.write(Path(args.output))
            print(plan.table())
        elif args.mixture_command == "build":
            print(mixture.build_mixture(mixture.load_mixture_config(args.config),
                                        args.output, progress=progress).summary())
        else:
            from near_dedup_core.storage import in_place, local_folder

            with local_folder(args.mixture) as folder:
                print(in_place(mixture.verify_mixture(folder, progress).summary(), folder,
                               args.mixture))


def _run_report(args: argparse.Namespace) -> None:
    if args.report_command in ("explain", "diff"):
        _report_audit(args)
    elif args.report_command == "html":
        from near_dedup_core.site import publish_site

        site = publish_site(args.report, args.output, against=args.against,
                            contamination=args.contamination, inputs=args.inputs,
                            progress=not args.quiet)
        for note in site.notes:
            print(f"near-dedup: note: {note}", file=sys.stderr)
        print(site.summary())
    else:
        print(verify_any_report(args.report, args.inputs))


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that open transactions roll back, temporary
    folders are removed and worker pools are stopped, as for Ctrl-C."""


class _NotTheStop(logging.Filter):
    """Drops a library's log record of the SIGTERM or Ctrl-C that stops the command: SQLAlchemy's
    pool logs an interruption that lands while it closes a connection (with its traceback)
    before it re-raises it, and the command's one line already says that it was stopped."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, Terminated | KeyboardInterrupt)


_NOT_THE_STOP = _NotTheStop()


#: Seconds a terminated command has to unwind (roll its batch back, remove its temporary
#: files, stop its workers) before it leaves regardless.
TERM_GRACE = 5.0


def _terminate(signum, _frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    code, line = _thread_failure() or (_TERMINATED, "near-dedup: terminated")
    deadline = threading.Timer(TERM_GRACE, _leave, (code, line + "\n"))
    deadline.daemon = True
    try:
        deadline.start()
    except RuntimeError:  # no thread can start (memory is exhausted): the kernel's alarm
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # ends the process if unwinding hangs
        signal.alarm(int(TERM_GRACE))
    raise Terminated(signum)


#: What ended a thread of the command (`_thread_failed`), first only.
_FAILED_THREADS: list[BaseException] = []


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """An exception that ends a thread (ours or a library's, such as the thread that feeds a
    process pool's tasks, whose own threads fail to start when memory runs out) would be a
    traceback on stderr and, worse, work that never finishes while the main thread waits for
    it. The command is stopped instead, as a SIGTERM stops it (its temporaries removed, its
    pool stopped), and says why in one line (`_thread_failure`)."""
    if isinstance(args.exc_value, Terminated | KeyboardInterrupt | SystemExit):
        return
    _stop_for(args.exc_value or RuntimeError("a thread failed"))


def _stop_for(exc: BaseException) -> None:
    """Stop the command (a SIGTERM to its main thread) for ``exc``, what ended one of its
    threads; the first such exception is the one the command's line names."""
    if not _FAILED_THREADS:
        _FAILED_THREADS.append(exc)
    if signal.getsignal(signal.SIGTERM) is _terminate:  # the command still runs
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)


def _thread_failure() -> tuple[int, str] | None:
    """The exit code and line of a command stopped because one of its threads failed."""
    if not _FAILED_THREADS:
        return None
    exc = _FAILED_THREADS[0]
    if isinstance(exc, MemoryError) or _no_thread(exc):
        return 1, f"near-dedup: error: {_OUT_OF_MEMORY.format(f' ({exc})' if str(exc) else '')}"
    first = str(exc).strip().splitlines()
    return 1, (f"near-dedup: error: unexpected {type(exc).__name__} in a thread"
               f"{': ' + first[0] if first else ''}; nothing was changed")


def _no_thread(exc: BaseException) -> bool:
    """Whether ``exc`` is Python's failure to start a thread (no memory for its stack)."""
    return isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)


_OUT_OF_MEMORY = ("out of memory{}; nothing was changed; try fewer --workers or a smaller "
                  "input pool")


def _unraisable(unraisable: Any) -> None:
    """A SIGTERM or Ctrl-C that lands in a finalizer or a weakref callback (run by a garbage
    collection) cannot propagate from there; Python would print it as "Exception ignored" with
    its traceback. It is not printed: the command then either finishes its work (exit 0, what
    it did is complete) or is ended by the deadline its first delivery started (`TERM_GRACE`,
    exit 143 with the one line). Memory that runs out as a thread starts (before its own code
    runs, where `threading.excepthook` does not see it) stops the command (`_stop_for`)."""
    exc = unraisable.exc_value
    if isinstance(exc, MemoryError) or _no_thread(exc):
        # a thread that could not even start its own code (its first allocation failed):
        # its work never happens, so the command stops as for a thread that failed
        _stop_for(exc)
    elif not isinstance(exc, Terminated | KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _leave(code: int, line: str = "") -> None:
    """End the process now, without joining its threads: after a SIGTERM or Ctrl-C a pool's
    result thread can wait forever on a pipe that a killed worker left half-written (the
    process itself holds its other end). Everything that must be undone was undone by the
    unwinding (or, past `TERM_GRACE`, is undone by the database's own recovery: a batch
    that was not committed is not in the index); the pool's server and workers die with
    this process (`workers.die_with_parent`)."""
    if line:
        os.write(2, line.encode())
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            continue
    os._exit(code)


_INTERRUPTED, _TERMINATED = 130, 143
_NO_SPACE = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def main(argv: list[str] | None = None) -> int:
    """Run one command; every failure is one stderr line and an exit code.

    Bad input or state raises NearDedupError where it is found (the index store names the
    index for SQLite errors, atomic_dir the output for failed writes). The last-resort cases
    here are the ones that can happen anywhere: memory exhaustion (MemoryError, numpy's
    allocation error is one; a C extension that fails an allocation without setting an error
    raises SystemError), a full disk or file-size limit (OSError ENOSPC/EFBIG/EDQUOT),
    other OSErrors on a named path, and a worker process that died (killed, e.g. by the OOM
    killer). Anything else unexpected (seen under memory caps: a worker's import failing to
    map a shared object) is one line too, naming its type; ``NEAR_DEDUP_TRACEBACK=1`` shows
    the traceback. In each case nothing was published: batches are transactions, outputs are
    renamed into place only when complete."""
    previous = None
    if logging.lastResort is not None:  # where a library's records go when nobody configured logging
        logging.lastResort.addFilter(_NOT_THE_STOP)
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
        sys.unraisablehook = _unraisable
        threading.excepthook = _thread_failed
    _FAILED_THREADS.clear()  # a process that runs commands one after the other
    try:
        args = build_parser().parse_args(argv)
        run(args)
    except NearDedupError as exc:
        return _fail(str(exc), exc.exit_code)
    except MemoryError as exc:
        return _fail(_OUT_OF_MEMORY.format(f" ({exc})" if str(exc) else ""))
    except SystemError as exc:  # a C extension that failed without setting an error
        return _fail(f"an extension module failed ({exc}), as happens when memory runs out; "
                     f"nothing was changed; try fewer --workers or a smaller input pool")
    except OSError as exc:  # a path that cannot be read or written: bad input or state
        if exc.errno == errno.ENOMEM:  # a mapping, a fork or a pipe that memory refused
            return _fail(_OUT_OF_MEMORY.format(f" ({exc.strerror or exc})"))
        where_ = f"{exc.filename}: " if exc.filename else ""
        if exc.errno in _NO_SPACE:
            return _fail(f"{where_}{exc.strerror or exc} (out of disk space or over the "
                         f"file-size limit); nothing was changed")
        return _fail(f"{where_}{exc.strerror or exc}")
    except KeyboardInterrupt as exc:
        return _stopped(exc)
    except Exception as exc:  # the last resort: still one line, still nothing published
        if isinstance(exc.__cause__, Terminated | KeyboardInterrupt):
            # the signal came during a class definition (an import), whose ``__set_name__``
            # failure Python reports as a RuntimeError caused by it
            return _stopped(exc.__cause__)
        if _no_thread(exc):
            return _fail(_OUT_OF_MEMORY.format(f" ({exc})"))
        if _broken_pool(exc):
            return _fail("a worker process died (killed, or out of memory); nothing was "
                         "changed; try fewer --workers")
        if os.environ.get(TRACEBACK_ENV):
            raise
        first = str(exc).strip().splitlines()
        return _fail(f"unexpected {type(exc).__name__}"
                     f"{': ' + first[0] if first else ''}; nothing was changed (under memory "
                     f"pressure, try fewer --workers; {TRACEBACK_ENV}=1 shows where it "
                     f"happened)")
    except Terminated as exc:
        return _stopped(exc)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
            sys.unraisablehook = sys.__unraisablehook__
            threading.excepthook = threading.__excepthook__
    return 0


def _stopped(exc: Terminated | KeyboardInterrupt) -> int:
    """The line and exit code of a command stopped by SIGTERM or Ctrl-C (or by a thread that
    failed, `_thread_failed`)."""
    close_bars()
    failure = _thread_failure()
    if failure is not None:
        print(failure[1], file=sys.stderr)
        return failure[0]
    if isinstance(exc, Terminated):
        print("near-dedup: terminated", file=sys.stderr)
        return _TERMINATED
    print("near-dedup: interrupted", file=sys.stderr)
    return _INTERRUPTED


#: Set to show the traceback of an unexpected error instead of its one line.
TRACEBACK_ENV = "NEAR_DEDUP_TRACEBACK"


def _broken_pool(exc: BaseException) -> bool:
    """Whether ``exc`` is a process pool's BrokenProcessPool (a worker died). Its module is
    looked up, not imported: a command that started no pool cannot have raised it, and the
    import (multiprocessing with it) is not paid by commands that run inline."""
    module = sys.modules.get("concurrent.futures.process")
    return module is not None and isinstance(exc, module.BrokenProcessPool)


def _fail(message: str, code: int = 1) -> int:
    close_bars()
    print(f"near-dedup: error: {message}", file=sys.stderr)
    return code


def console_main() -> None:
    """The process entry point (``near-dedup``, ``python -m near_dedup_core``): `main`, then
    `runtime.finish` and exit; a terminated or interrupted command leaves at once (`_leave`).
    Callers in a process that goes on (tests, the Dagster assets) call `main`."""
    runtime.begin()
    code = main()
    if code in (_INTERRUPTED, _TERMINATED) or _FAILED_THREADS:
        # What the unwinding did not reach is garbage now, often in reference cycles (a
        # traceback whose frames hold the exception they handled; every SQLite connection,
        # through its statement cache): collected, a connection opened just before the
        # signal closes, and a context manager entered just as it came is exited. `_leave`
        # collects nothing, and an open connection would leave the index's -wal and -shm.
        gc.collect()
        _leave(code)
    runtime.finish()
    raise SystemExit(code)


if __name__ == "__main__":
    console_main()
