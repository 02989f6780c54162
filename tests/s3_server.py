"""A real S3 API on the loopback for the tests: moto's standalone server
(`moto.server.ThreadedMotoServer`) on 127.0.0.1 and a free port. The product talks to it
through s3fs/botocore exactly as it would to AWS: the fixture only sets the client's ordinary
environment (``AWS_ENDPOINT_URL``, keys, region) and keeps every other credential source
(shared files, instance metadata) out of reach.

Use it in a test module with::

    from s3_server import run_s3_server

    @pytest.fixture
    def s3(monkeypatch, tmp_path):
        with run_s3_server(monkeypatch, tmp_path) as server:
            yield server

or, to save each test a server's start and stop, with the session's server (``moto_server``
in conftest.py, a `SharedMoto`): ``run_s3_server(monkeypatch, tmp_path, moto_server)`` gives
the test a new empty bucket on it (every bucket of the tests before is gone) and leaves it
running; a test that stops it (the server going away mid-run) leaves the next test a new one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

ACCESS_KEY = "AKIAMOTOTESTING00001"
SECRET_KEY = "moto-secret-never-printed"
REGION = "us-east-1"


class S3Server:
    """One running moto server with one empty bucket (``bucket``)."""

    def __init__(self, server: ThreadedMotoServer, endpoint: str, bucket: str) -> None:
        self._server = server
        self.endpoint = endpoint
        self.bucket = bucket
        self.running = True

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def client(self, service: str = "s3", **credentials: str) -> Any:
        """A boto3 client on the server, with the test keys unless others are given."""
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=credentials.get("key", ACCESS_KEY),
                            aws_secret_access_key=credentials.get("secret", SECRET_KEY))

    def keys(self, prefix: str = "", **credentials: str) -> list[str]:
        """Every key in the bucket under ``prefix``, sorted."""
        pages = self.client(**credentials).get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def enforce_auth(self) -> None:
        """From now on moto checks signatures and IAM policies (off by default)."""
        self._moto_api("reset-auth", b"0")

    def stop(self) -> None:
        if self.running:
            self.running = False
            self._server.stop()

    def _moto_api(self, what: str, body: bytes) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/{what}", data=body,
                                         method="POST",
                                         headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()


def start_moto() -> ThreadedMotoServer:
    """A running moto server on 127.0.0.1 and a free port."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    return server


class SharedMoto:
    """One moto server for many tests, started on first use, and again after a test stopped
    it."""

    def __init__(self) -> None:
        self._server: ThreadedMotoServer | None = None

    def server(self) -> ThreadedMotoServer:
        if self._server is None:
            self._server = start_moto()
        return self._server

    def stopped(self) -> None:
        """A test stopped the server: the next one gets a new one."""
        self._server = None

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


@contextlib.contextmanager
def run_s3_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                  shared: SharedMoto | None = None) -> Iterator[S3Server]:
    """Start a server (or take the ``shared`` one), point the AWS environment at it, create
    a bucket; after, stop the server it started (the ``shared`` one is left running)."""
    server = shared.server() if shared is not None else start_moto()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # No credential source but the environment: no shared files, no instance metadata.
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3 = S3Server(server, endpoint, f"near-dedup-{uuid.uuid4().hex[:12]}")
    try:
        s3._moto_api("reset", b"")  # moto's state lives in this process: start empty
        s3.client().create_bucket(Bucket=s3.bucket)
        yield s3
    finally:
        if s3.running:
            with contextlib.suppress(OSError):
                s3._moto_api("reset-auth", b"inf")
        if shared is None:
            s3.stop()
        elif not s3.running:
            shared.stopped()


def deny_writes_user(s3: S3Server) -> tuple[str, str]:
    """An IAM user allowed every S3 action but ``s3:PutObject`` (an explicit deny); returns
    its (access key id, secret). moto enforces identity policies once `enforce_auth` is on;
    it does not evaluate bucket policies, so the deny is on the user."""
    iam = s3.client("iam")
    iam.create_user(UserName="reader")
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "s3:PutObject", "Resource": "*"}]}
    iam.put_user_policy(UserName="reader", PolicyName="no-writes",
                        PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


EXPIRED_CREDENTIALS = """import json
print(json.dumps({"Version": 1, "AccessKeyId": "ASIAMOTOEXPIRED00001",
                  "SecretAccessKey": "expired-secret-never-printed",
                  "SessionToken": "expired-session-token", "Expiration": "%s"}))
"""


def expire_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """From now on the credential chain hands out temporary credentials that expired an hour
    ago: no keys in the environment, and the shared config file's ``credential_process``
    (as an SSO login or a credential helper would) prints keys, a session token and a past
    ``Expiration``. botocore refreshes them once, gets expired ones again and refuses to sign
    any request. Returns the secret, which no message may print."""
    import datetime
    import sys

    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    script = tmp_path / "expired-credentials.py"
    script.write_text(EXPIRED_CREDENTIALS % past.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      encoding="utf-8")
    config = tmp_path / "aws-config-expired"
    config.write_text(f"[default]\ncredential_process = {sys.executable} {script}\n",
                      encoding="utf-8")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    return "expired-secret-never-printed"
