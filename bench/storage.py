"""`index` + `scan` with packages and report on an S3 server against the same on local disk.

The 100k-record pool (``bench.build_corpus``'s ``pool-100k``) is uploaded to moto's standalone
S3 server on the loopback (`moto.server.ThreadedMotoServer`, in this process, outside the
measured process tree); each round then runs, through the CLI under ``/usr/bin/time -v``,

- **local**: ``index --inputs POOL`` into a fresh index, ``scan --inputs POOL --output DIR``;
- **s3**: ``index --inputs s3://…/pool-100k`` into a fresh index, ``scan --inputs s3://…
  --output s3://…/reports/…``;

in turns (the side that runs first alternates), and checks that the report's jsonl files on
the server are the local ones byte for byte. The figure is the ratio of the medians of
index + scan wall time, and the peak memory (largest process, whole tree) of each side.

    python -m bench.storage --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson

from bench.build_corpus import OUT, ensure
from bench.measure import Measurement, code_version, read_through, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "near-dedup.json"
REPORT_FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")
POOL = "pool-100k"


@contextlib.contextmanager
def s3_server(env: dict[str, str]) -> Iterator[tuple[object, str]]:
    """A moto S3 server on 127.0.0.1 with one bucket; ``env`` gets the client's variables."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="bench",
               AWS_SECRET_ACCESS_KEY="bench-secret", AWS_DEFAULT_REGION="us-east-1",
               AWS_EC2_METADATA_DISABLED="true")
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench-secret")
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield client, bucket
    finally:
        server.stop()


def upload(client: object, bucket: str, folder: Path, prefix: str) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket,  # type: ignore[attr-defined]
                               f"{prefix}/{path.relative_to(folder).as_posix()}")


def report_files(client: object, bucket: str, prefix: str) -> dict[str, bytes]:
    return {name: client.get_object(  # type: ignore[attr-defined]
        Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read() for name in REPORT_FILES}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.storage", description=__doc__.splitlines()[0])
    p.add_argument("--pool", type=Path, help=f"a pool package (default: {POOL}, built if needed)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT / "storage")
    args = p.parse_args(argv)
    pool = (args.pool or ensure(POOL)[0]).resolve()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    steps: list[dict] = []
    sides: dict[str, list[tuple[Measurement, Measurement]]] = {"local": [], "s3": []}

    def cli(name: str, index: Path, cmd: list[str]) -> Measurement:
        full = [sys.executable, "-m", "near_dedup_core", "--quiet", "--index", str(index),
                "--config", str(CONFIG), *cmd, "--workers", str(args.workers)]
        print(f"[{wall_clock()}] {name}", flush=True)
        m = run(full, out / "logs" / f"{name}.log", cwd=ROOT, env=env)
        if m.returncode != 0:
            raise SystemExit(f"storage: {name} failed with exit {m.returncode}: "
                             f"{m.stderr_tail}")
        steps.append({"step": name, **m.as_dict()})
        print(f"    wall {m.wall_s:.1f} s, CPU {m.cpu_s:.1f} s, peak RSS "
              f"{m.max_rss_process_mib:,.0f} MiB/process, {m.peak_tree_rss_mib:,.0f} MiB/tree",
              flush=True)
        return m

    with s3_server(env) as (client, bucket):
        started = time.monotonic()
        upload(client, bucket, pool, f"snapshots/{pool.name}")
        print(f"[{wall_clock()}] uploaded {pool.name} in {time.monotonic() - started:.1f} s",
              flush=True)
        url = f"s3://{bucket}/snapshots/{pool.name}"
        local_report: dict[str, bytes] | None = None
        for r in range(args.rounds):
            order = ["local", "s3"] if r % 2 == 0 else ["s3", "local"]
            for side in order:
                index = out / f"{side}.sqlite"
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{index}{suffix}").unlink(missing_ok=True)
                if side == "local":
                    report = out / f"report-{r}"
                    shutil.rmtree(report, ignore_errors=True)
                    read_through(pool)
                    i = cli(f"local-index-{r}", index, ["index", "--inputs", str(pool)])
                    s = cli(f"local-scan-{r}", index, ["scan", "--inputs", str(pool),
                                                        "--output", str(report)])
                    files = {n: (report / n).read_bytes() for n in REPORT_FILES}
                else:
                    prefix = f"reports/{pool.name}-{r}"
                    i = cli(f"s3-index-{r}", index, ["index", "--inputs", url])
                    s = cli(f"s3-scan-{r}", index, ["scan", "--inputs", url, "--output",
                                                     f"s3://{bucket}/{prefix}"])
                    files = report_files(client, bucket, prefix)
                if local_report is None:
                    local_report = files
                elif files != local_report:
                    raise SystemExit(f"storage: the {side} report of round {r} differs")
                sides[side].append((i, s))

    def median(side: str, pick: int | None = None) -> float:
        return statistics.median(pair[pick].wall_s if pick is not None else
                                 pair[0].wall_s + pair[1].wall_s for pair in sides[side])

    summary = {
        side: {"index_wall_s": median(side, 0), "scan_wall_s": median(side, 1),
               "index_scan_wall_s": median(side),
               "peak_rss_process_mib": max(m.max_rss_process_mib for pair in sides[side]
                                           for m in pair),
               "peak_tree_rss_mib": max(m.peak_tree_rss_mib for pair in sides[side]
                                        for m in pair)}
        for side in sides}
    summary["ratio_s3_to_local"] = round(summary["s3"]["index_scan_wall_s"]
                                         / summary["local"]["index_scan_wall_s"], 3)
    result = {"date": time.strftime("%Y-%m-%d"), "pool": pool.name, "rounds": args.rounds,
              "workers": args.workers, "code": code_version(ROOT), "summary": summary,
              "steps": steps}
    (out / "storage.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    for side in ("local", "s3"):
        s = summary[side]
        print(f"{side:>5}: index {s['index_wall_s']:.1f} s + scan {s['scan_wall_s']:.1f} s = "
              f"{s['index_scan_wall_s']:.1f} s (median of {args.rounds}); peak RSS "
              f"{s['peak_rss_process_mib']:,.0f} MiB/process, "
              f"{s['peak_tree_rss_mib']:,.0f} MiB/tree")
    print(f"s3 / local: {summary['ratio_s3_to_local']:.3f}× (target ≤ 1.3×); reports identical")


if __name__ == "__main__":
    main()
