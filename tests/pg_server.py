"""A throw-away PostgreSQL server for the tests: Debian's `postgresql` binaries, `initdb` and
`pg_ctl` on a temporary directory and a free loopback port, one database per test.

As root (CI), the server runs as the `postgres` system user (PostgreSQL refuses to run as
root). Without the binaries the tests skip with a reason that says how to install them —
except under CI (``CI`` set), where a missing server is a failure, not a skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

PASSWORD = "near-dedup-test"
INSTALL = "install Debian's postgresql (apt-get install postgresql)"


def require_bindir() -> Path:
    """The server binaries' folder (`find_bindir`): without them, a skip naming the install
    command, or on CI, where they must be, an error."""
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            raise RuntimeError(f"PostgreSQL is missing on CI: {INSTALL}")
        pytest.skip(f"PostgreSQL server binaries not found: {INSTALL}", allow_module_level=True)
    return bindir


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl, newest major version first."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                            key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One running server; ``url(db)`` names a database on it, ``create_database`` makes one."""

    def __init__(self, bindir: Path, root: Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        """A new server in a temporary directory; with ``root``, the server whose data lives
        there (created on first use, started again on later ones: benches that resume).
        ``settings`` are extra ``-c name=value`` server settings."""
        self.bindir = bindir
        self.keep = root is not None
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="near-dedup-pg-"))
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.port = _free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, user="postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        data = self.root / "data"
        new = not (data / "PG_VERSION").exists()
        if new:
            self._run("initdb", "-D", str(data), "--auth-local=trust",
                      "--auth-host=scram-sha-256", "-U", "postgres", "--no-sync", "-E", "UTF8",
                      "--locale=C.UTF-8")
        extra = "".join(f" -c {k}={v}" for k, v in (settings or {}).items())
        self._run("pg_ctl", "-D", str(data), "-l", str(self.root / "server.log"), "-w", "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                  f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off{extra}",
                  "start")
        self.data = data
        if new:
            self.execute(f"ALTER ROLE postgres PASSWORD '{PASSWORD}'")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self._as_user, str(self.bindir / tool), *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def url(self, dbname: str = "postgres", user: str = "postgres",
            password: str = PASSWORD) -> str:
        """A TCP URL (password authentication, as a remote client would connect)."""
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{dbname}"

    def execute(self, sql: str, dbname: str = "postgres") -> None:
        """Run ``sql`` as the superuser over the server's Unix socket."""
        import psycopg

        with psycopg.connect(host=str(self.root), port=self.port, user="postgres",
                             dbname=dbname, autocommit=True) as con:
            con.execute(sql)

    def create_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)

    def stop(self) -> None:
        """Stop the server; a temporary one is removed, one given its ``root`` is kept (and
        shut down cleanly, so that it starts again without recovery)."""
        if self.keep:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            return
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
