"""The location of a folder, local or on object storage: `Location`, what every caller asks of
one, and `LocalLocation`, a folder on this machine.

`storage.parse_location` makes one from a path or URL; `storage_remote.RemoteLocation` is
the other kind. A local location calls the same functions as the rest of the project
(`open`, `gzip.open`, `fsutil.atomic_dir`, `fsutil.verify_checksums`), so the local path
stays as fast as it is.
"""

from __future__ import annotations

import abc
import contextlib
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import (
    CHECKSUMS,
    atomic_dir,
    checksum_order,
    require_new_output_outside,
    verify_checksums,
)
from near_dedup_core.storage_names import key_problem
from near_dedup_core.storage_streams import FileInfo, OwningGzip, Window


class Location(abc.ABC):
    """A folder (or file) given once as a local path or URL. Paths passed to its methods
    are relative POSIX paths inside it (``data/train/part-00000.jsonl``); ``""`` is the
    location itself."""

    url: str

    @property
    @abc.abstractmethod
    def is_local(self) -> bool: ...

    @property
    def local_path(self) -> Path | None:
        """The folder on this machine; None on object storage."""
        return None

    @property
    def name(self) -> str:
        """The last component (``cpt-v9`` of ``s3://bucket/snapshots/cpt-v9``)."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def local_name(self) -> str:
        """The name of a local folder standing for this location: its own name where that
        is one plain path segment."""
        return self.name if key_problem(self.name) is None else "folder"

    @abc.abstractmethod
    def child(self, rel: str) -> Location:
        """The location ``rel`` below this one."""

    @abc.abstractmethod
    def list_files(self) -> dict[str, FileInfo]:
        """Every file below, relative path -> `FileInfo`, sorted as ``checksums.sha256`` is.
        Nothing there (no such folder or prefix) is an error naming the URL."""

    @abc.abstractmethod
    def info(self, rel: str = "") -> FileInfo:
        """Size and version tag of one file; a missing file is an error naming it."""

    @abc.abstractmethod
    def exists(self, rel: str = "") -> bool: ...

    @abc.abstractmethod
    def folders(self) -> list[str]:
        """Names of the folders directly inside, sorted (on object storage: the common
        prefixes one level below); none or no such folder: ``[]``."""

    @abc.abstractmethod
    def open(
        self, rel: str, expect: FileInfo | None = None, start: int = 0, end: int | None = None
    ) -> io.BufferedIOBase:
        """Stream the bytes ``start:end`` of a file (all of it by default) without reading
        the rest. With ``expect`` (from `list_files`), a file whose size or version tag no
        longer matches is refused; on object storage every request of the stream is tied to
        the version opened, so the file cannot change under the reader either."""

    @abc.abstractmethod
    def open_shard(self, rel: str, expect: FileInfo | None = None) -> io.BufferedIOBase:
        """`open` a whole shard, decompressed when its name ends with ``.gz``."""

    def read_bytes(self, rel: str, expect: FileInfo | None = None) -> bytes:
        with self.open(rel, expect) as fh:
            return fh.read()

    @abc.abstractmethod
    def verify(self, label: str) -> dict[str, str]:
        """Check the folder against its ``checksums.sha256`` as `fsutil.verify_checksums`
        does; return path -> sha256 of every listed file. A folder without the file is
        refused: it is not (or not yet) a published folder."""

    @abc.abstractmethod
    def require_new_output(
        self, marker: str = CHECKSUMS, *, outside: Sequence[Location] = ()
    ) -> None:
        """Refuse an output that already exists: outputs are never replaced. ``marker``:
        the file whose presence makes a folder on object storage published. ``outside``:
        the command's inputs; a local output inside a local one is refused, naming it."""

    @abc.abstractmethod
    def publish(self, marker: str = CHECKSUMS) -> contextlib.AbstractContextManager[Path]:
        """Yield a local folder to write the output into; on success it appears at this
        location as a whole, ``marker`` (``checksums.sha256``; a package's
        ``manifest.json``) last, which the folder must hold. On any exception, and on a
        SIGTERM or Ctrl-C before the marker is written, nothing is published."""

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)


class LocalLocation(Location):
    """A folder on this machine: the project's own local code paths."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = str(path)

    @property
    def is_local(self) -> bool:
        return True

    @property
    def local_path(self) -> Path:
        return self.path

    @property
    def name(self) -> str:
        return self.path.name

    def child(self, rel: str) -> LocalLocation:
        return LocalLocation(self.path / rel)

    def _file(self, rel: str) -> Path:
        return self.path / rel if rel else self.path

    def list_files(self) -> dict[str, FileInfo]:
        if not self.path.is_dir():
            raise NearDedupError(f"{self.url}: no such directory")
        found: dict[str, FileInfo] = {}
        for root, _dirs, files in os.walk(self.path):
            for fname in files:
                full = Path(root, fname)
                found[full.relative_to(self.path).as_posix()] = FileInfo(full.stat().st_size)
        return dict(sorted(found.items(), key=lambda kv: checksum_order(kv[0])))

    def info(self, rel: str = "") -> FileInfo:
        try:
            return FileInfo(self._file(rel).stat().st_size)
        except FileNotFoundError:
            raise NearDedupError(f"{self._file(rel)}: file not found") from None

    def exists(self, rel: str = "") -> bool:
        path = self._file(rel)
        return path.exists() or path.is_symlink()

    def folders(self) -> list[str]:
        if not self.path.is_dir():
            return []
        return sorted(p.name for p in self.path.iterdir() if p.is_dir())

    def open(
        self, rel: str, expect: FileInfo | None = None, start: int = 0, end: int | None = None
    ) -> io.BufferedIOBase:
        path = self._file(rel)
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            raise NearDedupError(f"{path}: file not found") from None
        size = os.fstat(fh.fileno()).st_size
        if expect is not None and size != expect.size:
            fh.close()
            raise NearDedupError(
                f"{path}: changed since it was listed (size {expect.size} then, {size} now)"
            )
        if start == 0 and end is None:
            return fh
        fh.seek(start)
        return io.BufferedReader(Window(fh, None if end is None else end - start))

    def open_shard(self, rel: str, expect: FileInfo | None = None) -> io.BufferedIOBase:
        if rel.endswith(".gz"):
            fh = self.open(rel, expect)
            return OwningGzip(fh)
        return self.open(rel, expect)

    def verify(self, label: str) -> dict[str, str]:
        return verify_checksums(self.path, label)

    def require_new_output(
        self, marker: str = CHECKSUMS, *, outside: Sequence[Location] = ()
    ) -> None:
        require_new_output_outside(
            self.path, [p.local_path for p in outside if p.local_path is not None]
        )

    def publish(self, marker: str = CHECKSUMS) -> contextlib.AbstractContextManager[Path]:
        return atomic_dir(self.path)

    def __reduce__(self) -> tuple[Any, tuple[Path]]:  # travels to worker processes
        return LocalLocation, (self.path,)
