"""Object storage that works against the product: a bucket holding keys that point outside
the folder they are listed under, names with control characters, a SIGTERM or Ctrl-C at each
step of a publication, and an endpoint that stops answering while a report is published.
Each is one line and exit 1 (or the signal's line), nothing written outside the command's
own output, nothing half-published, no hang. Runs the CLI as a process of its own against
moto's standalone S3 server (`s3_server`)."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, refused, run_cli
from s3_server import S3Server, run_s3_server

from near_dedup_core.errors import NearDedupError
from near_dedup_core.storage import parse_location
from near_dedup_core.storage_remote import _host

CONFIG = REPO / "config" / "near-dedup.json"
V1 = SAMPLES / "cpt/2026-11-25/cpt-v1"
V2 = SAMPLES / "cpt/2026-11-26/cpt-v2"

pytestmark = pytest.mark.slow  # a live S3 server, the CLI as processes


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, moto_server) -> Iterator[S3Server]:
    """A new empty bucket on the session's moto server (conftest.py)."""
    with run_s3_server(monkeypatch, tmp_path, moto_server) as server:
        yield server


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An index of the samples v1 and v2, their report and a mixture built from it, local."""
    root = tmp_path_factory.mktemp("built")
    index = root / "index.sqlite"
    for pkg in (V1, V2):
        assert run_cli("--quiet", "--index", index, "--config", CONFIG, "index", "--inputs",
                       pkg, "--workers", 1)[0] == 0
    report = root / "cpt"
    code, _, err = run_cli("--quiet", "--index", index, "--config", CONFIG, "scan", "--inputs",
                           V1, V2, "--output", report, "--workers", 1)
    assert code == 0, err
    mixture = root / "mix"
    code, _, err = run_cli("--quiet", "mixture", "build",
                           mixture_config(root, [V1, V2], report), "--output", mixture)
    assert code == 0, err
    return {"index": index, "report": report, "mixture": mixture, "root": root}


def mixture_config(root: Path, inputs: list, report: object) -> Path:
    path = root / f"mix-{abs(hash(str(report)))}.json"
    path.write_text(
        '{"name": "mix", "kind": "cpt", "inputs": [%s], "target_records": 10, '
        '"group_by": "domain", "strategy": {"type": "temperature", "temperature": 2.0}, '
        '"quality": {"min_chars": 0}, "allow_shortfall": false, "redistribute": true, '
        '"seed": 7, "near_dedup_report": "%s"}' % (", ".join(f'"{p}"' for p in inputs), report),
        encoding="utf-8")
    return path


def upload(s3: S3Server, folder: Path, prefix: str) -> str:
    client = s3.client()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{path.relative_to(folder)}",
                              Body=path.read_bytes())
    return s3.url(prefix)


def cli(argv: list[object], tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``near-dedup argv`` as a process of its own, its temporary files under ``tmp``."""
    tmp.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "near_dedup_core", *map(str, argv)],
                          env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp),
                               **env}, capture_output=True, text=True, timeout=300)


def one_line(run: subprocess.CompletedProcess[str], *fragments: str, code: int = 1) -> str:
    assert run.returncode == code, (run.returncode, run.stdout, run.stderr)
    err = run.stderr
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# --------------------------------------------------------------------------- hostile keys

COMMANDS = ["report verify", "report explain", "report diff", "mixture verify",
            "mixture build"]


@pytest.mark.parametrize("how", ["dot-dot", "absolute"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_key_outside_the_prefix_is_refused_before_anything_is_written(
        s3: S3Server, built: dict[str, Path], tmp_path: Path, command: str, how: str) -> None:
    """A report or mixture on the bucket with one more object whose key climbs out of the
    folder (``<prefix>/../../x``) or is absolute below it (``<prefix>//abs/x``): fetched for
    the checks, it would be written outside the temporary folder (where no check looks). It
    is refused, naming the object, before anything is fetched."""
    tmp = tmp_path / "tmp"
    report = upload(s3, built["report"], "reports/cpt")
    mixture = upload(s3, built["mixture"], "mixtures/mix")
    hostile_in = "mixtures/mix" if command == "mixture verify" else "reports/cpt"
    # the fetched folder is $TMPDIR/near-dedup-fetch-*/<name>: two levels up is $TMPDIR
    escaped = tmp / "escaped" if how == "dot-dot" else tmp_path / "absolute-escaped"
    rel = "../../escaped" if how == "dot-dot" else "/" + str(escaped).lstrip("/")
    key = f"{hostile_in}/{rel}"
    s3.client().put_object(Bucket=s3.bucket, Key=key, Body=b"written by the bucket\n")
    assert key in s3.keys()
    argv: list[object] = {
        "report verify": ["report", "verify", report],
        "report explain": ["report", "explain", report, "cpt-v1", "s1"],
        "report diff": ["report", "diff", upload(s3, built["report"], "reports/old"), report],
        "mixture verify": ["mixture", "verify", mixture],
        "mixture build": ["mixture", "build",
                          mixture_config(tmp_path, [V1, V2], report), "--output",
                          tmp_path / "out"],
    }[command]
    run = cli(argv, tmp)
    one_line(run, "near-dedup: error: ", f"s3://{s3.bucket}/{key}",
             "not a plain relative path")
    assert not escaped.exists()
    assert sorted(tmp.iterdir()) == []  # no fetched folder left either
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rel", ["data/./x", "a\\b", "tab\tname", "data//x"])
def test_every_key_below_a_prefix_is_a_plain_relative_path(s3: S3Server, rel: str) -> None:
    """The same rule for every listing (packages too), with each kind of bad key."""
    s3.client().put_object(Bucket=s3.bucket, Key="snap/pkg/manifest.json", Body=b"{}")
    s3.client().put_object(Bucket=s3.bucket, Key=f"snap/pkg/{rel}", Body=b"x")
    with pytest.raises(NearDedupError) as exc:
        parse_location(s3.url("snap/pkg")).list_files()
    message = str(exc.value)
    assert "\n" not in message and "\t" not in message
    assert "not a plain relative path" in message
    assert "snap/pkg/" + rel.replace("\t", "\\x09") in message
    refused(["snapshot", "validate", s3.url("snap/pkg")], "not a plain relative path")


def test_an_empty_folder_marker_is_not_a_file(s3: S3Server) -> None:
    """``data/`` as a zero-byte object (a console's "create folder") is no file of the folder."""
    client = s3.client()
    client.put_object(Bucket=s3.bucket, Key="snap/pkg/data/", Body=b"")
    client.put_object(Bucket=s3.bucket, Key="snap/pkg/manifest.json", Body=b"{}")
    assert list(parse_location(s3.url("snap/pkg")).list_files()) == ["manifest.json"]


# --------------------------------------------------------------------------- control characters


@pytest.mark.parametrize("where", ["bucket", "local"])
def test_names_with_control_characters_are_refused_up_front(
        s3: S3Server, built: dict[str, Path], tmp_path: Path, where: str) -> None:
    base = s3.url("reports") if where == "bucket" else str(tmp_path)
    bad = f"{base}/new\nline"
    before = sorted(tmp_path.rglob("*"))
    for argv in (["--index", built["index"], "--config", CONFIG, "scan", "--inputs", V1,
                  "--output", bad],
                 ["--index", built["index"], "--config", CONFIG, "scan", "--inputs", bad,
                  "--output", f"{base}/fine"],
                 ["report", "verify", bad], ["snapshot", "validate", f"{base}/tab\there"],
                 ["snapshot", "create", "--kind", "cpt", "--package-id", "p", "--tokenizer",
                  "tok@1", "--split", f"train={tmp_path}/a\rb.jsonl", "--output",
                  f"{base}/pkg"],
                 ["snapshot", "create", "--kind", "cpt", "--package-id", "p", "--tokenizer",
                  "tok@1", "--split", f"train={V1}/data/train/part-00000.jsonl",
                  "--output", bad]):
        refused(argv, "may not hold control characters", "\\x0")
    assert s3.keys() == []
    assert sorted(tmp_path.rglob("*")) == before


# --------------------------------------------------------------------------- snapshot create


def test_snapshot_create_publishes_to_the_bucket(s3: S3Server, tmp_path: Path) -> None:
    """``snapshot create --output s3://…`` writes the package to the bucket (manifest.json
    last), never a local ``./s3:/…`` folder; the package reads back as the local one."""
    source = tmp_path / "train.jsonl"
    source.write_text('{"id": "a", "text": "one record"}\n{"id": "b", "text": "two"}\n',
                      encoding="utf-8")
    common = ["snapshot", "create", "--kind", "cpt", "--package-id", "p1", "--tokenizer",
              "tok@1", "--split", f"train={source}", "--created-at", "2026-12-01T00:00:00Z"]
    url = s3.url("snapshots/p1")
    work = tmp_path / "work"
    work.mkdir()
    run = subprocess.run([sys.executable, "-m", "near_dedup_core", *common, "--output", url],
                         cwd=work, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"created p1 at {url} (2 records)\n"
    assert list(work.iterdir()) == []
    code, out, err = run_cli(*common, "--output", tmp_path / "p1")
    assert code == 0, err
    local = {p.relative_to(tmp_path / "p1").as_posix(): p.read_bytes()
             for p in (tmp_path / "p1").rglob("*") if p.is_file()}
    client = s3.client()
    remote = {key[len("snapshots/p1/"):]: client.get_object(Bucket=s3.bucket, Key=key)[
        "Body"].read() for key in s3.keys("snapshots/")}
    assert remote == local
    code, out, err = run_cli("snapshot", "validate", url)
    assert code == 0 and "valid: p1 (cpt, 2 records" in out, err
    before = s3.keys()
    refused([*common, "--output", url], f"output {url} already exists")
    assert s3.keys() == before


# --------------------------------------------------------------------------- signals


def scan_argv(built: dict[str, Path], url: str) -> list[object]:
    return ["--quiet", "--index", built["index"], "--config", CONFIG, "scan", "--inputs", V1,
            V2, "--output", url, "--workers", 1]


def paused(argv: list[object], tmp_path: Path, stage: str,
           **env: str) -> tuple[subprocess.Popen[str], Path]:
    """Start ``near-dedup argv`` paused at ``stage`` (`progress.pause_point`); returns it once
    it waits there."""
    flag = tmp_path / f"pause-{stage}"
    proc = subprocess.Popen([sys.executable, "-m", "near_dedup_core", *map(str, argv)],
                            env={**os.environ, "PYTHONPATH": str(REPO),
                                 "NEAR_DEDUP_PAUSE": f"{stage}:{flag}", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not flag.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"never paused at {stage}: {proc.returncode} {out} {err}")
        time.sleep(0.05)
    return proc, flag


@pytest.mark.parametrize(("stage", "sig"), [
    ("publish-start", signal.SIGTERM), ("publish-staged", signal.SIGTERM),
    ("publish-check", signal.SIGTERM), ("publish-copied", signal.SIGTERM),
    ("publish-marker", signal.SIGTERM), ("publish-copied", signal.SIGINT),
    ("publish-marker", signal.SIGINT)])
def test_a_stopped_publication_leaves_nothing(s3: S3Server, built: dict[str, Path],
                                             tmp_path: Path, stage: str,
                                             sig: signal.Signals) -> None:
    """SIGTERM or Ctrl-C at each step of publishing a report, before its marker: the
    command ends with its one line, and neither the output nor the staging prefix holds an
    object; the same run then publishes."""
    url = s3.url("reports/cpt")
    proc, flag = paused(scan_argv(built, url), tmp_path, stage)
    if stage in ("publish-copied", "publish-marker"):
        assert [k for k in s3.keys("reports/cpt/")], "the pause came before any copy"
    proc.send_signal(sig)
    time.sleep(0.3)
    flag.unlink()
    out, err = proc.communicate(timeout=60)
    word = "terminated" if sig == signal.SIGTERM else "interrupted"
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert err == f"paused at {stage}\nnear-dedup: {word}\n" and out == ""
    assert s3.keys() == []
    code, _, err = run_cli(*scan_argv(built, url))
    assert code == 0, err
    assert parse_location(url).verify("report")
    assert all(k.startswith("reports/cpt/") for k in s3.keys())


def test_a_stop_after_the_marker_leaves_the_published_output(
        s3: S3Server, built: dict[str, Path], tmp_path: Path) -> None:
    """Once ``checksums.sha256`` is written the output is published: a SIGTERM then leaves
    it whole, and removes the staging prefix."""
    url = s3.url("reports/cpt")
    proc, flag = paused(scan_argv(built, url), tmp_path, "publish-done")
    staging = f"reports/.cpt.tmp-{_host()}-{proc.pid}-"
    assert any(k.startswith(staging) for k in s3.keys())
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    flag.unlink()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err == "paused at publish-done\nnear-dedup: terminated\n"
    assert parse_location(url).verify("report")
    assert all(k.startswith("reports/cpt/") for k in s3.keys())


SIGNAL_IN_FLIGHT = """
import asyncio, os, signal, sys
from fsspec.asyn import sync
from near_dedup_core import cli, storage
from near_dedup_core.fsutil import write_checksums

out = storage.parse_location(sys.argv[1])
fs = out.fs
calls = []


def stopped_while_answered() -> None:  # the request has landed; its answer is on its way
    calls.append(1)
    if len(calls) == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGTERM)


async def late_copy(*args, **kwargs):
    await fs._copy(*args, **kwargs)
    stopped_while_answered()
    await asyncio.sleep(0.5)


put = storage.RemoteLocation._put_streamed


async def late_put(self, local, size, key, create):
    await put(self, local, size, key, create)
    if create:
        stopped_while_answered()
        await asyncio.sleep(0.5)


if sys.argv[2] == "copy":
    fs.copy = lambda *args, timeout=None, **kwargs: sync(fs.loop, late_copy, *args,
                                                         timeout=timeout, **kwargs)
else:
    storage.RemoteLocation._put_streamed = late_put
signal.signal(signal.SIGTERM, cli._terminate)
try:
    with out.publish() as folder:
        for i in range(3):
            (folder / f"part-{i}.jsonl").write_bytes(b'{"n": %d}\\n' % i)
        write_checksums(folder)
except cli.Terminated:
    sys.exit(143)
"""


@pytest.mark.parametrize(("request_", "nth"), [("copy", 2), ("marker", 1)])
def test_a_stop_while_a_request_is_answered(s3: S3Server, request_: str, nth: int) -> None:
    """SIGTERM while a copy (the second) or the marker has landed on the server and its answer
    is on its way: the publication waits for the answer, so it knows what it wrote. A copy
    is then removed with the rest (nothing at the output or the staging prefix); a marker
    makes the output published, whole."""
    url = s3.url("reports/r")
    run = subprocess.run([sys.executable, "-c", SIGNAL_IN_FLIGHT, url, request_, str(nth)],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 143, run.stderr
    if request_ == "copy":
        assert s3.keys() == []
    else:
        assert sorted(parse_location(url).verify("report")) == [
            "part-0.jsonl", "part-1.jsonl", "part-2.jsonl"]
        assert all(k.startswith("reports/r/") for k in s3.keys())


# --------------------------------------------------------------------------- silent endpoint


class Proxy:
    """A TCP proxy on the loopback in front of the S3 server that, once ``silent``, stops
    forwarding: connections (new ones too) are accepted and never answered."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.silent = False
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._open: list[socket.socket] = []
        self._done = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._done:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._open.append(conn)
            if self.silent:
                continue
            up = socket.create_connection(self.upstream)
            self._open.append(up)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._done:
                ready, _, _ = select.select([src], [], [], 0.1)
                if self.silent or not ready:
                    continue
                data = src.recv(1 << 16)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            return

    def close(self) -> None:
        self._done = True
        for s in [self.sock, *self._open]:
            s.close()


@pytest.mark.parametrize("stage", ["publish-start", "publish-copied"])
def test_an_endpoint_that_stops_answering_while_publishing(
        s3: S3Server, built: dict[str, Path], tmp_path: Path, stage: str) -> None:
    """The endpoint goes silent as the scan starts publishing (or half way through its
    copies): every storage call has a deadline (NEAR_DEDUP_STORAGE_TIMEOUT), and so has the
    removal of what was written; the command ends by itself with one line."""
    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = Proxy((host, int(port)))
    try:
        url = s3.url("reports/cpt")
        proc, flag = paused(scan_argv(built, url), tmp_path, stage,
                            AWS_ENDPOINT_URL=proxy.endpoint, NEAR_DEDUP_STORAGE_TIMEOUT="2")
        proxy.silent = True
        started = time.monotonic()
        flag.unlink()
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        elapsed = time.monotonic() - started
    finally:
        proxy.close()
    assert proc.returncode == 1, err
    err = err.removeprefix(f"paused at {stage}\n")
    assert err.count("\n") == 1 and err.startswith(f"near-dedup: error: {url}: "), err
    assert "no answer from the storage within the deadline (2 s, NEAR_DEDUP_STORAGE_TIMEOUT)" \
        in err and "nothing was published" in err, err
    # one deadline for the call that hung, one for removing what was written
    assert elapsed < 2 * 2 + 4, elapsed
    if stage == "publish-copied":
        assert "could not be removed" in err, err


def test_a_bad_deadline_setting_is_one_line(s3: S3Server,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    s3.client().put_object(Bucket=s3.bucket, Key="snap/pkg/manifest.json", Body=b"{}")
    for bad in ("soon", "0", "-5", "inf"):
        monkeypatch.setenv("NEAR_DEDUP_STORAGE_TIMEOUT", bad)
        refused(["snapshot", "validate", s3.url("snap/pkg")],
                f"NEAR_DEDUP_STORAGE_TIMEOUT='{bad}': expected a number of seconds above 0")


def test_docs_state_the_rules() -> None:
    """docs/storage.md and docs/reliability.md state the key rule, the names refused, the
    deadline's setting, the publication's stops and this module's steps."""
    storage_md = (REPO / "docs" / "storage.md").read_text(encoding="utf-8")
    reliability_md = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    for phrase in ("not a plain relative path below the prefix", "may not hold control "
                   "characters", "NEAR_DEDUP_STORAGE_TIMEOUT", "no answer from the storage "
                   "within the deadline", "SIGTERM or Ctrl-C", "could not be removed",
                   "`snapshot create … --output DIR`", "publish-marker"):
        assert phrase in storage_md, phrase
    for phrase in ("NEAR_DEDUP_STORAGE_TIMEOUT", "SIGTERM or Ctrl-C during a publication",
                   "not a plain relative path"):
        assert phrase in reliability_md, phrase
