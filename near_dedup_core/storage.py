"""Where packages, reports and mixtures live: a local folder or an object-storage URL.

`parse_location` reads a location once — a local path, ``file://…``, or an fsspec URL such
as ``s3://bucket/prefix`` or ``gs://bucket/prefix`` — into one `Location` that lists, reads,
verifies and publishes folders there: a `LocalLocation` (`storage_location`, the project's
own local code paths) or a `RemoteLocation` (`storage_remote`, fsspec, and the publication
protocol of object storage, which has no rename; docs/storage.md). This module holds what a
caller asks of either: which one a text names, and a published folder as a local folder for
the checks that read files (`local_folder`, `fetched_folder`, `in_place`).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from near_dedup_core.errors import NearDedupError
from near_dedup_core.storage_location import LocalLocation, Location
from near_dedup_core.storage_names import check_location_text, shown
from near_dedup_core.storage_remote import CHUNK, RemoteLocation
from near_dedup_core.storage_streams import FileInfo

__all__ = [
    "FileInfo",
    "LocalLocation",
    "Location",
    "RemoteLocation",
    "fetched_folder",
    "in_place",
    "is_url",
    "local_folder",
    "parse_location",
]

#: ``scheme://`` at the start of a location: a URL, not a local path.
_URL_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(text: str | Path) -> bool:
    """Whether a location is a URL of object storage (``file://`` is a local path)."""
    if isinstance(text, Path):
        return False
    m = _URL_RE.match(text)
    return m is not None and m.group(1).lower() != "file"


def parse_location(text: str | Path | Location) -> Location:
    """A local path (or ``file://`` URL) -> `LocalLocation`; any other ``scheme://`` URL
    -> `RemoteLocation`, whose storage package is checked here: a missing one is one line
    with the install command."""
    if isinstance(text, Location):
        return text
    check_location_text(str(text))
    if isinstance(text, Path):
        return LocalLocation(text)
    m = _URL_RE.match(text)
    if m is None:
        return LocalLocation(Path(text))
    protocol = m.group(1).lower()
    if protocol == "file":
        return LocalLocation(Path(text[m.end() :]))
    return RemoteLocation(text, protocol)


@contextlib.contextmanager
def local_folder(location: str | Path | Location) -> Iterator[Path]:
    """A published folder (report, contamination report, mixture) as a local folder for the
    checks that read it: a local folder is itself; a folder on object storage is listed once
    and every object of the listing is streamed into a temporary folder of the same name
    (each read tied to the listed size and version tag), which the checks then read as
    they read a local one. An error that names the temporary folder names the URL instead,
    and so does a result's text (`in_place`)."""
    location = parse_location(location)
    if location.local_path is not None:
        yield location.local_path
        return
    files = location.list_files()
    with tempfile.TemporaryDirectory(prefix="near-dedup-fetch-") as tmp:
        folder = Path(tmp) / location.local_name
        for rel, info in files.items():
            target = folder / rel  # a plain relative path: `list_files` checked every key
            if not target.resolve().is_relative_to(folder.resolve()):
                raise NearDedupError(
                    f"{location.url}: the object {shown(rel)} would be "
                    f"written outside the fetched folder; refused"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            with location.open(rel, info) as src, open(target, "wb") as dst:
                while chunk := src.read(CHUNK):
                    dst.write(chunk)
        try:
            yield folder
        except NearDedupError as exc:
            raise type(exc)(str(exc).replace(str(folder), location.url)) from None


_FETCHED: dict[str, tuple[tempfile.TemporaryDirectory, Path]] = {}


def fetched_folder(location: str | Path | Location, *, fresh: bool = False) -> Path:
    """`local_folder` for a reader that keeps the folder for the rest of the command (a
    mixture build reads its report while planning, then copies it into the mixture): a local
    folder is itself; a folder on object storage is fetched once per process into a
    temporary folder that is removed when the process exits (published folders are never
    replaced, so one fetch stands for the command). ``fresh``: fetch it again (a check
    that must see the folder as it is now)."""
    location = parse_location(location)
    if location.local_path is not None:
        return location.local_path
    if fresh and location.url in _FETCHED:
        _FETCHED.pop(location.url)[0].cleanup()
    if location.url not in _FETCHED:
        with local_folder(location) as folder:
            keep = tempfile.TemporaryDirectory(prefix="near-dedup-fetch-")
            target = Path(keep.name) / location.local_name
            os.rename(folder, target)
        _FETCHED[location.url] = (keep, target)
    return _FETCHED[location.url][1]


def in_place(text: str, folder: Path, location: str | Path | Location) -> str:
    """``text`` naming ``location`` where it names its `local_folder` ``folder``."""
    return text.replace(str(folder), parse_location(location).url)
