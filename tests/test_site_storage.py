"""`report html` with reports and sites on object storage (moto's S3 server, `s3_server`):
the report, ``--against`` and ``--contamination`` read from ``s3://`` URLs and the site
published to one give the local build's files byte for byte; a site URL that exists, or lies
inside the report, is one line and leaves the bucket as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SAMPLES, make_package, refused, run_cli, tree_bytes
from s3_server import S3Server, run_s3_server

pytestmark = pytest.mark.slow  # three scans, a contamination report and five sites

CPT = SAMPLES / "cpt"
V1, V2, V3 = (CPT / "2026-11-25" / "cpt-v1", CPT / "2026-11-26" / "cpt-v2",
              CPT / "2026-11-27" / "cpt-v3")


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
    client = s3.client()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{path.relative_to(folder)}",
                              Body=path.read_bytes())
    return s3.url(prefix)


def download(s3: S3Server, prefix: str) -> dict[str, bytes]:
    client = s3.client()
    return {key[len(prefix) + 1:]: client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
            for key in s3.keys(prefix + "/")}


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two days' reports (v1+v2, v1+v2+v3) and a contamination report against v1."""
    root = tmp_path_factory.mktemp("reports")
    index = root / "cpt.sqlite"
    for pkg in (V1, V2, V3):
        ok("--index", index, "index", "--inputs", pkg, "--workers", 1)
    old, new = root / "near-cpt-v2", root / "near-cpt-v3"
    ok("--index", index, "scan", "--inputs", V1, V2, "--output", old, "--workers", 1)
    ok("--index", index, "scan", "--inputs", V1, V2, V3, "--output", new, "--workers", 1)
    shard = sorted((V1 / "data" / "train").glob("*.jsonl"))[0]
    item = " ".join(json.loads(shard.read_text().splitlines()[0])["text"].split(" ")[3:40])
    evals = make_package(root, "evals-v1", {"test": [{"id": "q1", "text": item}]})
    contam = root / "contamination"
    ok("contamination", "--evals", evals, "--inputs", V1, "--output", contam, "--workers", 1)
    return {"old": old, "new": new, "contamination": contam}


def test_a_site_from_and_to_the_bucket_is_the_local_site(s3: S3Server, local: dict[str, Path],
                                                         tmp_path: Path) -> None:
    urls = {role: upload(s3, folder, f"reports/{folder.name}") for role, folder in local.items()}
    ok("report", "html", local["new"], "--against", local["old"], "--contamination",
       local["contamination"], "--output", tmp_path / "site-local")
    expected = tree_bytes(tmp_path / "site-local")
    assert "contamination/index.html" in expected and "changes/index.html" in expected

    # everything on the bucket, the site too
    site_url = s3.url("sites/near-cpt-v3")
    out = ok("report", "html", urls["new"], "--against", urls["old"], "--contamination",
             urls["contamination"], "--output", site_url)
    assert out.startswith(f"site {site_url}: ") and out.rstrip().endswith(
        f"open {site_url}/index.html"), out
    assert download(s3, "sites/near-cpt-v3") == expected
    assert [k for k in s3.keys("sites/") if not k.startswith("sites/near-cpt-v3/")] == []

    # the report on the bucket, the site local; and a local report published to the bucket
    ok("report", "html", urls["new"], "--against", urls["old"], "--contamination",
       urls["contamination"], "--output", tmp_path / "site-from-bucket")
    assert tree_bytes(tmp_path / "site-from-bucket") == expected
    ok("report", "html", local["new"], "--against", local["old"], "--contamination",
       local["contamination"], "--output", s3.url("sites/from-disk"))
    assert download(s3, "sites/from-disk") == expected

    # an existing site URL, and one inside the report: one line each, the bucket unchanged
    before = {key: download(s3, key.rsplit("/", 1)[0]) for key in ("reports/x", "sites/x")}
    refused(["report", "html", urls["new"], "--output", site_url],
            f"output {site_url} already exists")
    refused(["report", "html", urls["new"], "--output", f"{urls['new']}/site"],
            f"output {urls['new']}/site is inside the report {urls['new']}")
    assert {key: download(s3, key.rsplit("/", 1)[0]) for key in before} == before


def test_a_report_url_that_does_not_verify_is_one_line_naming_it(
        s3: S3Server, local: dict[str, Path]) -> None:
    report = local["old"]
    url = upload(s3, report, "reports/near-cpt-v2")
    client = s3.client()
    key = "reports/near-cpt-v2/decisions.jsonl"
    body = client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=s3.bucket, Key=key, Body=body.replace(b"exclude", b"keep", 1))
    line = refused(["report", "html", url, "--output", s3.url("sites/bad")], f"report {url}")
    assert "near-dedup-fetch" not in line
    assert s3.keys("sites/") == []
