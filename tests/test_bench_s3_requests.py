"""`bench/s3_requests.py` (docs/iceberg.md, "Commands on S3"): the steps of the docs' block on
moto's S3 server with a PostgreSQL catalog it starts, each step's requests counted by method
and kind (here three of the steps: two batches and a scan); a table's metadata files are fetched
with one GET each, none twice by the scan."""

from __future__ import annotations

import orjson
import pytest
from pg_server import require_bindir

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")
pytest.importorskip("s3fs", reason="pip install 'near-dedup[s3]'")

from bench import s3_requests  # noqa: E402


@pytest.mark.slow  # a PostgreSQL server, moto's and three commands
def test_bench_s3_requests_counts_each_steps_requests(tmp_path, monkeypatch):
    require_bindir()
    monkeypatch.setenv("NEAR_DEDUP_ICEBERG_BUCKETS", "4")  # few band files: a short run
    s3_requests.main(["--out", str(tmp_path / "out"), "--steps", "index-v1", "index-v2",
                      "scan"])
    result = orjson.loads((tmp_path / "out" / "result.json").read_bytes())
    [run] = result["runs"]
    assert [s["step"] for s in run["steps"]] == ["index-v1", "index-v2", "scan"]
    assert result["reports_identical"] and run["requests"] == sum(
        s["requests"] for s in run["steps"]) > 0
    kinds = {k for s in run["steps"] for k in s["by_kind"]}
    assert {"GET json", "GET avro", "GET parquet", "PUT parquet"} <= kinds, kinds
    scan = next(s for s in run["steps"] if s["step"] == "scan")
    # a table's metadata files: a GET each, no HEAD, none fetched twice by the scan (a table
    # keeps what it fetched for its next plan)
    assert not {"HEAD json", "HEAD avro"} & set(scan["by_kind"]), scan
    assert scan["metadata_fetched_again"] == 0, scan
    assert "ratio_requests" not in result  # no earlier checkout given
