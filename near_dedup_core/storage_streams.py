"""The byte streams of stored files: a window of a file object (a byte range, its length
checked), an S3 object read by ranged requests pinned to the version that was listed, and
gzip over a stream that owns it. `storage` opens them; a read that finds the object changed
since its listing is refused in one line."""

from __future__ import annotations

import contextlib
import gzip
import io
from dataclasses import dataclass
from typing import IO, Any

from near_dedup_core.errors import NearDedupError
from near_dedup_core.storage_errors import deadline, errors

#: s3fs's own attempts around botocore's, and the requests for a body cut short.
S3FS_ATTEMPTS = 2

#: Bytes asked for per request while streaming an S3 object: each request's body is read as
#: it arrives, so this bounds the requests, not the memory.
REQUEST_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What a listing says of one file: its size, and on object storage its version tag
    (S3 ``ETag``, GCS ``generation``/``etag``). A read checks the object against it, so a
    file replaced between listing and reading is refused, not read."""

    size: int
    etag: str | None = None


class Window(io.RawIOBase):
    """At most ``limit`` bytes of ``fh`` from where it stands (all of it with None); on
    object storage each read failure is one line naming the URL."""

    def __init__(self, fh: IO[bytes], limit: int | None, url: str | None = None) -> None:
        super().__init__()
        self._fh = fh
        self._left = limit
        self._url = url

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._left is not None:
            view = view[:self._left]
        if not len(view):
            return 0
        if self._url is None:
            n = self._fh.readinto(view)  # type: ignore[attr-defined]
        else:
            with errors(self._url):
                n = self._fh.readinto(view)  # type: ignore[attr-defined]
        if self._left is not None:
            self._left -= n
        return n

    def close(self) -> None:
        try:
            self._fh.close()
        finally:
            super().close()


def same_as_listed(url: str, expect: FileInfo | None, now: FileInfo) -> None:
    """Refuse a file whose size or version tag is no longer what the listing said."""
    if expect is not None and (now.size != expect.size or (
            expect.etag is not None and now.etag is not None and now.etag != expect.etag)):
        raise NearDedupError(f"{url}: changed since it was listed (size {expect.size}, "
                             f"version {expect.etag} then; size {now.size}, version "
                             f"{now.etag} now)")


class S3Stream(io.RawIOBase):
    """Bytes ``start:end`` of one S3 object, streamed: one ranged ``GET`` per
    `REQUEST_BYTES`, each tied to the version opened (``If-Match: <ETag>``: an object
    replaced meanwhile is refused, never mixed), its body read into the caller's buffer as
    it arrives. What the reader holds is the client's socket buffer, not a block of the
    object (s3fs's buffered file holds the block it fetched, a copy of it and the read
    ahead). A body cut short is asked for again from where it stopped."""

    def __init__(self, fs: Any, key: str, etag: str | None, start: int, end: int,
                 url: str) -> None:
        super().__init__()
        self._fs = fs
        self._bucket, _, self._key = key.lstrip("/").partition("/")
        self._match = {} if etag is None else {"IfMatch": etag}
        self._pos = start
        self._end = end
        self._url = url
        self._body: Any = None
        self._body_end = start
        #: bytes asked for so far (the tests check that a read asks for what it reads)
        self.requested = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")[:max(0, self._end - self._pos)]
        if not len(view):
            return 0
        from fsspec.asyn import sync

        with errors(self._url):
            return int(sync(self._fs.loop, self._fill, view, timeout=deadline(len(view))))

    async def _fill(self, view: memoryview) -> int:
        got = 0
        failures = 0
        while got < len(view):
            if self._body is None:
                stop = min(self._end, self._pos + REQUEST_BYTES)
                await self._fs.set_session()
                client = await self._fs.get_s3(self._bucket)
                answer = await client.get_object(
                    Bucket=self._bucket, Key=self._key,
                    Range=f"bytes={self._pos}-{stop - 1}", **self._match)
                self._body, self._body_end = answer["Body"], stop
                self.requested += stop - self._pos
            cut: Exception | None = None
            try:
                chunk = await self._body.read(min(len(view) - got, self._body_end - self._pos))
            except Exception as exc:  # the connection dropped, or the body ended early
                chunk, cut = b"", exc
            if chunk:
                view[got:got + len(chunk)] = chunk
                got += len(chunk)
                self._pos += len(chunk)
                failures = 0
            if self._pos >= self._body_end:
                self._close_body()
            elif not chunk:  # ask again from here, a few times
                self._close_body()
                failures += 1
                if failures >= S3FS_ATTEMPTS:
                    raise cut or ConnectionError(f"the body ended at byte {self._pos}")
        return got

    def _close_body(self) -> None:
        if self._body is not None:
            with contextlib.suppress(Exception):
                self._body.close()
            self._body = None

    def close(self) -> None:
        if self._body is not None:
            from fsspec.asyn import sync

            with contextlib.suppress(Exception):
                sync(self._fs.loop, self._aclose, timeout=deadline())
        super().close()

    async def _aclose(self) -> None:
        self._close_body()


class OwningGzip(gzip.GzipFile):
    """A gzip stream that closes the stream it reads from."""

    def __init__(self, fh: io.BufferedIOBase) -> None:
        super().__init__(fileobj=fh, mode="rb")
        self._owned = fh

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._owned.close()
