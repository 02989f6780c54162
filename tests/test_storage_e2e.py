"""The commands with packages, reports and mixtures on object storage: the bundled samples
uploaded to moto's standalone S3 server (`s3_server`), each command run with ``s3://`` URLs
and its outputs compared byte for byte with the same run on local disk; the bad states
(no such bucket, denied or refused credentials, an existing output) are one line, exit 1,
nothing written."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, refused, run_cli, tree_bytes
from s3_server import (
    SECRET_KEY,
    S3Server,
    deny_writes_user,
    expire_credentials,
    run_s3_server,
)

CONFIG = REPO / "config" / "near-dedup.json"
V1 = SAMPLES / "cpt/2026-11-25/cpt-v1"
V2 = SAMPLES / "cpt/2026-11-26/cpt-v2"

pytestmark = pytest.mark.slow  # about 45 s: every command twice, against a live S3 server


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, moto_server) -> Iterator[S3Server]:
    """A new empty bucket on the session's moto server (conftest.py)."""
    with run_s3_server(monkeypatch, tmp_path, moto_server) as server:
        yield server


def ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out


def upload(s3: S3Server, folder: Path, prefix: str) -> str:
    """Every file of ``folder`` under ``prefix`` in the bucket; the folder's URL."""
    client = s3.client()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{path.relative_to(folder)}",
                              Body=path.read_bytes())
    return s3.url(prefix)


def download(s3: S3Server, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` by its path below it (as `tree_bytes` gives)."""
    client = s3.client()
    return {key[len(prefix) + 1:]: client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
            for key in s3.keys(prefix + "/")}


def same_report(local: dict[str, bytes], remote: dict[str, bytes],
                paths: dict[str, str]) -> None:
    """The report on the bucket is the local one byte for byte, but for the input paths its
    manifest records: each is what the user gave (the local folder, or the URL)."""
    assert sorted(local) == sorted(remote)
    for name in local:
        if name not in ("manifest.json", "checksums.sha256"):
            assert local[name] == remote[name], name
    text = remote["manifest.json"].decode()
    for given_locally, url in paths.items():
        assert json.dumps(url) in text
        text = text.replace(json.dumps(url), json.dumps(given_locally))
    assert text.encode() == local["manifest.json"]


@pytest.fixture(scope="module")
def pooled(moto_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """(s3, pools): a bucket of the module's own and on it, built once for the tests that
    only read them, the samples v1 and v2 locally and on the bucket, each indexed into an
    index of its own (v1, then v2), and each pool scanned: the local report and the report on
    the bucket. Those tests follow one another below: the next test's bucket empties the
    server (`run_s3_server`); a test that alters the report puts it back."""
    tmp_path = tmp_path_factory.mktemp("pools")
    with pytest.MonkeyPatch.context() as mp, run_s3_server(mp, tmp_path, moto_server) as s3:
        urls = [upload(s3, V1, "snapshots/cpt-v1"), upload(s3, V2, "snapshots/cpt-v2")]
        local_index, remote_index = tmp_path / "local.sqlite", tmp_path / "remote.sqlite"
        for local, url in zip((V1, V2), urls, strict=True):
            ok("--index", local_index, "--config", CONFIG, "index", "--inputs", local,
               "--workers", 1)
            ok("--index", remote_index, "--config", CONFIG, "index", "--inputs", url,
               "--workers", 1)
        report = tmp_path / "cpt"  # the folder's name is the report's on the bucket (plan.json)
        ok("--index", local_index, "--config", CONFIG, "scan", "--inputs", V1, V2,
           "--output", report, "--workers", 1)
        remote_report = s3.url("reports/cpt")
        out = ok("--index", remote_index, "--config", CONFIG, "scan", "--inputs", *urls,
                 "--output", remote_report, "--workers", 1)
        assert out.startswith(f"report {remote_report}:")
        yield s3, {"urls": urls, "local_index": local_index, "remote_index": remote_index,
                   "report": report, "remote_report": remote_report}


def test_validate_reads_packages_on_the_bucket(s3: S3Server) -> None:
    urls = [upload(s3, V1, "snap/cpt-v1"), upload(s3, V2, "snap/cpt-v2")]
    assert ok("snapshot", "validate", *urls) == ok("snapshot", "validate", V1, V2)
    # a shard edited on the bucket (same size) fails its sha256, as locally
    shard = sorted(p for p in (V1 / "data").rglob("*") if p.is_file())[0]
    body = bytearray(shard.read_bytes())
    body[10] = ord("#") if body[10] != ord("#") else ord("%")
    key = f"snap/cpt-v1/{shard.relative_to(V1)}"
    s3.client().put_object(Bucket=s3.bucket, Key=key, Body=bytes(body))
    refused(["snapshot", "validate", urls[0]], "package cpt-v1",
            shard.relative_to(V1).as_posix())


def test_index_and_scan_on_the_bucket_match_the_local_run(pooled: tuple) -> None:
    s3, pools = pooled
    def dump(index: Path) -> list[str]:  # every row, but the batches' times
        with contextlib.closing(sqlite3.connect(index)) as con:
            return [re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "T", line)
                    for line in con.iterdump()]

    local = dump(pools["local_index"])
    assert len(local) > 1000
    assert local == dump(pools["remote_index"])
    remote_tree = download(s3, "reports/cpt")
    same_report(tree_bytes(pools["report"]), remote_tree,
                {str(V1): pools["urls"][0], str(V2): pools["urls"][1]})
    # nothing is left beside the report (the staging prefix is gone)
    assert [k for k in s3.keys("reports/") if not k.startswith("reports/cpt/")] == []


def test_an_existing_report_url_is_refused(pooled: tuple) -> None:
    s3, pools = pooled
    before = download(s3, "reports/cpt")
    refused(["--quiet", "--index", pools["remote_index"], "--config", CONFIG, "scan",
             "--inputs", *pools["urls"], "--output", pools["remote_report"], "--workers", 1],
            f"output {pools['remote_report']} already exists")
    assert download(s3, "reports/cpt") == before


def test_verify_and_explain_read_reports_on_the_bucket(pooled: tuple) -> None:
    s3, pools = pooled
    url, report = pools["remote_report"], pools["report"]
    assert ok("report", "verify", url) == ok("report", "verify", report).replace(
        str(report), url)
    assert ok("report", "verify", url, "--inputs", *pools["urls"]).startswith(f"report {url}:")
    decisions = [json.loads(line) for line in
                 (report / "decisions.jsonl").read_bytes().splitlines()]
    excluded = next(d for d in decisions if d["decision"] == "exclude")
    pid, sid = excluded["package_id"], excluded["sample_id"]
    local = json.loads(ok("report", "explain", report, pid, sid, "--json"))
    remote = json.loads(ok("report", "explain", url, pid, sid, "--json"))
    assert remote == json.loads(json.dumps(local).replace(str(report), url))
    assert ok("report", "diff", url, url, "--json") == \
        ok("report", "diff", report, report, "--json").replace(str(report), url)
    # a report on the bucket that was tampered with fails as locally, naming the URL
    client = s3.client()
    key = "reports/cpt/decisions.jsonl"
    body = client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=s3.bucket, Key=key, Body=body.replace(b"exclude", b"keep", 1))
    try:
        line = refused(["report", "verify", url], f"report {url}")
        assert "near-dedup-fetch" not in line
    finally:  # the report as it was, for the next test
        client.put_object(Bucket=s3.bucket, Key=key, Body=body)


def mixture_config(root: Path, name: str, inputs: list, report: object) -> Path:
    cfg = {"name": "mix", "kind": "cpt", "inputs": [str(p) for p in inputs],
           "target_records": 10, "group_by": "domain",
           "strategy": {"type": "temperature", "temperature": 2.0},
           "quality": {"min_chars": 0}, "allow_shortfall": False, "redistribute": True,
           "seed": 7, "near_dedup_report": str(report)}
    path = root / f"{name}.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def test_mixture_build_and_verify_on_the_bucket(pooled: tuple, tmp_path: Path) -> None:
    s3, pools = pooled
    local_cfg = mixture_config(tmp_path, "local", [V1, V2], pools["report"])
    remote_cfg = mixture_config(tmp_path, "remote", pools["urls"], pools["remote_report"])
    local = tmp_path / "mixture"
    ok("mixture", "build", local_cfg, "--output", local)
    url = s3.url("mixtures/mix")
    assert ok("mixture", "build", remote_cfg, "--output", url).startswith(
        f"built mixture mix at {url}:")
    remote_tree = download(s3, "mixtures/mix")
    local_tree = tree_bytes(local)
    assert sorted(remote_tree) == sorted(local_tree)
    # what differs is what records the inputs as given: the mixture's manifest and plan, and
    # the report embedded in it (with the sha256 of its manifest)
    recorded = {str(V1): pools["urls"][0], str(V2): pools["urls"][1]}
    embedded = "near-dedup/"
    same_report({k[len(embedded):]: v for k, v in local_tree.items() if k.startswith(embedded)},
                {k[len(embedded):]: v for k, v in remote_tree.items()
                 if k.startswith(embedded)}, recorded)
    recorded[str(pools["report"])] = pools["remote_report"]
    sha = {hashlib.sha256(local_tree[embedded + "manifest.json"]).hexdigest():
           hashlib.sha256(remote_tree[embedded + "manifest.json"]).hexdigest()}
    for name, body in local_tree.items():
        if name in ("manifest.json", "plan.json"):
            text = remote_tree[name].decode()
            for given_locally, given in [*recorded.items(), *sha.items()]:
                text = text.replace(json.dumps(given), json.dumps(given_locally))
            if name == "plan.json":  # the plan names the report by its folder's name
                plan, local_plan = json.loads(text), json.loads(body)
                assert plan["near_dedup_report"].pop("path") == \
                    str(pools["remote_report"]).rstrip("/").rsplit("/")[-1]
                assert local_plan["near_dedup_report"].pop("path") == Path(pools["report"]).name
                assert plan == local_plan
                continue
            assert text.encode() == body, name
        elif not name.startswith(embedded) and name != "checksums.sha256":
            assert remote_tree[name] == body, name  # the data, byte for byte
    assert ok("mixture", "verify", url) == ok("mixture", "verify", local).replace(
        str(local), url)
    before = download(s3, "mixtures/mix")
    refused(["mixture", "build", remote_cfg, "--output", url], f"output {url} already exists")
    assert download(s3, "mixtures/mix") == before


def test_missing_bucket_and_denied_credentials(s3: S3Server, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    missing = f"s3://{s3.bucket}-missing/snapshots/cpt-v1"
    refused(["snapshot", "validate", missing], missing, "no such bucket")
    url = upload(s3, V1, "snapshots/cpt-v1")
    index = tmp_path / "index.sqlite"
    ok("--index", index, "--config", CONFIG, "index", "--inputs", url, "--workers", 1)
    # a user whose policy denies writes: the scan's report is refused, nothing is left
    key, secret = deny_writes_user(s3)
    s3.enforce_auth()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    out = s3.url("reports/denied")
    line = refused(["--quiet", "--index", index, "--config", CONFIG, "scan", "--inputs", url,
                    "--output", out, "--workers", 1], "access denied")
    assert secret not in line
    assert s3.keys("reports/", key=key, secret=secret) == []
    # a wrong secret: refused credentials, named without the secret
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + SECRET_KEY)
    line = refused(["snapshot", "validate", url], url, "credentials were refused")
    assert SECRET_KEY not in line


def test_expired_credentials_and_an_unreachable_endpoint(s3: S3Server, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Through the CLI: one line naming the URL, exit 1, nothing written — with credentials
    from the chain that have expired, and with an endpoint nobody listens on (in seconds)."""
    import socket
    import time

    url = upload(s3, V1, "snapshots/cpt-v1")
    index = tmp_path / "index.sqlite"
    ok("--index", index, "--config", CONFIG, "index", "--inputs", url, "--workers", 1)
    before = index.read_bytes()
    out = s3.url("reports/cpt")
    scan = ["--quiet", "--index", index, "--config", CONFIG, "scan", "--inputs", url,
            "--output", out, "--workers", 1]
    with monkeypatch.context() as expired:
        secret = expire_credentials(expired, tmp_path)
        for line in (refused(["snapshot", "validate", url], url, "the credentials have expired"),
                     refused(scan, out, "the credentials have expired")):
            assert secret not in line
        # as a process of its own (no test harness configuring logging): botocore's warning
        # about the expired credentials is not printed beside the one line
        done = subprocess.run([sys.executable, "-m", "near_dedup_core", "snapshot", "validate",
                               url], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1
        assert done.stderr == f"near-dedup: error: {url}: the credentials have expired\n"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with monkeypatch.context() as unreachable:
        unreachable.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        started = time.monotonic()
        refused(scan, out, f"cannot reach the storage endpoint http://127.0.0.1:{port}")
        assert time.monotonic() - started < 20
    assert s3.keys() == sorted(f"snapshots/cpt-v1/{p.relative_to(V1).as_posix()}"
                               for p in V1.rglob("*") if p.is_file())
    assert index.read_bytes() == before


def test_contamination_on_the_bucket_matches_the_local_run(s3: S3Server,
                                                          tmp_path: Path) -> None:
    evals, pool = upload(s3, V2, "evals/cpt-v2"), upload(s3, V1, "snapshots/cpt-v1")
    local = tmp_path / "contamination"
    ok("--config", CONFIG, "contamination", "--evals", V2, "--inputs", V1, "--output", local,
       "--workers", 1)
    url = s3.url("reports/contamination")
    assert ok("--config", CONFIG, "contamination", "--evals", evals, "--inputs", pool,
              "--output", url, "--workers", 1).startswith(f"contamination report {url}")
    local_tree = tree_bytes(local)
    assert b'"eval"' in local_tree["contamination.jsonl"]  # v2 repeats texts of v1
    same_report(local_tree, download(s3, "reports/contamination"), {str(V2): evals, str(V1): pool})
    assert ok("report", "verify", url, "--inputs", evals, pool) == \
        ok("report", "verify", local, "--inputs", V2, V1).replace(str(local), url)
    refused(["--config", CONFIG, "contamination", "--evals", evals, "--inputs", pool,
             "--output", url, "--workers", 1], f"output {url} already exists")


def test_an_output_in_a_missing_bucket_and_a_server_stopped_mid_scan(
        s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from near_dedup_core.scan import run as scan_run

    url = upload(s3, V1, "snapshots/cpt-v1")
    index = tmp_path / "index.sqlite"
    ok("--index", index, "--config", CONFIG, "index", "--inputs", url, "--workers", 1)
    missing = f"s3://{s3.bucket}-missing/reports/cpt"
    refused(["--quiet", "--index", index, "--config", CONFIG, "scan", "--inputs", url,
             "--output", missing, "--workers", 1], missing, "no such bucket")
    # the server goes away after the packages were read, before the report is published
    monkeypatch.setattr(scan_run, "pause_point", lambda stage: s3.stop())
    out = s3.url("reports/cpt")
    started = time.monotonic()
    line = refused(["--quiet", "--index", index, "--config", CONFIG, "scan", "--inputs", url,
                    "--output", out, "--workers", 1], out, "cannot reach the storage endpoint",
                   "nothing was published")
    assert time.monotonic() - started < 60, line


def test_without_s3fs_a_url_argument_is_one_line_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib

    monkeypatch.setitem(sys.modules, "s3fs", None)  # as without the s3 extra
    monkeypatch.delitem(importlib.import_module("fsspec.registry")._registry, "s3",
                        raising=False)
    url = "s3://bucket/snapshots/cpt-v1"
    for argv in (["snapshot", "validate", url],
                 ["--index", tmp_path / "i.sqlite", "index", "--inputs", url],
                 ["--index", tmp_path / "i.sqlite", "scan", "--inputs", V1, "--output",
                  "s3://bucket/reports/r"],
                 ["report", "verify", "s3://bucket/reports/r"],
                 ["mixture", "verify", "s3://bucket/mixtures/m"]):
        refused(argv, "s3://bucket/", "pip install 'near-dedup[s3]'")
    assert not (tmp_path / "i.sqlite").exists()


def test_gzip_packages_and_the_package_rules_on_the_bucket(s3: S3Server, tmp_path: Path) -> None:
    from helpers import make_package, stdlib_paragraphs

    texts = stdlib_paragraphs()[:40]
    pkg = make_package(tmp_path, "gz-v1", {"train": [{"id": f"s{i}", "text": t}
                                                      for i, t in enumerate(texts)]},
                       shard_records=15, gz=True)
    url = upload(s3, pkg, "snapshots/gz-v1")
    assert ok("snapshot", "validate", url) == ok("snapshot", "validate", pkg)
    local_index, remote_index = tmp_path / "l.sqlite", tmp_path / "r.sqlite"
    ok("--index", local_index, "index", "--inputs", pkg, "--workers", 1)
    ok("--index", remote_index, "index", "--inputs", url, "--workers", 1)
    ok("--index", local_index, "scan", "--inputs", pkg, "--output", tmp_path / "rep",
       "--workers", 1)
    ok("--index", remote_index, "scan", "--inputs", url, "--output", s3.url("reports/gz"),
       "--workers", 1)
    same_report(tree_bytes(tmp_path / "rep"), download(s3, "reports/gz"), {str(pkg): url})
    # a file under data/ that the manifest does not list, and a listed shard that is gone
    client = s3.client()
    client.put_object(Bucket=s3.bucket, Key="snapshots/gz-v1/data/train/extra.jsonl", Body=b"")
    refused(["snapshot", "validate", url], "package gz-v1, data/train/extra.jsonl",
            "not listed in manifest.json")
    client.delete_object(Bucket=s3.bucket, Key="snapshots/gz-v1/data/train/extra.jsonl")
    client.delete_object(Bucket=s3.bucket, Key="snapshots/gz-v1/data/train/part-00001.jsonl.gz")
    refused(["snapshot", "validate", url], "package gz-v1, data/train/part-00001.jsonl.gz",
            "listed in manifest.json but missing")
    refused(["snapshot", "validate", s3.url("snapshots/none")], s3.url("snapshots/none"),
            "no such prefix")


def test_a_shard_replaced_after_the_listing_is_refused(s3: S3Server,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from near_dedup_core.package import stream

    url = upload(s3, V1, "snapshots/cpt-v1")
    shard = sorted(p for p in (V1 / "data").rglob("*") if p.is_file())[0]
    rel = shard.relative_to(V1).as_posix()
    body = bytearray(shard.read_bytes())
    body[10] = ord("#") if body[10] != ord("#") else ord("%")
    opened = stream.stream_records

    def replace_then_stream(packages):  # same size, other bytes: another version (ETag)
        s3.client().put_object(Bucket=s3.bucket, Key=f"snapshots/cpt-v1/{rel}",
                               Body=bytes(body))
        return opened(packages)

    monkeypatch.setattr(stream, "stream_records", replace_then_stream)
    refused(["snapshot", "validate", url], f"{url}/{rel}", "changed since it was listed")


def test_worker_pools_read_packages_on_the_bucket(s3: S3Server, tmp_path: Path) -> None:
    """Over `workers.POOL_RECORDS` records and two workers: index's reader streams the shards
    into the memory it shares with its workers, and scan's worker re-hashes the data files
    from the bucket; the index and the report are those of the local run."""
    from helpers import make_package, stdlib_paragraphs

    from near_dedup_core.workers import POOL_RECORDS

    texts = stdlib_paragraphs()
    records = [{"id": f"s{i}", "text": f"{i} {texts[i % len(texts)]}"}
               for i in range(POOL_RECORDS + 500)]
    pkg = make_package(tmp_path, "big-v1", {"train": records}, shard_records=1000)
    url = upload(s3, pkg, "snapshots/big-v1")
    local_index, remote_index = tmp_path / "l.sqlite", tmp_path / "r.sqlite"
    def cli(*argv: object) -> None:  # own process: its workers see this test's server
        run = subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet",
                              *map(str, argv)], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr

    cli("--index", local_index, "index", "--inputs", pkg, "--workers", 2)
    cli("--index", remote_index, "index", "--inputs", url, "--workers", 2)
    cli("--index", local_index, "scan", "--inputs", pkg, "--output", tmp_path / "rep",
        "--workers", 2)
    cli("--index", remote_index, "scan", "--inputs", url, "--output", s3.url("reports/big"),
        "--workers", 2)
    same_report(tree_bytes(tmp_path / "rep"), download(s3, "reports/big"), {str(pkg): url})


def test_the_daily_release_on_the_bucket_matches_the_local_run(s3: S3Server,
                                                               tmp_path: Path) -> None:
    """Two release days through Dagster with the snapshot, report, mixture and release roots
    on the bucket, against the same two days on local disk: each day's report is the local
    one byte for byte but for the recorded input locations, the mixture's data and the day's
    mixture.json are the same bytes, the site is published next to the report, the checks
    pass, the metadata links the bucket's locations as URLs, and a day released again keeps
    what the bucket holds."""
    import dagster as dg
    from helpers import settings_for

    from near_dedup_assets.assets import INDEX_APPEND, MIXTURE, RELEASE_ASSETS, SCAN_REPORT
    from near_dedup_assets.checks import RELEASE_CHECKS

    days = ["2026-11-25", "2026-11-26"]
    snapshots = SAMPLES / "cpt"
    for day in days:
        for package in (snapshots / day).iterdir():
            upload(s3, package, f"snapshots/{day}/{package.name}")
    local = settings_for(tmp_path / "local", snapshots)
    remote = settings_for(tmp_path / "remote", snapshots, snapshot_root=s3.url("snapshots"),
                          report_root=s3.url("release/reports"),
                          mixture_root=s3.url("release/mixtures"),
                          release_root=s3.url("release/records"))
    graph = [*RELEASE_ASSETS, *RELEASE_CHECKS]

    published: dict[str, bytes] = {}

    def release_days(settings: object, rerun: bool = False) -> list[dict]:
        found = []
        with dg.instance_for_test() as instance:
            for day in [*days, *days[-1:]] if rerun else days:
                if len(found) == len(days):  # what the bucket holds before the day again
                    published.update(download(s3, "release"))
                result = dg.materialize(graph, partition_key=day, instance=instance,
                                        resources={"release": settings}, raise_on_error=False)
                assert result.success, day
                checks = result.get_asset_check_evaluations()
                assert len(checks) == 4 and all(c.passed for c in checks), checks
                found.append({e.asset_key: e.materialization.metadata
                              for e in result.get_asset_materialization_events()})
        return found

    local_meta = release_days(local)
    remote_meta = release_days(remote, rerun=True)
    for day, here, there in zip(days, local_meta, remote_meta, strict=False):
        packages = {str(p): s3.url(f"snapshots/{day}/{p.name}")
                    for p in (snapshots / day).iterdir()}
        report = f"release/reports/near-cpt-{day}"
        same_report(tree_bytes(local.report_dir(day).local_path), download(s3, report), packages)
        # the reviewers' site, published next to the report
        site = download(s3, f"{report}-site")
        assert sorted(site) == sorted(tree_bytes(local.report_dir(day).local_path.with_name(
            f"near-cpt-{day}-site")))
        assert b"index.html" in site["checksums.sha256"]
        # the mixture's data and the day's portable mixture config are the local bytes
        mixture = download(s3, f"release/mixtures/cpt-mix-{day}")
        local_mixture = tree_bytes(local.mixture_dir(day).local_path)
        assert sorted(mixture) == sorted(local_mixture)
        for name, body in local_mixture.items():
            if name.startswith("data/"):
                assert mixture[name] == body, name
        record = download(s3, f"release/records/cpt-{day}")
        assert record["mixture.json"] == (local.release_dir(day).local_path / "mixture.json"
                                          ).read_bytes()
        released = json.loads(record["release.json"])
        assert released["report"]["path"] == f"near-cpt-{day}"
        assert [i["path"] for i in released["inputs"]] == [f"{day}/cpt-v{days.index(day) + 1}"]
        # the same figures; the bucket's locations as links, local ones as paths
        for key in ("records_in", "kept", "excluded", "relations", "history_only_relations"):
            assert here[SCAN_REPORT][key] == there[SCAN_REPORT][key], key
        assert there[SCAN_REPORT]["report"] == dg.MetadataValue.url(s3.url(report))
        assert there[SCAN_REPORT]["site"] == dg.MetadataValue.url(
            s3.url(f"{report}-site/index.html"))
        assert here[SCAN_REPORT]["report"] == dg.MetadataValue.path(str(local.report_dir(day)))
        assert there[MIXTURE]["mixture"] == dg.MetadataValue.url(
            s3.url(f"release/mixtures/cpt-mix-{day}"))
        assert there[dg.AssetKey("validated_snapshot")]["snapshot_folder"] == \
            dg.MetadataValue.url(s3.url(f"snapshots/{day}"))
    assert remote_meta[1][SCAN_REPORT]["previous_day"] == dg.MetadataValue.url(
        s3.url(f"release/reports/near-cpt-{days[0]}"))
    assert remote_meta[1][SCAN_REPORT]["vs_previous_newly_excluded"] == \
        local_meta[1][SCAN_REPORT]["vs_previous_newly_excluded"]
    # the day released again: its report, site and mixture on the bucket are kept as they are
    again = remote_meta[2]
    assert again[INDEX_APPEND]["report_was_already_frozen"] == dg.MetadataValue.bool(True)
    assert again[MIXTURE]["reused_published_mixture"] == dg.MetadataValue.bool(True)
    assert published and download(s3, "release") == published


def test_the_release_contamination_step_on_the_bucket_matches_the_local_run(
        s3: S3Server, tmp_path: Path) -> None:
    """The release's contamination step with the eval sets and the contamination root on the
    bucket (as well as the snapshot and mixture roots): the same report as on local disk but
    for the recorded locations, the same mixture data; released again, it is kept."""
    import dagster as dg
    from helpers import settings_for, template

    from near_dedup_assets.assets import RELEASE_ASSETS
    from near_dedup_assets.checks import RELEASE_CHECKS
    from near_dedup_assets.contamination import CONTAMINATION_REPORT, with_contamination

    day = "2026-11-25"
    pool = upload(s3, V1, f"snapshots/{day}/cpt-v1")
    evals = upload(s3, V2, "evals/cpt-v2")
    # the next day's snapshot as an eval set leaves few clean samples: a short mixture is
    # recorded, not refused
    short = str(template(tmp_path / "template.json", allow_shortfall=True))
    local = settings_for(tmp_path / "local", SAMPLES / "cpt", evals=str(V2.parent),
                         contamination_root=str(tmp_path / "local" / "contamination"),
                         mixture_template=short)
    remote = settings_for(tmp_path / "remote", SAMPLES / "cpt",
                          snapshot_root=s3.url("snapshots"), evals=s3.url("evals"),
                          mixture_root=s3.url("mixtures"),
                          contamination_root=s3.url("contamination"), mixture_template=short)
    assets, checks = with_contamination(list(RELEASE_ASSETS), list(RELEASE_CHECKS), False)
    with dg.instance_for_test() as instance:
        runs = [dg.materialize([*assets, *checks], partition_key=day, instance=instance,
                               resources={"release": settings}, raise_on_error=False)
                for settings in (local, remote, remote)]
    assert all(run.success for run in runs)
    report = f"contamination/contamination-cpt-{day}"
    local_tree = tree_bytes(local.contamination_dir(day).local_path)
    assert b'"eval"' in local_tree["contamination.jsonl"]
    same_report(local_tree, download(s3, report), {str(V1): pool, str(V2): evals})
    mixture = download(s3, f"mixtures/cpt-mix-{day}")
    for name, body in tree_bytes(local.mixture_dir(day).local_path).items():
        if name.startswith("data/"):
            assert mixture[name] == body, name
    [first, again] = [{e.asset_key: e.materialization.metadata
                       for e in run.get_asset_materialization_events()} for run in runs[1:]]
    assert first[CONTAMINATION_REPORT]["report"] == dg.MetadataValue.url(s3.url(report))
    assert first[CONTAMINATION_REPORT]["reused"] == dg.MetadataValue.bool(False)
    assert again[CONTAMINATION_REPORT]["reused"] == dg.MetadataValue.bool(True)
    checks = [(c.check_name, c.passed) for run in runs for c in run.get_asset_check_evaluations()]
    assert len(checks) == 3 * 5  # no_new_contamination warns: the eval set is in the pool
    assert checks == [(name, name != "no_new_contamination") for name, _ in checks]
