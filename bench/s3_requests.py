"""The requests an Iceberg index on S3 makes, and their time: the steps of docs/iceberg.md's
"Commands on S3" (two batches, a scan of both, `index compact`, `index check`, `index expire
--older-than 0s`) on moto's S3 server (`moto.server.ThreadedMotoServer`, in this process,
which counts what it answers by method and kind of object) with a PostgreSQL catalog
(the tests' `pg_server`, started here), each step a CLI process of its own.

With ``--before CHECKOUT`` (a checkout of earlier code, its kernels' caches warm) the same
steps run with that code too, in turns (the side that runs first alternates by round), each
on an index of its own; the scans' reports must be byte-identical.

    python -m bench.s3_requests --rounds 2 --before bench/out/tree-REV
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson

from near_dedup_core.fsutil import sha256_file

from bench.measure import code_version
from bench.storage import s3_server

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from pg_server import PASSWORD, PostgresServer, find_bindir  # noqa: E402

SAMPLES = ROOT / "samples" / "cpt"
V1 = SAMPLES / "2026-11-25" / "cpt-v1"
V2 = SAMPLES / "2026-11-26" / "cpt-v2"
STEPS: list[tuple[str, list[str]]] = [
    ("index-v1", ["index", "--inputs", str(V1)]),
    ("index-v2", ["index", "--inputs", str(V2)]),
    ("scan", ["scan", "--inputs", str(V1), str(V2), "--output", "{report}"]),
    ("compact", ["index", "compact"]),
    ("check", ["index", "check"]),
    ("expire", ["index", "expire", "--older-than", "0s"]),
]
REQUEST = re.compile(r'"(\w+) /[^/? ]+/?([^? ]*)(\S*) HTTP')


def kind(key: str, query: str) -> str:
    """What a request is for: a table's metadata (json, avro), a data file, or a listing."""
    if "list-type" in query or not key:
        return "list"
    for suffix in (".metadata.json", ".avro", ".parquet"):
        if key.endswith(suffix):
            return suffix.rsplit(".", 1)[1]
    return "other"


class Counted(logging.Handler):
    """The requests moto's server answers, by (method, kind); and each metadata file's GETs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()
        self.metadata_gets: collections.Counter[str] = collections.Counter()

    def clear(self) -> None:
        self.seen.clear()
        self.metadata_gets.clear()

    def emit(self, record: logging.LogRecord) -> None:
        found = REQUEST.search(re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage()))
        if found:
            what = kind(found.group(2), found.group(3))
            self.seen[f"{found.group(1)} {what}"] += 1
            if found.group(1) == "GET" and what in ("json", "avro"):
                self.metadata_gets[found.group(2)] += 1


def side_steps(code: Path, index: str, report: Path, env: dict[str, str],
               counted: Counted, steps: list[str]) -> dict:
    """The ``steps`` (names of `STEPS`) with ``code`` on ``index``: each step's requests and
    wall time."""
    out: dict = {"steps": []}
    for name, argv in STEPS:
        if name not in steps:
            continue
        argv = [a.replace("{report}", str(report)) for a in argv]
        counted.clear()
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                               index, *argv], cwd=code, capture_output=True, text=True,
                              env={**env, "PYTHONPATH": str(code)}, timeout=600)
        wall = time.perf_counter() - t0
        if done.returncode:
            raise SystemExit(f"{code}: {name} failed: {done.stderr.strip()}")
        out["steps"].append({"step": name, "wall_s": round(wall, 2),
                             "requests": sum(counted.seen.values()),
                             "by_kind": dict(sorted(counted.seen.items())),
                             "metadata_fetched_again": sum(
                                 n - 1 for n in counted.metadata_gets.values())})
    out["requests"] = sum(s["requests"] for s in out["steps"])
    out["wall_s"] = round(sum(s["wall_s"] for s in out["steps"]), 2)
    return out


def digests(folder: Path) -> tuple[tuple[str, str], ...]:
    """Each file below ``folder`` (a report) with the sha256 of its bytes."""
    return tuple((p.relative_to(folder).as_posix(), sha256_file(p))
                 for p in sorted(folder.rglob("*")) if p.is_file())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.s3_requests",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--before", type=Path, help="a checkout of earlier code to run in turns")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "s3-requests")
    ap.add_argument("--steps", nargs="+", choices=[name for name, _ in STEPS],
                    default=[name for name, _ in STEPS], help="some of the steps (default: all)")
    args = ap.parse_args(argv)
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("s3_requests: PostgreSQL binaries not found: apt-get install postgresql")
    sides = {"this": ROOT}
    if args.before is not None:
        sides["before"] = args.before.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    counted = Counted()
    log = logging.getLogger("werkzeug")
    server = PostgresServer(bindir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PGPASSWORD"] = PASSWORD
    result: dict = {"code": code_version(ROOT), "before": str(args.before or ""), "runs": []}
    try:
        with s3_server(env) as (_, bucket):
            log.setLevel(logging.INFO)
            log.addHandler(counted)
            for k in range(args.rounds):
                order = list(sides.items())
                for side, code in order if k % 2 == 0 else reversed(order):
                    catalog = server.create_database().replace(f":{PASSWORD}@", "@")
                    index = f"iceberg+s3://{bucket}/{side}-{uuid.uuid4().hex[:8]}?catalog={catalog}"
                    report = args.out / f"report-{side}-{k + 1}"
                    shutil.rmtree(report, ignore_errors=True)
                    run = side_steps(code, index, report, env, counted, args.steps)
                    run.update(round=k + 1, side=side)
                    result["runs"].append(run)
                    print({key: run[key] for key in ("round", "side", "requests", "wall_s")},
                          file=sys.stderr, flush=True)
    finally:
        log.removeHandler(counted)
        server.stop()
    if "scan" in args.steps:
        result["reports_identical"] = len({digests(args.out / f"report-{r['side']}-{r['round']}")
                                           for r in result["runs"]}) == 1
    for side in sides:
        runs = [r for r in result["runs"] if r["side"] == side]
        result[side] = {"requests": sorted(r["requests"] for r in runs),
                        "wall_s": sorted(r["wall_s"] for r in runs)}
    if "before" in sides:
        result["ratio_requests"] = round(
            min(result["this"]["requests"]) / min(result["before"]["requests"]), 3)
        result["ratio_wall"] = round(statistics.median_high(result["this"]["wall_s"])
                                     / statistics.median_high(result["before"]["wall_s"]), 3)
    (args.out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result).decode())
    if result.get("reports_identical") is False:
        raise SystemExit("s3_requests: the reports differ")


if __name__ == "__main__":
    main()
