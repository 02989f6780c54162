"""The Iceberg index with a shared PostgreSQL catalog, its warehouse on S3 (moto's server) or
in a folder (docs/iceberg.md, "Where the index lives").

`index` + `scan` give reports byte-identical to a SQLite index, also after `index compact`;
a SIGKILL during an append leaves an index whose next scan is the report of before; of two
concurrent appends (two processes, no lock between them) the one that loses the catalog's
commit runs again on the new state and lands as the next batch; expiry
keeps the state a running scan pinned; `index check` works on the bucket; bad locations and
states are one line, exit 1, nothing written.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    REPO,
    SAMPLES,
    refused,
    run_cli,
    run_doc_block,
    scan_with_an_append_meanwhile,
    tree_bytes,
)

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")
pytest.importorskip("s3fs", reason="pip install 'near-dedup[s3]'")
from pg_server import PASSWORD, PostgresServer, require_bindir  # noqa: E402

# The session's PostgreSQL server and moto's S3 server (conftest.py, `shared_catalog`).
pytestmark = pytest.mark.slow

require_bindir()

CPT = SAMPLES / "cpt"
V1 = CPT / "2026-11-25" / "cpt-v1"
V2 = CPT / "2026-11-26" / "cpt-v2"
V3 = CPT / "2026-11-27" / "cpt-v3"


@pytest.fixture(scope="module")
def env(shared_catalog):
    """A bucket of moto's S3 server and the PostgreSQL server for the module; the catalog's
    password in PGPASSWORD (never in the location)."""
    return shared_catalog


def catalog_url(pg: PostgresServer) -> str:
    """A new database on the server, as a URL without the password."""
    return pg.create_database().replace(f":{PASSWORD}@", "@")


@pytest.fixture
def remote(env, request) -> str:
    """A new index location: a fresh prefix of the bucket, a fresh catalog database."""
    s3, pg = env
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40]
    return f"iceberg+s3://{s3.bucket}/{name}?catalog={catalog_url(pg)}"


def ok(index: str | Path, *inputs: Path) -> str:
    code, out, err = run_cli("--quiet", "--index", index, "index", "--inputs", *inputs)
    assert (code, err) == (0, ""), err
    return out


def scan_ok(index: str | Path, out: Path, *inputs: Path) -> dict[str, bytes]:
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", *inputs,
                           "--output", out)
    assert (code, err) == (0, ""), err
    return tree_bytes(out)


def maintain(index: str, *action: str) -> str:
    code, out, err = run_cli("--quiet", "--index", index, "index", *action)
    assert (code, err) == (0, ""), err
    return out


def table_count(url: str) -> int:
    """Tables in a catalog database (0: nothing was created in it)."""
    import psycopg

    with psycopg.connect(url.replace("postgresql://postgres@",
                                     f"postgresql://postgres:{PASSWORD}@")) as con:
        row = con.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                          ).fetchone()
    assert row is not None
    return int(row[0])


def catalog_of(index: str) -> str:
    return index.split("?catalog=", 1)[1]


def prefix_of(index: str) -> str:
    return index.split("?", 1)[0].split("/", 3)[3]


_PAUSE_BEFORE_COMMIT = """
import os, sys, time
from near_dedup_core import cli
from near_dedup_core.index_store.iceberg import batch
publish = batch.publish
def pause_then_publish(*args):
    print("paused before the commit", file=sys.stderr, flush=True)
    flag = os.environ["PAUSE_FLAG"]
    while os.path.exists(flag):
        time.sleep(0.05)
    publish(*args)
batch.publish = pause_then_publish
sys.exit(cli.main(sys.argv[1:]))
"""


def start_paused(index: str, pkg: Path, flag: Path) -> subprocess.Popen:
    """``index --inputs pkg`` in a process of its own, paused after every data table's
    append, before its commit, until ``flag`` is removed."""
    flag.touch()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PAUSE_FLAG": str(flag)}
    proc = subprocess.Popen([sys.executable, "-c", _PAUSE_BEFORE_COMMIT, "--quiet", "--index",
                             index, "index", "--inputs", str(pkg)], env=env,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline() if proc.stderr else ""
    assert "paused before the commit" in line, (line, proc.poll(),
                                                proc.stderr.read() if proc.stderr else "")
    return proc


# --------------------------------------------------------------------------- same reports


def test_the_commands_of_docs_iceberg_on_s3_give_the_sqlite_reports(env, tmp_path):
    """docs/iceberg.md's shared-catalog block, verbatim in bash (two batches, a scan,
    compaction, check, expiry): every command exits 0, the scan's report is SQLite's, and the
    index lives in the bucket and the catalog database only."""
    s3, pg = env
    catalog = catalog_url(pg)
    run, block = run_doc_block("iceberg.md", "### Commands on S3", tmp_path,
                               {"BUCKET": s3.bucket, "CATALOG": catalog})
    assert "nothing to compact" in run.stdout and "compacted" in run.stdout and "OK (2 batches" in run.stdout
    assert "expired" in run.stdout
    assert PASSWORD not in run.stdout + run.stderr

    # the same index and scan commands on a SQLite index, from the same folder
    lines = [line for line in block.splitlines() if line.startswith("near-dedup")
             and (" index --inputs " in line or " scan " in line)]
    assert len(lines) == 3
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        for line in lines:
            args = line.split(maxsplit=3)[3].replace("s3-v2", "lite-v2").split()
            code, _, err = run_cli("--quiet", "--index", "lite.sqlite", *args)
            assert (code, err) == (0, ""), err
    assert tree_bytes(tmp_path / "data" / "reports" / "s3-v2") == \
        tree_bytes(tmp_path / "data" / "reports" / "lite-v2")
    keys = s3.keys("indexes/cpt/")
    assert any(k.endswith(".parquet") and "/bands/data/bucket=" in k for k in keys)
    assert not (tmp_path / "data" / "indexes").exists()
    assert table_count(catalog) == 2  # pyiceberg's catalog tables, nothing else


def test_compaction_a_killed_append_and_check_on_the_bucket(env, remote, tmp_path):
    """`index compact` keeps SQLite's reports; a SIGKILL after every data table's append and
    before the commit leaves an index whose next scan is the report of before, and the next
    append lands as the next batch; `index check` reads the bucket and finds an altered or
    stray object."""
    s3, _ = env
    index, lite = remote, tmp_path / "lite.sqlite"
    for target in (index, lite):
        ok(target, V1)
        ok(target, V2)
    before = scan_ok(lite, tmp_path / "lite-report", V1, V2)
    assert "compacted" in maintain(index, "compact", "--full")
    assert scan_ok(index, tmp_path / "compacted", V1, V2) == before

    proc = start_paused(index, V3, tmp_path / "flag")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert scan_ok(index, tmp_path / "after-kill", V1, V2) == before
    assert "OK (2 batches" in maintain(index, "check")
    assert "batch 3 added cpt-v3" in ok(index, V3)

    prefix = prefix_of(index)
    band = next(k for k in s3.keys(prefix) if "/bands/data/" in k and k.endswith(".parquet"))
    client = s3.client()
    saved = client.get_object(Bucket=s3.bucket, Key=band)["Body"].read()
    stray = band.rsplit("/", 1)[0] + "/00000-0-stray.parquet"
    client.put_object(Bucket=s3.bucket, Key=stray, Body=saved)
    checked = maintain(index, "check")
    assert "OK (3 batches" in checked and f"s3://{s3.bucket}/{stray}" in checked
    assert "orphan data file" not in maintain(index, "expire", "--older-than", "1h")
    assert stray in s3.keys(prefix)  # younger than the retention: a writer's, perhaps
    assert "removed" in maintain(index, "expire", "--older-than", "0s")
    assert stray not in s3.keys(prefix)
    # a file the current snapshot reads (the expiry removed the ones compaction replaced)
    band = next(k for k in s3.keys(prefix) if "/bands/data/" in k and k.endswith(".parquet"))
    saved = client.get_object(Bucket=s3.bucket, Key=band)["Body"].read()
    client.put_object(Bucket=s3.bucket, Key=band, Body=saved + b"x")
    refused(["--index", index, "index", "check"], "damaged", f"s3://{s3.bucket}/{band}",
            "bytes")


def test_a_folder_warehouse_with_a_shared_catalog(env, tmp_path):
    """``iceberg:///folder?catalog=postgresql://…``: the warehouse in a folder, the catalog
    in the database (no catalog.db, no lock files): the SQLite reports."""
    _, pg = env
    folder = tmp_path / "shared-ice"
    index, lite = f"iceberg://{folder}?catalog={catalog_url(pg)}", tmp_path / "lite.sqlite"
    for target in (index, lite):
        ok(target, V1)
        ok(target, V2)
    assert scan_ok(index, tmp_path / "a", V2) == scan_ok(lite, tmp_path / "b", V2)
    assert sorted(p.name for p in folder.iterdir()) == ["warehouse"]


# --------------------------------------------------------------------------- writers, expiry


def test_two_concurrent_appends_each_land_once(remote, tmp_path):
    """Two `index` processes append to one index with no lock between them: the one that
    commits second is refused by the catalog, runs its batch again on the new state and
    lands as the next batch. Each batch is in the index once, and `index check` finds its
    invariants (sources, contents, bands) whole."""
    index = remote
    ok(index, V1)
    flag = tmp_path / "flag"
    first = start_paused(index, V2, flag)  # every data table appended, not committed
    second = subprocess.run([sys.executable, "-m", "near_dedup_core", "--quiet", "--index",
                             index, "index", "--inputs", str(V3)],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "batch 2 added cpt-v3" in second.stdout
    flag.unlink()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert "batch 3 added cpt-v2" in out

    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    pinned = Pinned(index)
    assert sorted(pinned.rows("batches", ("seq", "packages"))) == [
        (1, '["cpt-v1"]'), (2, '["cpt-v3"]'), (3, '["cpt-v2"]')]
    assert "OK (3 batches" in maintain(index, "check")


def test_expiry_keeps_the_state_a_running_scan_pinned(remote, tmp_path):
    """A scan (of cpt-v2 against cpt-v1) pins state 1 and pauses before its history join;
    a compaction replaces state 1's band files. `index expire --older-than 8s` then keeps
    state 1 (its snapshots are older than 8 s, but it was published until moments ago): the
    scan ends with the report of before. Expiry with no retention left drops it; batch 3
    lands after it."""
    index = remote
    ok(index, V1)
    ok(index, V2)
    from near_dedup_core.index_store.iceberg.snapshot import Pinned

    state1 = dict(Pinned(index).state.snapshots)
    made = time.monotonic()
    before = scan_ok(index, tmp_path / "before", V2)

    def compact_and_expire() -> str:
        time.sleep(max(0.0, made + 9 - time.monotonic()))  # state 1 is over 8 s old
        assert "compacted" in maintain(index, "compact", "--full")  # publishes state 2
        maintain(index, "expire", "--older-than", "8s")
        bands = Pinned(index).tables["bands"]
        assert bands.snapshot_by_id(state1["bands"]) is not None
        return "expired"

    scan_with_an_append_meanwhile(
        ["-m", "near_dedup_core"], ["--index", index, "scan", "--inputs", str(V2), "--output",
                                    str(tmp_path / "during")],
        "scan-history", tmp_path / "paused", compact_and_expire)
    assert tree_bytes(tmp_path / "during") == before
    expired = maintain(index, "expire", "--older-than", "0s")
    assert "removed 0 " not in expired  # state 1's band files, replaced by the compaction
    assert Pinned(index).tables["bands"].snapshot_by_id(state1["bands"]) is None
    assert "batch 3 added cpt-v3" in ok(index, V3)
    assert "OK (3 batches" in maintain(index, "check")


# --------------------------------------------------------------------------- refusals


def test_bad_locations_and_states_are_one_line_and_write_nothing(env, tmp_path):
    s3, pg = env
    catalog = catalog_url(pg)
    out = tmp_path / "out"

    # a missing bucket: the catalog database stays empty
    line = refused(["--index", f"iceberg+s3://no-such-bucket-x/ix?catalog={catalog}", "index",
                    "--inputs", V1], "s3://no-such-bucket-x/ix", "no such bucket")
    assert PASSWORD not in line
    assert table_count(catalog) == 0

    # refused credentials: nothing in the bucket or the database
    index = f"iceberg+s3://{s3.bucket}/creds?catalog={catalog}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-never-printed")
        s3.enforce_auth()
        try:
            line = refused(["--index", index, "index", "--inputs", V1],
                           "s3://" + s3.bucket + "/creds: access denied")
        finally:
            s3._moto_api("reset-auth", b"inf")
    assert "wrong-secret" not in line
    assert s3.keys("creds/") == [] and table_count(catalog) == 0

    # an unreachable catalog server
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gone = f"postgresql://postgres@127.0.0.1:{port}/nd"
    refused(["--index", f"iceberg+s3://{s3.bucket}/gone?catalog={gone}", "index", "--inputs",
             V1], f"cannot reach the catalog {gone}")
    refused(["--index", f"iceberg+s3://{s3.bucket}/gone?catalog={gone}", "scan", "--inputs",
             V1, "--output", out], f"cannot reach the catalog {gone}")
    assert s3.keys("gone/") == [] and not out.exists()

    # a catalog database without the tables is not an index: scan and check change nothing
    refused(["--index", index, "scan", "--inputs", V1, "--output", out],
            "not a near-dedup index")
    refused(["--index", index, "index", "check"], "not a near-dedup index")
    assert table_count(catalog) == 0 and not out.exists()
    # a database holding other tables is not one to create an index in
    pg.execute("CREATE TABLE notes (x int)", dbname=catalog.rsplit("/", 1)[1])
    refused(["--index", index, "index", "--inputs", V1], "holds other tables", "notes")
    assert table_count(catalog) == 1 and s3.keys("creds/") == []

    # the location itself
    refused(["--index", f"iceberg+s3://{s3.bucket}/ix", "index", "--inputs", V1],
            "needs a shared catalog")
    line = refused(["--index", f"iceberg+s3://{s3.bucket}/ix?catalog=postgresql://postgres:"
                    f"hunter2@127.0.0.1:5432/nd", "index", "check"], "PGPASSWORD")
    assert "hunter2" not in line
    refused(["--index", f"iceberg+s3://{s3.bucket}/ix?catalog=mysql://h/db", "index",
             "check"], "PostgreSQL URL")
    refused(["--index", f"iceberg+s3://{s3.bucket}/ix?other=1", "index", "check"],
            "unknown parameter")
