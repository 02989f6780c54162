"""Locations of the release: `near_dedup_core.storage.Location`, a local folder or a URL of
object storage.

A root setting that is a URL (``s3://bucket/reports``) puts every location below it on object
storage (``docs/storage.md``). The release then reads and writes there through the storage
layer: folders are listed and checked where they are, published folders are fetched into a
temporary local folder for the checks that read them (messages name the URL), and new outputs
are built in a local temporary folder and published by the storage layer's rule (every file,
``checksums.sha256`` last). A local location takes the same code paths as before. The helpers
below are the few questions the release asks of a location beyond what `Location` answers.
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
from near_dedup_core.storage import Location, fetched_folder, in_place, parse_location

T = TypeVar("T")


def sibling(where: Location, name: str) -> Location:
    """The location ``name`` in the folder that holds ``where``."""
    path = where.local_path
    if path is not None:
        return parse_location(path.with_name(name))
    return parse_location(f"{where.url.rsplit('/', 1)[0]}/{name}")


def is_folder(where: Location) -> bool:
    """A local directory, or a prefix on object storage that holds objects."""
    path = where.local_path
    return path.is_dir() if path is not None else where.exists()


def package_folders(folder: Location) -> list[Location]:
    """The folders directly inside ``folder`` but hidden ones (transfers in progress), in name
    order."""
    return [folder.child(name) for name in folder.folders() if not name.startswith(".")]


def local(where: Location, *, fresh: bool = False) -> Path:
    """A local folder that holds ``where``'s files: the folder itself, or a published folder
    on object storage fetched once per process (``fresh``: fetched again)."""
    return fetched_folder(where, fresh=fresh)


@contextmanager
def naming(where: Location, folder: Path) -> Iterator[None]:
    """An error raised inside names ``where`` where it names its local copy ``folder``."""
    if where.local_path is not None:
        yield
        return
    try:
        yield
    except NearDedupError as exc:
        raise type(exc)(in_place(str(exc), folder, where)) from None


def checked(where: Location, check: Callable[[Path], T]) -> T:
    """``check`` run on the folder as it is now (on object storage: a fresh copy), an error
    naming ``where``."""
    folder = local(where, fresh=True)
    with naming(where, folder):
        return check(folder)


@contextmanager
def staged(target: Location, staging: Callable[[Path], Path]) -> Iterator[Path]:
    """A fresh local folder (not created yet) to build ``target`` in, removed afterwards: for
    a local target its sibling ``staging(target)``; for one on object storage a folder of the
    same name in a temporary folder."""
    path = target.local_path
    if path is not None:
        folder = staging(path)
        shutil.rmtree(folder, ignore_errors=True)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    with tempfile.TemporaryDirectory(prefix="near-dedup-release-") as tmp:
        yield Path(tmp) / target.name


def publish_folder(folder: Path, target: Location) -> None:
    """Publish the complete local ``folder`` (it holds its ``checksums.sha256``) at
    ``target`` by the storage layer's rule; an existing output is refused."""
    with target.publish() as out:
        shutil.copytree(folder, out, dirs_exist_ok=True)


def location_value(where: Location) -> dg.MetadataValue:
    """A location as the UI links it: a URL as a link, a local path as a path."""
    if where.local_path is None:
        return dg.MetadataValue.url(where.url)
    return dg.MetadataValue.path(str(where.local_path))
