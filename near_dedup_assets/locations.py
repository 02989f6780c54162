"""Locations of the release: a local folder (`Path`) or a URL of object storage (`str`).

A root setting that is a URL (``s3://bucket/reports``) puts every location below it on object
storage (`near_dedup_core.storage`, ``docs/storage.md``). The release then reads and writes
there through the storage layer: folders are listed and checked where they are, published
folders are fetched into a temporary local folder for the checks that read them (messages name
the URL), and new outputs are built in a local temporary folder and published by the storage
layer's rule (every file, ``checksums.sha256`` last). A local location takes the same code
paths as before.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import dagster as dg

from near_dedup_core.errors import NearDedupError
from near_dedup_core.storage import fetched_folder, in_place, is_url, parse_location

#: A location of the release: an absolute local path, or a URL of object storage.
Where = Path | str
T = TypeVar("T")


def as_where(value: str | Path) -> Where:
    """A location recorded as text (a mixture config's, a metadata entry's): a URL stays text."""
    return value if isinstance(value, Path) or is_url(value) else Path(value)


def below(root: Where, name: str) -> Where:
    """``name`` (may contain ``/``) inside the folder ``root``."""
    return f"{root}/{name}" if isinstance(root, str) else root / name


def name_of(where: Where) -> str:
    """The last component of a location."""
    return where.name if isinstance(where, Path) else where.rsplit("/", 1)[-1]


def exists(where: Where, rel: str = "") -> bool:
    """Whether the folder (or ``rel`` inside it) exists; on object storage, whether anything
    is stored under the prefix."""
    if isinstance(where, Path):
        return (where / rel).exists() if rel else where.exists()
    return parse_location(where).exists(rel)


def is_folder(where: Where) -> bool:
    """A local directory, or a prefix on object storage that holds objects."""
    return where.is_dir() if isinstance(where, Path) else parse_location(where).exists()


def package_folders(folder: Where) -> list[Where]:
    """The folders directly inside ``folder`` but hidden ones (transfers in progress), in name
    order."""
    if isinstance(folder, Path):
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [below(folder, name) for name in parse_location(folder).folders()
            if not name.startswith(".")]


def local(where: Where, *, fresh: bool = False) -> Path:
    """A local folder that holds ``where``'s files: the folder itself, or a published folder
    on object storage fetched once per process (``fresh``: fetched again)."""
    return where if isinstance(where, Path) else fetched_folder(where, fresh=fresh)


@contextmanager
def naming(where: Where, folder: Path) -> Iterator[None]:
    """An error raised inside names ``where`` where it names its local copy ``folder``."""
    if isinstance(where, Path):
        yield
        return
    try:
        yield
    except NearDedupError as exc:
        raise type(exc)(in_place(str(exc), folder, where)) from None


def checked(where: Where, check: Callable[[Path], T]) -> T:
    """``check`` run on the folder as it is now (on object storage: a fresh copy), an error
    naming ``where``."""
    folder = local(where, fresh=True)
    with naming(where, folder):
        return check(folder)


@contextmanager
def staged(target: Where, staging: Callable[[Path], Path]) -> Iterator[Path]:
    """A fresh local folder (not created yet) to build ``target`` in, removed afterwards: for
    a local target its sibling ``staging(target)``; for one on object storage a folder of the
    same name in a temporary folder."""
    if isinstance(target, Path):
        folder = staging(target)
        shutil.rmtree(folder, ignore_errors=True)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    with tempfile.TemporaryDirectory(prefix="near-dedup-release-") as tmp:
        yield Path(tmp) / name_of(target)


def publish_folder(folder: Path, target: str) -> None:
    """Publish the complete local ``folder`` (it holds its ``checksums.sha256``) at the URL
    ``target`` by the storage layer's rule; an existing output is refused."""
    with parse_location(target).publish() as out:
        shutil.copytree(folder, out, dirs_exist_ok=True)


def location_value(where: Where) -> dg.MetadataValue:
    """A location as the UI links it: a URL as a link, a local path as a path."""
    if isinstance(where, str):
        return dg.MetadataValue.url(where)
    return dg.MetadataValue.path(str(where))
