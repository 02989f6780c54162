"""A folder on object storage (`RemoteLocation`), through fsspec: ``s3://bucket/prefix``
(s3fs), ``gs://bucket/prefix`` (gcsfs) or another fsspec protocol.

Publishing on object storage (see ``docs/storage.md``): object storage has no rename, so a
published folder is complete when, and only when, its ``checksums.sha256`` exists.

1. The output prefix must hold nothing (an existing output is never replaced; a prefix that
   holds files without ``checksums.sha256`` is an interrupted publication and is refused too).
2. The caller writes the folder locally (a temporary folder, as `fsutil.atomic_dir` gives).
3. Every file but ``checksums.sha256`` is uploaded under a private staging prefix
   ``.<name>.tmp-<host>-<pid>-<token>`` beside the output, then copied server-side to the
   output prefix.
4. ``checksums.sha256`` is written last, straight to the output, as a conditional write
   (``If-None-Match: *`` on S3): of two runs publishing to one output, one wins.
5. The staging prefix is removed. Staging prefixes of runs killed on this host (their process
   is gone) are removed by the next publication beside them.

A reader (`Location.verify`) refuses a folder without ``checksums.sha256``, so a run killed
at any step leaves nothing that verifies. A run that fails, or is stopped by SIGTERM or
Ctrl-C, removes what it wrote before it ends (`RemoteLocation._commit`). Every storage call
has a deadline (`storage_errors.deadline`). A key listed below a prefix must be a plain
relative path (`storage_names`), so a fetched folder never writes outside itself. Every
failure is one `NearDedupError` line naming the URL; credentials come only from the storage
client's own chain and are never printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import secrets
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import CHECKSUMS, checksum_order, parse_checksums
from near_dedup_core.progress import pause_point
from near_dedup_core.storage_errors import deadline, errors
from near_dedup_core.storage_location import Location
from near_dedup_core.storage_names import check_key, key_problem
from near_dedup_core.storage_streams import (
    S3FS_ATTEMPTS,
    FileInfo,
    OwningGzip,
    S3Stream,
    Window,
    same_as_listed,
)

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

#: Protocols with an install extra of near-dedup, protocol -> extra.
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}

# Bounded waits for S3 (botocore): an unreachable or hung endpoint fails in seconds, not in
# botocore's default minutes. Worst case for a hung endpoint: S3FS_ATTEMPTS * MAX_ATTEMPTS
# * READ_TIMEOUT plus botocore's backoff, about half a minute.
CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 5.0
#: botocore attempts per request, the first included (standard retry mode: throttling,
#: 5xx and connection errors are retried with exponential backoff).
MAX_ATTEMPTS = 3
#: Bytes fetched per request (and held) while reading an object of another fsspec protocol.
BLOCK_SIZE = 8 << 20
#: Largest file uploaded to S3 in one request (S3's limit for PutObject).
_MAX_PUT = 5 << 30
#: Bytes per part when uploading a larger file to S3 (one part in memory at a time). S3
#: allows at most 10,000 parts, so a very large file has larger parts.
UPLOAD_PART = 8 << 20
_MAX_PARTS = 10_000
CHUNK = 1 << 20


#: The environment a filesystem's client is made from: credentials, profile, region and
#: endpoint (``AWS_*``, ``GOOGLE_*``), and fsspec's own settings.
_CLIENT_ENV = ("AWS_", "GOOGLE_", "GCSFS_", "FSSPEC_")
#: Filesystems made in this process, by protocol and that environment (`_filesystem`).
_FILESYSTEMS: dict[tuple, AbstractFileSystem] = {}
_FILESYSTEMS_LOCK = threading.Lock()


def _client_env() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_CLIENT_ENV)))


class RemoteLocation(Location):
    """A folder on object storage, through fsspec (s3fs for ``s3://``). Its filesystem is
    made on first use, and shared with every location of its protocol in this process
    that sees the same environment (credentials, ``AWS_ENDPOINT_URL``): making a client
    costs about 0.2 s of CPU, more than most calls it makes."""

    def __init__(self, url: str, protocol: str) -> None:
        self.url = url.rstrip("/")
        self.protocol = protocol
        self._cls = _filesystem_class(url, protocol)
        import fsspec.core

        self.root = fsspec.core.strip_protocol(self.url).rstrip("/")
        self._fs: AbstractFileSystem | None = None
        self._fs_pid = 0

    @property
    def is_local(self) -> bool:
        return False

    @property
    def fs(self) -> AbstractFileSystem:
        """The fsspec filesystem, made on first use in each process (an async filesystem's
        event loop does not survive a fork) for the environment as it is then, and kept
        for the locations that see the same environment."""
        if self._fs is None or self._fs_pid != os.getpid():
            key = (self.protocol, os.getpid(), _client_env())
            with _FILESYSTEMS_LOCK:
                fs = _FILESYSTEMS.get(key)
                if fs is None:
                    fs = self._made()
                    if len(_FILESYSTEMS) >= 8:  # a process that moves between many settings
                        _FILESYSTEMS.clear()
                    _FILESYSTEMS[key] = fs
            self._fs, self._fs_pid = fs, os.getpid()
        return self._fs

    def _made(self) -> AbstractFileSystem:
        """A new filesystem of this location's protocol, with our timeouts and retries."""
        options: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False}
        if self.protocol in ("s3", "s3a"):
            options["config_kwargs"] = {
                "connect_timeout": CONNECT_TIMEOUT,
                "read_timeout": READ_TIMEOUT,
                "retries": {"total_max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            }
        # aiobotocore (unlike botocore) adds no handler to its loggers, so Python would
        # print its warnings (such as expired credentials) on stderr before our one line
        logging.getLogger("aiobotocore").addHandler(logging.NullHandler())
        with errors(self.url):
            fs = self._cls(**options)
        if self.protocol in ("s3", "s3a"):
            fs.retries = S3FS_ATTEMPTS
        return fs

    def child(self, rel: str) -> RemoteLocation:
        return RemoteLocation(f"{self.url}/{rel}", self.protocol)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:  # travels to worker processes
        return RemoteLocation, (self.url, self.protocol)

    def _do(self, method: str, *args: Any, nbytes: int = 0, **kwargs: Any) -> Any:
        """Call a method of the filesystem with a deadline (`storage_errors.deadline`, for
        moving ``nbytes``): past it, the call is cancelled and fails (fsspec's ``timeout``
        of an async filesystem's calls, which s3fs and gcsfs are)."""
        if getattr(self.fs, "async_impl", False):
            kwargs["timeout"] = deadline(nbytes)
        return getattr(self.fs, method)(*args, **kwargs)

    def _key(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _url(self, rel: str) -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def _bucket(self) -> str:
        return self.root.lstrip("/").split("/", 1)[0]

    def list_files(self) -> dict[str, FileInfo]:
        with errors(self.url):
            found = self._do("find", self.root, detail=True)
        files: dict[str, FileInfo] = {}
        for name, info in found.items():
            if info.get("type") != "file" or not name.startswith(self.root + "/"):
                continue
            rel = name[len(self.root) + 1 :]
            if (
                (rel == "" or rel.endswith("/"))
                and not int(info.get("size") or 0)
                and key_problem(rel.rstrip("/") or "x") is None
            ):
                continue  # an empty folder marker (``data/``), as consoles create them
            check_key(self.url, rel)
            files[rel] = _file_info(info)
        if not files:
            self._bucket_must_exist()
            raise NearDedupError(f"{self.url}: no such prefix (nothing is stored under it)")
        return dict(sorted(files.items(), key=lambda kv: checksum_order(kv[0])))

    def _bucket_must_exist(self) -> None:
        with errors(self.url):
            try:
                self._do("info", self._bucket())
            except FileNotFoundError:
                raise NearDedupError(f"{self.url}: no such bucket") from None

    def info(self, rel: str = "") -> FileInfo:
        with errors(self._url(rel)):
            found = self._do("info", self._key(rel))
        if found.get("type") != "file":
            raise NearDedupError(f"{self._url(rel)}: not a file")
        return _file_info(found)

    def exists(self, rel: str = "") -> bool:
        with errors(self._url(rel)):
            self._bucket_must_exist()
            return bool(self._do("exists", self._key(rel)))

    def folders(self) -> list[str]:
        with errors(self.url):
            try:
                found = self._do("ls", self.root, detail=True)
            except FileNotFoundError:
                return []
        return sorted(
            str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            for info in found
            if info.get("type") == "directory"
        )

    def open(
        self, rel: str, expect: FileInfo | None = None, start: int = 0, end: int | None = None
    ) -> io.BufferedIOBase:
        url = self._url(rel)
        if self.protocol in ("s3", "s3a"):
            now = self.info(rel)
            same_as_listed(url, expect, now)
            stop = now.size if end is None else min(end, now.size)
            return io.BufferedReader(
                S3Stream(self.fs, self._key(rel), now.etag, start, stop, url), CHUNK
            )
        size = None if end is None else end - start
        with errors(url):
            block = BLOCK_SIZE if size is None else max(1, min(BLOCK_SIZE, size))
            fh = self.fs.open(self._key(rel), "rb", block_size=block, cache_type="readahead")
        details = getattr(fh, "details", None) or {}
        if expect is not None:
            try:
                same_as_listed(url, expect, _file_info(details) if details else self.info(rel))
            except NearDedupError:
                fh.close()
                raise
        if start:
            with errors(url):
                fh.seek(start)
        return io.BufferedReader(Window(fh, size, url), CHUNK)

    def open_shard(self, rel: str, expect: FileInfo | None = None) -> io.BufferedIOBase:
        fh = self.open(rel, expect)
        return OwningGzip(fh) if rel.endswith(".gz") else fh

    def verify(self, label: str) -> dict[str, str]:
        where = f"{label} {self.url}"
        files = self.list_files()
        if CHECKSUMS not in files:
            raise NearDedupError(
                f"{where}: {CHECKSUMS} is missing (not a published folder, "
                f"or its publication was interrupted)"
            )
        try:
            text = self.read_bytes(CHECKSUMS, files[CHECKSUMS]).decode("utf-8")
        except UnicodeDecodeError:
            raise NearDedupError(f"{where}: {CHECKSUMS} is not UTF-8 text") from None
        listed = parse_checksums(text, where)
        for rel in listed:
            if rel not in files:
                raise NearDedupError(f"{where}: {rel} is listed in {CHECKSUMS} but missing")
        for rel in files:
            if rel != CHECKSUMS and rel not in listed:
                raise NearDedupError(f"{where}: {rel} is not listed in {CHECKSUMS}")
        for rel, digest in listed.items():
            h = hashlib.sha256()
            with self.open(rel, files[rel]) as fh:
                while chunk := fh.read(CHUNK):
                    h.update(chunk)
            if h.hexdigest() != digest:
                raise NearDedupError(
                    f"{where}: {rel} does not match its sha256 in {CHECKSUMS} (file changed)"
                )
        return listed

    def require_new_output(
        self, marker: str = CHECKSUMS, *, outside: Sequence[Location] = ()
    ) -> None:
        # a prefix on a bucket is never inside a local input
        if "/" not in self.root.strip("/"):
            raise NearDedupError(
                f"output {self.url}: name a prefix inside the bucket "
                f"(s3://bucket/reports/name), not the bucket itself"
            )
        problem = key_problem(self.root.strip("/").split("/", 1)[1])
        if problem is not None:
            raise NearDedupError(
                f"output {self.url}: the prefix is not a plain path inside the bucket ({problem})"
            )
        with errors(self.url):
            self._bucket_must_exist()
            present = self._do("exists", self.root)
            complete = present and self._do("exists", self._key(marker))
        if complete:
            raise NearDedupError(f"output {self.url} already exists; choose a new directory")
        if present:
            raise NearDedupError(
                f"output {self.url} already exists and holds no {marker} "
                f"(an interrupted or concurrent publication); remove it or "
                f"choose a new directory"
            )

    @contextlib.contextmanager
    def publish(self, marker: str = CHECKSUMS) -> Iterator[Path]:
        self.require_new_output(marker)
        with tempfile.TemporaryDirectory(prefix="near-dedup-publish-") as tmp:
            folder = Path(tmp) / self.local_name
            folder.mkdir()
            yield folder
            self._commit(folder, marker)

    def _staging_prefix(self) -> str:
        parent, _, name = self.root.rpartition("/")
        token = f"{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
        return f"{parent}/.{name}.tmp-{token}"

    def _remove_stale_staging(self) -> None:
        """Remove staging prefixes beside this output left by dead processes of this host
        (as `fsutil.remove_stale_temporaries` does locally)."""
        parent, _, name = self.root.rpartition("/")
        stem = f"{parent}/.{name}.tmp-{_host()}-"
        try:
            siblings = self._do("ls", parent, detail=False)
        except FileNotFoundError:  # nothing beside the output yet
            return
        for sibling in siblings:
            pid = sibling.rstrip("/")[len(stem) :].partition("-")[0]
            if (
                sibling.startswith(stem)
                and pid.isdigit()
                and int(pid) != os.getpid()
                and not _pid_alive(int(pid))
            ):
                with contextlib.suppress(FileNotFoundError):
                    self._do("rm", sibling, recursive=True)

    def _commit(self, folder: Path, marker: str) -> None:
        """Publish ``folder`` (rules 3 to 5 of the module doc). The storage calls run on a
        thread of their own while this one waits: a SIGTERM or Ctrl-C that stops the command
        meanwhile lets the call in flight end (within its deadline), then the publication
        stops at its next step and removes what it wrote — unless its marker was written,
        which makes the output published — and only then does the stop propagate. So what a
        stopped publication wrote is always known, and removed."""
        rels = sorted(
            (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()),
            key=checksum_order,
        )
        if marker not in rels:
            raise NearDedupError(
                f"output {self.url}: the folder to publish has no {marker}; nothing was published"
            )
        stop, done = threading.Event(), threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                self._publish_files(folder, [r for r in rels if r != marker], marker, stop)
            except BaseException as exc:  # handed to the waiting thread
                failed.append(exc)
            finally:
                done.set()

        # waited for on an Event: a Thread.join interrupted by a signal may take the thread
        # for ended while it runs (Python 3.11)
        threading.Thread(target=run, name="near-dedup-publish", daemon=True).start()
        try:
            while not done.wait(0.1):
                pass
        except BaseException:  # SIGTERM or Ctrl-C: stop at the next step, undo, then stop
            stop.set()
            with _stops_held():
                done.wait()
            raise
        if failed:
            raise failed[0]

    def _publish_files(
        self, folder: Path, data: list[str], marker: str, stop: threading.Event
    ) -> None:
        staging: str | None = None
        copied: list[str] = []  # output keys this run may have written
        committed = False
        try:
            with errors(self.url, "nothing was published"):
                _step(stop, "publish-start")
                self._remove_stale_staging()
                staging = self._staging_prefix()
                for n, rel in enumerate(data):
                    _step(stop, "publish-staged" if n == 1 else None)
                    self._upload(folder / rel, f"{staging}/{rel}")
                _step(stop, "publish-check")
                self.require_new_output(marker)  # nobody published meanwhile
                for n, rel in enumerate(data):
                    _step(stop, "publish-copied" if n == 1 else None)
                    copied.append(rel)  # before the call: it may land however it ends
                    self._do("copy", f"{staging}/{rel}", self._key(rel))
                _step(stop, "publish-marker")
                if not self._write_marker(folder / marker, marker):
                    copied = []  # the output is the other run's now: leave its files be
                    raise NearDedupError(
                        f"output {self.url} was published by another run "
                        f"meanwhile; nothing of this run was published"
                    )
                committed = True
        except BaseException as exc:
            if committed:
                raise
            left = self._discard(staging, copied)
            if left and isinstance(exc, NearDedupError):
                raise NearDedupError(
                    f"{exc} ({left} could not be removed; until it is, "
                    f"the next run to this output refuses it)"
                ) from None
            raise
        pause_point("publish-done")
        with contextlib.suppress(Exception):  # the output is complete; this is tidying
            self._do("rm", staging, recursive=True)

    def _write_marker(self, local: Path, marker: str) -> bool:
        """Write the marker (``checksums.sha256``) only if it does not exist yet (conditional
        write where the storage has one: S3's ``If-None-Match: *``); False if it already
        existed."""
        key = self._key(marker)
        try:
            if self.protocol in ("s3", "s3a"):
                self._upload(local, key, create=True)
            else:
                if self._do("exists", key):
                    return False
                self._upload(local, key)
        except FileExistsError:
            return False
        return True

    def _upload(self, local: Path, key: str, *, create: bool = False) -> None:
        """Upload one file without holding it in memory. On S3 a file up to 5 GiB is one
        ``PutObject`` whose body is read from the file as it is sent (s3fs reads a file
        under 100 MiB whole, and its `put` of several files sends them all at once: the
        whole report in memory at the end of the scan); a larger one goes in parts of
        `UPLOAD_PART` bytes, one at a time. ``create``: only if the key does not exist yet
        (``If-None-Match: *``); FileExistsError if it does. The deadline grows with the
        file (`storage_errors.deadline`)."""
        size = local.stat().st_size
        if self.protocol not in ("s3", "s3a"):
            self._do("put_file", str(local), key, nbytes=size)
            return
        if size > _MAX_PUT:
            part = max(UPLOAD_PART, -(-size // _MAX_PARTS))
            self._do(
                "put_file",
                str(local),
                key,
                nbytes=size,
                chunksize=part,
                max_concurrency=1,
                mode="create" if create else "overwrite",
            )
            return
        from fsspec.asyn import sync

        sync(self.fs.loop, self._put_streamed, local, size, key, create, timeout=deadline(size))

    async def _put_streamed(self, local: Path, size: int, key: str, create: bool) -> None:
        bucket, _, name = key.lstrip("/").partition("/")
        await self.fs.set_session()
        client = await self.fs.get_s3(bucket)
        condition = {"IfNoneMatch": "*"} if create else {}
        with open(local, "rb") as body:  # botocore rewinds it before each retry
            try:
                await client.put_object(
                    Bucket=bucket, Key=name, Body=body, ContentLength=size, **condition
                )
            except Exception as exc:  # botocore's ClientError: the server's answer
                response = getattr(exc, "response", None) or {}
                code = str((response.get("Error") or {}).get("Code"))
                if create and code in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise FileExistsError(key) from exc
                raise

    def _discard(self, staging: str | None, copied: list[str]) -> str:
        """Remove what a failed or stopped publication wrote: its staging prefix and the
        files it copied to the output (which holds no marker, so no reader took them). All
        of it within one deadline: against a storage that stopped answering, the command
        still ends (what is left is what a killed run leaves, see the module doc). Returns
        what could not be removed, in words ("" when everything was)."""
        end = time.monotonic() + deadline()
        keys = [self._key(rel) for rel in copied]
        if staging is not None:
            keys.append(staging)
        failed: list[str] = []
        for key in keys:
            left = end - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError(key)
                if getattr(self.fs, "async_impl", False):
                    self.fs.rm(key, recursive=key == staging, timeout=left)
                else:
                    self.fs.rm(key, recursive=key == staging)
            except FileNotFoundError:
                continue
            except Exception:  # unreachable, denied, past the deadline: said by the caller
                failed.append(key)
        if not failed:
            return ""
        output = [key for key in failed if key != staging]
        words = [f"{len(output)} file(s) at the output"] if output else []
        if staging in failed:
            words.append(f"the staging prefix {self.protocol}://{staging.lstrip('/')}/")
        return " and ".join(words)


def _step(stop: threading.Event, stage: str | None) -> None:
    """A point between two storage calls of a publication: stop there if the command was
    stopped (`RemoteLocation._commit`). ``stage`` names it for `progress.pause_point`."""
    if stage is not None:
        pause_point(stage)
    if stop.is_set():
        raise _Stopped


class _Stopped(BaseException):
    """A publication stopped by a SIGTERM or Ctrl-C of the command (which propagates that)."""


@contextlib.contextmanager
def _stops_held() -> Iterator[None]:
    """While a stopped publication removes what it wrote: a further Ctrl-C (or a first
    SIGTERM after a Ctrl-C) waits instead of cutting the removal short; the command is
    already stopping. A second SIGTERM still ends the process at once (its default
    action, which the CLI restores after the first)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    held = {sig: handler for sig, handler in held.items() if callable(handler)}
    for sig in held:
        signal.signal(sig, lambda *_: None)
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)


def _file_info(info: dict) -> FileInfo:
    tag = info.get("ETag") or info.get("etag") or info.get("generation")
    return FileInfo(int(info.get("size") or 0), None if tag is None else str(tag))


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _filesystem_class(url: str, protocol: str) -> Any:
    """fsspec's filesystem class for ``protocol``; a missing package is one line saying
    what to install."""
    extra = EXTRAS.get(protocol)
    install = f"pip install 'near-dedup[{extra}]'" if extra else None
    try:
        import fsspec
    except ImportError:
        raise NearDedupError(
            f"{url}: URLs need fsspec and the storage's package: {install or 'pip install fsspec'}"
        ) from None
    try:
        return fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        hint = install or str(exc).strip().splitlines()[0]
        raise NearDedupError(
            f"{url}: {protocol}:// URLs need a package that is not installed: {hint}"
        ) from None
    except ValueError:
        raise NearDedupError(f"{url}: unknown storage protocol {protocol}://") from None
