"""The storage layer (`near_dedup_core.storage`): one location object for a local folder or an
``s3://`` URL, tested against moto's standalone S3 server through s3fs/botocore.

Covered: listing, streamed, ranged and gzip reads (the same bytes as locally), publication
with ``checksums.sha256`` last (a failure or a kill leaves nothing that verifies; an existing
output is never replaced), and each bad state as one line naming the URL.
"""

from __future__ import annotations

import gzip
import http.server
import importlib
import importlib.util
import multiprocessing
import pickle
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import (
    SECRET_KEY,
    S3Server,
    deny_writes_user,
    expire_credentials,
    run_s3_server,
)

from near_dedup_core import storage, storage_remote, storage_streams
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import CHECKSUMS, verify_checksums, write_checksums
from near_dedup_core.storage import FileInfo, LocalLocation, RemoteLocation, parse_location

#: a real S3 API server (moto), a new bucket per test: left out by `make test-fast`
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LINES = [f'{{"id": "s{i}", "text": "record number {i} of the shard"}}\n'.encode()
         for i in range(2000)]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, moto_server) -> Iterator[S3Server]:
    """A new empty bucket on the session's moto server (conftest.py)."""
    with run_s3_server(monkeypatch, tmp_path, moto_server) as server:
        yield server


def refusal(exc: pytest.ExceptionInfo[NearDedupError], url: str, *words: str) -> str:
    """The error is the CLI's one line (exit 1) naming ``url``, saying ``words``, and no
    secret."""
    message = str(exc.value)
    assert exc.value.exit_code == 1
    assert "\n" not in message
    assert url in message, message
    for word in words:
        assert word in message, message
    assert SECRET_KEY not in message
    return message


def make_folder(root: Path, name: str = "pkg") -> Path:
    """A folder with a plain shard, a gzip shard and a manifest, plus its checksums."""
    folder = root / name
    (folder / "data" / "train").mkdir(parents=True)
    (folder / "data" / "train" / "part-00000.jsonl").write_bytes(b"".join(LINES))
    with gzip.open(folder / "data" / "train" / "part-00001.jsonl.gz", "wb") as fh:
        fh.write(b"".join(LINES[:500]))
    (folder / "manifest.json").write_bytes(b'{"format": "training-snapshot"}\n')
    write_checksums(folder)
    return folder


def upload(s3: S3Server, folder: Path, prefix: str) -> None:
    client = s3.client()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{path.relative_to(folder).as_posix()}",
                          Body=path.read_bytes())


def fill(folder: Path) -> None:
    (folder / "pairs.jsonl").write_bytes(b"".join(LINES[:50]))
    (folder / "sub").mkdir()
    (folder / "sub" / "summary.json").write_bytes(b'{"pairs": 50}\n')
    write_checksums(folder)


# --------------------------------------------------------------------------- parsing


def test_parse_location_picks_the_backend_once(tmp_path: Path) -> None:
    assert isinstance(parse_location(str(tmp_path)), LocalLocation)
    assert isinstance(parse_location(tmp_path), LocalLocation)
    local = parse_location(f"file://{tmp_path}")
    assert isinstance(local, LocalLocation) and local.path == tmp_path
    remote = parse_location("s3://bucket/snapshots/cpt-v9/")
    assert isinstance(remote, RemoteLocation)
    assert (remote.url, remote.root, remote.name) == ("s3://bucket/snapshots/cpt-v9",
                                                       "bucket/snapshots/cpt-v9", "cpt-v9")
    assert remote.child("data/x.jsonl").url == "s3://bucket/snapshots/cpt-v9/data/x.jsonl"
    again = pickle.loads(pickle.dumps(remote))  # travels to workers as its URL
    assert isinstance(again, RemoteLocation) and again == remote
    assert parse_location(remote) is remote


def test_unknown_protocol_and_missing_package_are_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(NearDedupError) as exc:
        parse_location("nosuchproto://bucket/x")
    refusal(exc, "nosuchproto://bucket/x", "unknown storage protocol")
    # s3fs not importable (as without the s3 extra), and not yet loaded by fsspec
    monkeypatch.setitem(sys.modules, "s3fs", None)
    registered = importlib.import_module("fsspec.registry")._registry
    monkeypatch.delitem(registered, "s3", raising=False)
    with pytest.raises(NearDedupError) as exc:
        parse_location("s3://bucket/snapshots/cpt-v9")
    refusal(exc, "s3://bucket/snapshots/cpt-v9", "pip install 'near-dedup[s3]'")
    monkeypatch.undo()
    assert isinstance(parse_location("s3://bucket/snapshots/cpt-v9"), RemoteLocation)
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here; the missing-package case needs it absent")
    with pytest.raises(NearDedupError) as exc:
        parse_location("gs://bucket/reports/r1")
    refusal(exc, "gs://bucket/reports/r1", "pip install 'near-dedup[gcs]'")


# --------------------------------------------------------------------------- local branch


def test_local_location_uses_the_project_code_paths(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    loc = parse_location(folder)
    files = loc.list_files()
    assert list(files) == ["checksums.sha256", "data/train/part-00000.jsonl",
                           "data/train/part-00001.jsonl.gz", "manifest.json"]
    assert files["data/train/part-00000.jsonl"] == FileInfo(len(b"".join(LINES)))
    assert loc.verify("report") == verify_checksums(folder, "report")
    with loc.open("data/train/part-00000.jsonl", start=100, end=160) as fh:
        assert fh.read() == b"".join(LINES)[100:160]
    with loc.open_shard("data/train/part-00001.jsonl.gz") as fh:
        assert list(fh) == LINES[:500]
    (folder / "manifest.json").write_bytes(b"{}\n")
    with pytest.raises(NearDedupError, match="changed since it was listed"):
        loc.open("manifest.json", files["manifest.json"])
    # publishing is fsutil.atomic_dir: a hidden sibling renamed into place
    out = parse_location(tmp_path / "reports" / "r1")
    with out.publish() as staging:
        assert staging.parent == tmp_path / "reports"
        assert staging.name.startswith(".r1.tmp-")
        fill(staging)
    assert out.verify("report") == verify_checksums(tmp_path / "reports" / "r1", "report")
    with pytest.raises(NearDedupError, match="already exists; choose a new directory"):
        out.require_new_output()


def test_other_fsspec_protocols_publish_by_the_same_rule() -> None:
    """``memory://`` (no conditional write): the marker is written after checking it is
    absent, and the rest of the rule is the same."""
    out = parse_location(f"memory://near-dedup-test/reports/{time.monotonic_ns()}")
    assert isinstance(out, RemoteLocation)
    with pytest.raises(NearDedupError) as exc:
        out.require_new_output()
    refusal(exc, out.url, "no such bucket")
    out.fs.mkdir("/near-dedup-test")  # the "bucket"
    try:
        with out.publish() as folder:
            fill(folder)
            expected = verify_checksums(folder, "report")
        assert out.verify("report") == expected
        assert not [p for p in out.fs.find("/near-dedup-test") if "/." in p]  # no staging
        with pytest.raises(NearDedupError) as exc:
            out.require_new_output()
        refusal(exc, out.url, "already exists; choose a new directory")
        out.fs.rm_file(f"{out.root}/{CHECKSUMS}")
        with pytest.raises(NearDedupError) as exc:
            out.verify("report")
        refusal(exc, out.url, f"{CHECKSUMS} is missing")
    finally:
        out.fs.rm("/near-dedup-test", recursive=True)


# --------------------------------------------------------------------------- S3 reads


def test_s3_listing_and_streamed_reads_match_local(s3: S3Server, tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    upload(s3, folder, "snapshots/cpt-v9")
    local, remote = parse_location(folder), parse_location(s3.url("snapshots/cpt-v9"))
    files = remote.list_files()
    assert list(files) == list(local.list_files())
    assert [f.size for f in files.values()] == [f.size for f in local.list_files().values()]
    etags = {obj["Key"]: obj["ETag"] for obj in s3.client().list_objects_v2(
        Bucket=s3.bucket, Prefix="snapshots/")["Contents"]}
    assert all(info.etag == etags[f"snapshots/cpt-v9/{rel}"] for rel, info in files.items())
    shard = "data/train/part-00000.jsonl"
    whole = b"".join(LINES)
    with remote.open(shard, files[shard]) as fh:
        assert fh.read() == whole
    with remote.open(shard, files[shard], start=1000, end=5000) as fh:  # a shard slice
        assert fh.read() == whole[1000:5000]
    with remote.open(shard, start=len(whole) - 10) as fh:
        assert fh.read() == whole[-10:]
    with remote.open_shard("data/train/part-00001.jsonl.gz", files[
            "data/train/part-00001.jsonl.gz"]) as fh:
        assert list(fh) == LINES[:500]
    assert remote.read_bytes("manifest.json") == (folder / "manifest.json").read_bytes()
    assert remote.info("manifest.json") == files["manifest.json"]
    assert remote.exists("manifest.json") and not remote.exists("nothing.json")
    assert remote.verify("package") == local.verify("package")


_INHERITED: list[storage.Location] = []


def _read_inherited(conn: object) -> None:
    conn.send(_INHERITED[0].read_bytes("manifest.json"))  # type: ignore[attr-defined]


def test_s3_location_works_in_a_forked_worker(s3: S3Server, tmp_path: Path) -> None:
    """A location used before a fork is usable in the child (its filesystem is made anew)."""
    folder = make_folder(tmp_path)
    upload(s3, folder, "snapshots/cpt-v9")
    remote = parse_location(s3.url("snapshots/cpt-v9"))
    assert remote.list_files()
    _INHERITED[:] = [remote]
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_read_inherited, args=(child,))
    proc.start()
    try:
        assert parent.poll(30)
        assert parent.recv() == (folder / "manifest.json").read_bytes()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        _INHERITED.clear()
    assert proc.exitcode == 0


def test_s3_reads_stream_block_by_block(s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """Reading the head of a large object asks for one request's bytes, not the object; the
    whole object comes in `storage_streams.REQUEST_BYTES` per request, the same bytes."""
    monkeypatch.setattr(storage_streams, "REQUEST_BYTES", 4096)
    big = b"".join(LINES) * 40
    s3.client().put_object(Bucket=s3.bucket, Key="p/big.jsonl", Body=big)
    remote = parse_location(s3.url("p"))
    fh = remote.open("big.jsonl")
    assert fh.readline() == LINES[0]
    # what the reader's buffer (1 MiB) takes, in requests of 4096 bytes
    assert 0 < fh.raw.requested <= (1 << 20) + 4096 < len(big)  # type: ignore[attr-defined]
    assert fh.read() == big[len(LINES[0]):]
    assert fh.raw.requested == len(big)  # type: ignore[attr-defined]
    fh.close()


# --------------------------------------------------------------------------- publication


def test_publish_then_verify_and_never_replace(s3: S3Server) -> None:
    out = parse_location(s3.url("reports/r1"))
    with out.publish() as folder:
        fill(folder)
        expected = verify_checksums(folder, "report")
    assert out.verify("report") == expected
    assert s3.keys("reports/") == ["reports/r1/checksums.sha256", "reports/r1/pairs.jsonl",
                                   "reports/r1/sub/summary.json"]  # no staging left
    before = {k: s3.client().head_object(Bucket=s3.bucket, Key=k)["ETag"]
              for k in s3.keys("reports/")}
    with pytest.raises(NearDedupError) as exc:
        with out.publish() as folder:
            fill(folder)
    refusal(exc, "s3://", "already exists; choose a new directory")
    assert {k: s3.client().head_object(Bucket=s3.bucket, Key=k)["ETag"]
            for k in s3.keys("reports/")} == before
    with pytest.raises(NearDedupError) as exc:
        parse_location(s3.url()).require_new_output()
    refusal(exc, s3.url(), "not the bucket itself")


def test_publish_failure_leaves_nothing(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    out = parse_location(s3.url("reports/r2"))

    def failing_marker(self: RemoteLocation, local: Path, marker: str) -> bool:
        raise ConnectionResetError("connection lost while writing the marker")

    monkeypatch.setattr(RemoteLocation, "_write_marker", failing_marker)
    with pytest.raises(NearDedupError) as exc:
        with out.publish() as folder:
            fill(folder)
    refusal(exc, "s3://", "nothing was published")
    assert s3.keys() == []  # neither the output nor the staging prefix
    with pytest.raises(NearDedupError) as exc:
        out.verify("report")
    refusal(exc, out.url, "no such prefix")
    monkeypatch.undo()


def test_publish_without_checksums_is_refused(s3: S3Server) -> None:
    out = parse_location(s3.url("reports/r3"))
    with pytest.raises(NearDedupError) as exc:
        with out.publish() as folder:
            (folder / "pairs.jsonl").write_bytes(b"x\n")
    refusal(exc, out.url, f"has no {CHECKSUMS}")
    assert s3.keys() == []


KILLED_PUBLISH = """
import sys, time
from near_dedup_core import storage
from near_dedup_core.fsutil import write_checksums

out = storage.parse_location(sys.argv[1])
fs = out.fs
copy = fs.copy

def copy_then_hang(src, dst, **kwargs):
    copy(src, dst, **kwargs)
    print("copied", flush=True)
    time.sleep(120)

fs.copy = copy_then_hang
with out.publish() as folder:
    for i in range(3):
        (folder / f"part-{i}.jsonl").write_bytes(b'{"n": %d}\\n' % i)
    write_checksums(folder)
"""


def test_killed_publish_leaves_nothing_that_verifies(s3: S3Server) -> None:
    url = s3.url("reports/r4")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PUBLISH, url], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the publishing process did not reach its first copy within 60 s"
        line = proc.stdout.readline()
        if line != b"copied\n":
            proc.wait(10)
            pytest.fail(proc.stderr.read().decode(errors="replace"))
    finally:
        proc.kill()
        proc.wait()
    keys = s3.keys("reports/")
    assert "reports/r4/part-0.jsonl" in keys
    assert "reports/r4/checksums.sha256" not in keys
    stem = f"reports/.r4.tmp-{storage_remote._host()}-{proc.pid}-"
    staging = [k for k in keys if k.startswith(stem)]
    assert len(staging) == 3
    out = parse_location(url)
    with pytest.raises(NearDedupError) as exc:
        out.verify("report")
    refusal(exc, url, f"{CHECKSUMS} is missing")
    with pytest.raises(NearDedupError) as exc:
        with out.publish() as folder:
            fill(folder)
    refusal(exc, url, f"holds no {CHECKSUMS}", "remove it")
    # once the half-written output is removed, the next run publishes and removes the dead
    # run's staging prefix
    for key in s3.keys("reports/r4/"):
        s3.client().delete_object(Bucket=s3.bucket, Key=key)
    with out.publish() as folder:
        fill(folder)
    assert out.verify("report")
    assert all(key.startswith("reports/r4/") for key in s3.keys("reports/"))


BOUNDED_PUBLISH = """
import os, sys, tracemalloc
from near_dedup_core import storage, storage_remote
from near_dedup_core.fsutil import write_checksums

storage_remote._MAX_PUT = int(sys.argv[2])
out = storage.parse_location(sys.argv[1])
with out.publish() as folder:
    for i in range(3):
        (folder / f"part-{i}.bin").write_bytes(os.urandom(3 * storage_remote.UPLOAD_PART))
    write_checksums(folder)
    tracemalloc.start()
print(tracemalloc.get_traced_memory()[1])
"""


@pytest.mark.parametrize("max_put", [5 << 30, 1 << 20], ids=["one-request", "in-parts"])
def test_publish_does_not_hold_the_folder_in_memory(s3: S3Server, max_put: int) -> None:
    """Publishing sends the files one after the other, each read from disk as it is sent
    (or, above the one-request limit, one part at a time): the publishing process never
    holds a file, however large the folder (here 3 files of 24 MiB)."""
    url = s3.url(f"reports/big-{max_put}")
    done = subprocess.run([sys.executable, "-c", BOUNDED_PUBLISH, url, str(max_put)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    peak = int(done.stdout)
    part = storage_remote.UPLOAD_PART
    bound = part if max_put > part else 3 * part
    assert peak < bound, f"{peak / 2**20:.1f} MiB held while publishing"
    listed = parse_location(url).verify("report")
    assert sorted(listed) == ["part-0.bin", "part-1.bin", "part-2.bin"]
    head = s3.client().head_object(Bucket=s3.bucket, Key=f"reports/big-{max_put}/part-0.bin")
    assert head["ContentLength"] == 3 * storage_remote.UPLOAD_PART


def test_concurrent_publication_loses_on_the_conditional_marker(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another run's ``checksums.sha256`` lands while this one copies: the conditional write
    (If-None-Match: *) refuses ours and leaves their output as it was."""
    out = parse_location(s3.url("reports/r5"))
    theirs = b"0" * 64 + b"  pairs.jsonl\n"
    fs = out.fs
    copy = fs.copy

    def copy_and_race(src: str, dst: str, **kwargs: object) -> None:
        copy(src, dst, **kwargs)
        if not s3.keys("reports/r5/checksums.sha256"):
            s3.client().put_object(Bucket=s3.bucket, Key="reports/r5/checksums.sha256",
                                   Body=theirs)

    monkeypatch.setattr(fs, "copy", copy_and_race)
    with pytest.raises(NearDedupError) as exc:
        with out.publish() as folder:
            fill(folder)
    refusal(exc, out.url, "published by another run meanwhile")
    got = s3.client().get_object(Bucket=s3.bucket, Key="reports/r5/checksums.sha256")
    assert got["Body"].read() == theirs
    # the winner's output is left as it is (its files are not deleted); our staging is gone
    assert s3.keys("reports/") == ["reports/r5/checksums.sha256", "reports/r5/pairs.jsonl",
                                   "reports/r5/sub/summary.json"]


# --------------------------------------------------------------------------- bad states


def test_missing_bucket_and_prefix(s3: S3Server, tmp_path: Path) -> None:
    missing = parse_location("s3://no-such-bucket-here/snapshots/cpt-v9")
    for action in (missing.list_files, lambda: missing.verify("package"),
                   missing.require_new_output):
        with pytest.raises(NearDedupError) as exc:
            action()
        refusal(exc, missing.url, "no such bucket")
    with pytest.raises(NearDedupError) as exc:
        with missing.publish() as folder:
            fill(folder)
    refusal(exc, missing.url, "no such bucket")
    nothing = parse_location(s3.url("snapshots/none"))
    with pytest.raises(NearDedupError) as exc:
        nothing.list_files()
    refusal(exc, nothing.url, "no such prefix")
    with pytest.raises(NearDedupError) as exc:
        nothing.info("manifest.json")
    refusal(exc, nothing.url + "/manifest.json", "not found")


def test_denied_write_and_refused_credentials(s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    upload(s3, make_folder(tmp_path), "snapshots/cpt-v9")
    key, secret = deny_writes_user(s3)
    s3.enforce_auth()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    package = parse_location(s3.url("snapshots/cpt-v9"))
    assert package.verify("package")  # reading is allowed
    out = parse_location(s3.url("reports/r6"))
    with pytest.raises(NearDedupError) as exc:
        with out.publish() as folder:
            fill(folder)
    message = refusal(exc, out.url, "access denied", "nothing was published")
    assert secret not in message
    assert s3.keys("reports/", key=key, secret=secret) == []
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
    with pytest.raises(NearDedupError) as exc:
        parse_location(s3.url("snapshots/cpt-v9")).list_files()
    refusal(exc, package.url, "credentials were refused")


def test_missing_credentials(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    loc = parse_location(s3.url("snapshots/cpt-v9"))
    with pytest.raises(NearDedupError) as exc:
        loc.list_files()
    refusal(exc, loc.url, "no credentials found")


def test_expired_credentials(s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
    """Temporary credentials from the chain whose expiration has passed: botocore refuses to
    sign with them (moto's server never expires a token; the server's own answer,
    ``ExpiredToken``, is `test_expired_token_answer`)."""
    upload(s3, make_folder(tmp_path), "snapshots/cpt-v9")
    secret = expire_credentials(monkeypatch, tmp_path)
    loc = parse_location(s3.url("snapshots/cpt-v9"))
    with pytest.raises(NearDedupError) as exc:
        loc.list_files()
    assert secret not in refusal(exc, loc.url, "the credentials have expired")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_endpoint_fails_in_seconds(s3: S3Server,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    loc = parse_location(s3.url("snapshots/cpt-v9"))
    started = time.monotonic()
    with pytest.raises(NearDedupError) as exc:
        loc.list_files()
    assert time.monotonic() - started < 20
    refusal(exc, loc.url, "cannot reach the storage endpoint")


def test_server_stopped_mid_run(s3: S3Server, tmp_path: Path) -> None:
    upload(s3, make_folder(tmp_path), "snapshots/cpt-v9")
    loc = parse_location(s3.url("snapshots/cpt-v9"))
    files = loc.list_files()
    s3.stop()
    started = time.monotonic()
    with pytest.raises(NearDedupError) as exc:
        loc.read_bytes("manifest.json", files["manifest.json"])
    assert time.monotonic() - started < 20
    refusal(exc, loc.url, "cannot reach the storage endpoint")


def test_hung_endpoint_is_a_bounded_wait(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that accepts connections and never answers: read timeouts, not minutes."""
    monkeypatch.setattr(storage_remote, "READ_TIMEOUT", 1.0)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        loc = parse_location(s3.url("snapshots/cpt-v9"))
        started = time.monotonic()
        with pytest.raises(NearDedupError) as exc:
            loc.list_files()
        elapsed = time.monotonic() - started
    # each attempt: the timeout, then botocore's backoff (at most 2 ** attempt seconds)
    attempts = storage_remote.MAX_ATTEMPTS
    bound = storage_remote.S3FS_ATTEMPTS * attempts * (1.0 + 2**attempts)
    assert elapsed < bound
    refusal(exc, loc.url, "cannot reach the storage endpoint")


class _SlowDown(http.server.BaseHTTPRequestHandler):
    requests = 0
    STATUS = 503
    BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')

    def _answer(self) -> None:
        type(self).requests += 1
        self.send_response(self.STATUS)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(self.BODY)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(self.BODY)

    do_GET = do_HEAD = do_PUT = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_throttled_request_fails_after_retries(s3: S3Server,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowDown)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_port}")
        loc = parse_location(s3.url("snapshots/cpt-v9"))
        started = time.monotonic()
        with pytest.raises(NearDedupError) as exc:
            loc.list_files()
        assert time.monotonic() - started < 60
    finally:
        server.shutdown()
        server.server_close()
    refusal(exc, loc.url, "throttled by the storage (SlowDown)", "after")
    assert _SlowDown.requests >= storage_remote.MAX_ATTEMPTS  # botocore retried before giving up


class _ExpiredToken(_SlowDown):
    """S3's answer to a request signed with a session token past its expiration."""

    requests = 0
    STATUS = 400
    BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ExpiredToken</Code>'
            b'<Message>The provided token has expired.</Message></Error>')


def test_expired_token_answer(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint on the loopback that answers every request as S3 answers a request
    signed with an expired session token (moto's server cannot: it never checks a token's
    expiration)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ExpiredToken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_port}")
        loc = parse_location(s3.url("snapshots/cpt-v9"))
        with pytest.raises(NearDedupError) as exc:
            loc.list_files()
    finally:
        server.shutdown()
        server.server_close()
    refusal(exc, loc.url, "the credentials have expired")
    assert _ExpiredToken.requests >= 1


class _CutShort(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint serving one object whose first ranged GET drops the connection half
    way through the body (as a lost connection or a proxy timeout does); later requests
    are served whole."""

    protocol_version = "HTTP/1.1"
    BODY = b"".join(LINES) * 8
    ETAG = '"0123456789abcdef0123456789abcdef"'
    ranges: list[str] = []

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.BODY)))
        self.send_header("ETag", self.ETAG)
        self.end_headers()

    def do_GET(self) -> None:
        first, _, last = self.headers["Range"].removeprefix("bytes=").partition("-")
        start, stop = int(first), int(last) + 1
        assert self.headers.get("If-Match") == self.ETAG
        type(self).ranges.append(f"{start}-{stop}")
        self.send_response(206)
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(self.BODY)}")
        self.send_header("ETag", self.ETAG)
        self.end_headers()
        if len(type(self).ranges) == 1:
            self.wfile.write(self.BODY[start:(start + stop) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(self.BODY[start:stop])

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_body_cut_short_is_asked_for_again_from_where_it_stopped(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CutShort)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_port}")
        loc = parse_location(s3.url("p"))
        with loc.open("big.jsonl", FileInfo(len(_CutShort.BODY), _CutShort.ETAG)) as fh:
            assert fh.read() == _CutShort.BODY
    finally:
        server.shutdown()
        server.server_close()
    size = len(_CutShort.BODY)
    first, second = _CutShort.ranges
    assert first == f"0-{size}"
    assert 0 < int(second.split("-")[0]) <= size // 2 and second.endswith(f"-{size}")


def test_object_changed_between_listing_and_reading(s3: S3Server,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    upload(s3, make_folder(tmp_path), "snapshots/cpt-v9")
    loc = parse_location(s3.url("snapshots/cpt-v9"))
    files = loc.list_files()
    shard = "data/train/part-00000.jsonl"
    client = s3.client()
    client.put_object(Bucket=s3.bucket, Key="snapshots/cpt-v9/manifest.json",
                      Body=b'{"format": "training-snapshot", "x": 1}\n')
    with pytest.raises(NearDedupError) as exc:
        loc.read_bytes("manifest.json", files["manifest.json"])
    refusal(exc, loc.url + "/manifest.json", "changed since it was listed")
    # same size, other bytes: the ETag tells
    body = bytearray(b"".join(LINES))
    body[0:1] = b" "
    client.put_object(Bucket=s3.bucket, Key=f"snapshots/cpt-v9/{shard}", Body=bytes(body))
    with pytest.raises(NearDedupError) as exc:
        loc.open(shard, files[shard])
    refusal(exc, loc.url + "/" + shard, "changed since it was listed")
    # replaced while it is being read: the next request is refused
    monkeypatch.setattr(storage_streams, "REQUEST_BYTES", 4096)
    big = b"".join(LINES) * 40
    client.put_object(Bucket=s3.bucket, Key="snapshots/cpt-v9/big.jsonl", Body=big)
    fh = loc.open("big.jsonl", loc.info("big.jsonl"))
    assert fh.read(100) == big[:100]
    client.put_object(Bucket=s3.bucket, Key="snapshots/cpt-v9/big.jsonl", Body=big[::-1])
    with pytest.raises(NearDedupError) as exc:
        fh.read()
    refusal(exc, loc.url + "/big.jsonl", "changed while being read")
    fh.close()


def test_folders_and_shard_ranges_on_s3_match_local(s3: S3Server, tmp_path: Path) -> None:
    """`Location.folders` lists the folders one level down, as locally; a block's byte range
    (`package.ShardRange`, what a Ray task of `index` is sent) reads the listed version of
    the shard and refuses any other."""
    from near_dedup_core.package.blocks import ShardRange

    folder = make_folder(tmp_path)
    upload(s3, folder, "snapshots/cpt-v9")
    (tmp_path / "other" / "x").mkdir(parents=True)
    assert parse_location(s3.url("snapshots")).folders() == ["cpt-v9"]
    assert parse_location(s3.url("snapshots/cpt-v9")).folders() == ["data"]
    assert parse_location(s3.url("nothing")).folders() == []
    assert parse_location(tmp_path).folders() == ["other", "pkg"]
    shard = "data/train/part-00000.jsonl"
    url = s3.url(f"snapshots/cpt-v9/{shard}")
    info = parse_location(s3.url("snapshots/cpt-v9")).list_files()[shard]
    whole = b"".join(LINES)
    start, end = len(LINES[0]) * 3, len(whole) - len(LINES[-1])
    assert ShardRange(url, info.size, info.etag, start, end).read() == whole[start:end]
    body = bytearray(whole)
    body[0:1] = b" "  # same size, another version
    s3.client().put_object(Bucket=s3.bucket, Key=f"snapshots/cpt-v9/{shard}", Body=bytes(body))
    with pytest.raises(NearDedupError) as exc:
        ShardRange(url, info.size, info.etag, start, end).read()
    refusal(exc, url, "changed since it was listed")


def test_docs_name_the_rules() -> None:
    """docs/storage.md states the publication rule and every error this module gives."""
    text = (REPO / "docs" / "storage.md").read_text(encoding="utf-8")
    for phrase in ("checksums.sha256", "If-None-Match", "pip install 'near-dedup[s3]'",
                   "no such bucket", "access denied", "no credentials found",
                   "cannot reach the storage endpoint", "throttled by the storage",
                   "changed since it was listed", "changed while being read",
                   "already exists; choose a new directory", "AWS_ENDPOINT_URL"):
        assert phrase in text, phrase
