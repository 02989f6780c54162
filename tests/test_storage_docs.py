"""docs/storage.md's commands from a new bucket to a verified report, verbatim in bash
against moto's S3 server, and what the docs say the index can be."""

from __future__ import annotations

import re

import pytest
from helpers import REPO, run_doc_block
from s3_server import run_s3_server

pytestmark = pytest.mark.slow


def test_the_bucket_upload_and_report_block_runs_against_s3(monkeypatch, tmp_path):
    with run_s3_server(monkeypatch, tmp_path / "aws") as s3:
        bucket = "docs-bucket"  # a new one: the block creates it
        run, block = run_doc_block("storage.md", "### From a new bucket to a verified report",
                                   tmp_path, {"BUCKET": bucket})
        assert "valid: cpt-v1 (cpt, 49 records" in run.stdout
        assert f"report s3://{bucket}/reports/cpt-v1: OK" in run.stdout
        keys = sorted(obj["Key"] for page in s3.client().get_paginator("list_objects_v2")
                      .paginate(Bucket=bucket) for obj in page.get("Contents", []))
        assert "snapshots/cpt-v1/manifest.json" in keys
        assert "reports/cpt-v1/checksums.sha256" in keys
        assert "sites/cpt-v1/index.html" in keys
        assert "mkdir" in block and "put(" in block


def test_readme_and_storage_docs_agree_that_the_index_can_be_iceberg_on_s3():
    storage = (REPO / "docs" / "storage.md").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    iceberg = (REPO / "docs" / "iceberg.md").read_text(encoding="utf-8")
    assert "stays a SQLite file or a PostgreSQL URL" not in storage
    for text in (storage, readme):
        assert "iceberg+s3://bucket/prefix?catalog=postgresql://" in text
    assert re.search(r"^INDEX=\"iceberg\+s3://", iceberg, re.MULTILINE)  # run by a test
