"""The package manifest (docs/contract.md §2): its checks, the files it lists, and the rules
across one command's input packages. Nothing here reads a shard's data."""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import is_within

FORMAT = "training-snapshot"
FORMAT_VERSION = 2
KINDS = ("cpt", "sft")
MANIFEST = "manifest.json"
DATA_DIR = "data"
SHARD_SUFFIXES = (".jsonl", ".jsonl.gz")

#: Package ids, split names and mixture names: letters, digits, ".", "_" and "-".
ID_PATTERN = r"[A-Za-z0-9._-]+"
ID_RE = re.compile(ID_PATTERN)
if TYPE_CHECKING:  # imported where a package is opened: a worker that parses never needs it
    from near_dedup_core.storage import FileInfo, Location

SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class FileEntry:
    """One shard as listed in the manifest; ``path`` is relative to the package folder."""

    path: str
    split: str
    records: int
    bytes: int
    sha256: str


@dataclass(frozen=True, eq=False)
class Package:
    """A package whose manifest passed the cheap checks of `open_packages`.

    ``path`` is the local folder, or for a package on object storage its URL as given
    (``s3://bucket/snapshots/cpt-v9``); ``location`` reads it either way, and ``listing``
    holds what the storage's listing said of each file (size and version tag), so that a
    shard replaced after the package was opened is refused when it is read."""

    path: Path | str
    package_id: str
    kind: str
    created_at: str
    manifest: dict
    manifest_sha256: str
    files: list[FileEntry]
    tokenizer: dict | None
    depends_on: list[str]
    parents: list[str]
    location: Location
    listing: dict[str, FileInfo] | None = None

    @property
    def is_local(self) -> bool:
        return self.location.is_local

    def open_raw(self, rel: str) -> io.RawIOBase | io.BufferedIOBase:
        """One file of the package as stored (unbuffered locally, streamed from object
        storage), for a reader that hashes what it reads."""
        if self.location.is_local:
            return open(Path(self.path) / rel, "rb", buffering=0)
        return self.location.open(rel, None if self.listing is None else self.listing.get(rel))

    def open_file(self, rel: str) -> io.BufferedIOBase:
        """One file of the package, buffered, decompressed when it ends with ``.gz``."""
        return self.location.open_shard(rel, None if self.listing is None
                                        else self.listing.get(rel))

    def file_url(self, rel: str) -> str:
        """Where one file of the package is: a local path or a URL."""
        return str(Path(self.path) / rel) if self.location.is_local else f"{self.path}/{rel}"

    @property
    def record_count(self) -> int:
        return sum(entry.records for entry in self.files)

    @property
    def splits(self) -> list[str]:
        return sorted({entry.split for entry in self.files})


# --------------------------------------------------------------------------- checks


def check_package_ids(loc: str, field: str, ids: list[str]) -> None:
    for item in ids:
        if not ID_RE.fullmatch(item):
            raise NearDedupError(f"{loc}: {field} entry {item!r} is not a package id "
                                 f"({ID_PATTERN})")
    if len(set(ids)) != len(ids):
        raise NearDedupError(f"{loc}: {field} lists a package twice")


def _read_manifest(path: Path) -> tuple[dict, str]:
    """The parsed manifest and the sha256 of its bytes; errors name the package directory."""
    label = where(str(path))
    if not path.is_dir():
        raise NearDedupError(f"{label}: no such package directory")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise NearDedupError(f"{label}: {MANIFEST} is missing")
    try:
        raw = manifest_path.read_bytes()
    except OSError as exc:
        raise NearDedupError(f"{label}: cannot read {MANIFEST} ({exc.strerror})") from None
    try:
        manifest = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise NearDedupError(f"{where(str(path), MANIFEST)}: not valid JSON ({exc})") from None
    if type(manifest) is not dict:
        raise NearDedupError(f"{where(str(path), MANIFEST)}: must be a JSON object")
    return manifest, hashlib.sha256(raw).hexdigest()


def _read_remote_manifest(location: Location) -> tuple[dict, str, dict[str, FileInfo]]:
    """`_read_manifest` for a package on object storage, and the listing of its files."""
    label = where(location.url)
    listing = location.list_files()
    if MANIFEST not in listing:
        raise NearDedupError(f"{label}: {MANIFEST} is missing")
    raw = location.read_bytes(MANIFEST, listing[MANIFEST])
    try:
        manifest = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise NearDedupError(f"{where(location.url, MANIFEST)}: not valid JSON ({exc})") from None
    if type(manifest) is not dict:
        raise NearDedupError(f"{where(location.url, MANIFEST)}: must be a JSON object")
    return manifest, hashlib.sha256(raw).hexdigest(), listing


def load_package(path: str | Path | Location) -> Package:
    """Open one package: the manifest validated by its model (`model.Manifest`) and a stat of
    every listed file, no data read. A URL (``s3://…``) is read through `storage`: the
    manifest, and one listing of the package's objects (size and version tag of each)."""
    from near_dedup_core.package.model import ManifestProblem, parse_manifest
    from near_dedup_core.storage import parse_location

    location = parse_location(path)
    listing: dict[str, FileInfo] | None = None
    path = location.local_path or location.url
    if isinstance(path, Path):
        raw, manifest_sha256 = _read_manifest(path)
    else:
        raw, manifest_sha256, listing = _read_remote_manifest(location)
    try:
        manifest = parse_manifest(raw)
    except ManifestProblem as problem:
        label = str(path) if problem.of_package_id else raw["package_id"]
        raise NearDedupError(f"{where(label, MANIFEST)}: {problem}") from None
    package_id = manifest.package_id
    entries = [FileEntry(path=f.path, split=f.split, records=f.records, bytes=f.bytes,
                         sha256=f.sha256) for f in manifest.files]
    if isinstance(path, Path):
        _check_files_on_disk(path, package_id, entries)
    else:
        assert listing is not None
        _check_listed_files(listing, package_id, entries)
    package = Package(path=path, package_id=package_id, kind=manifest.kind,
                      created_at=manifest.created_at, manifest=raw,
                      manifest_sha256=manifest_sha256, files=entries,
                      tokenizer=None if manifest.tokenizer is None
                      else manifest.tokenizer.model_dump(),
                      depends_on=list(manifest.lineage.depends_on),
                      parents=list(manifest.lineage.parents), location=location,
                      listing=listing)
    if package.record_count == 0:
        raise NearDedupError(f"{where(package_id, MANIFEST)}: the package is empty (files list "
                             f"no records)")
    return package


def _check_files_on_disk(path: Path, package_id: str, entries: list[FileEntry]) -> None:
    """Every listed shard exists inside data/ with the listed size; nothing else is in data/."""
    data_dir = path / DATA_DIR
    if data_dir.is_symlink() or (data_dir.exists() and not is_within(data_dir, path)):
        raise NearDedupError(f"{where(package_id, DATA_DIR + '/')}: is a symlink or resolves "
                             f"outside the package; {DATA_DIR}/ must be a folder of the package")
    listed: set[str] = set()
    for entry in entries:
        if entry.path in listed:
            raise NearDedupError(f"{where(package_id, MANIFEST)}: {entry.path} is listed twice")
        listed.add(entry.path)
        file_path = path / entry.path
        loc = where(package_id, entry.path)
        if not file_path.is_file():
            raise NearDedupError(f"{loc}: listed in {MANIFEST} but missing")
        if not is_within(file_path, data_dir):
            raise NearDedupError(f"{loc}: resolves outside the package's {DATA_DIR}/ folder")
        size = file_path.stat().st_size
        if size != entry.bytes:
            raise NearDedupError(f"{loc}: size is {size} bytes, {MANIFEST} says {entry.bytes} "
                                 f"(file changed)")
    if data_dir.is_dir():
        for found in sorted(data_dir.rglob("*")):
            if found.is_file() or found.is_symlink():
                rel = found.relative_to(path).as_posix()
                if rel not in listed:
                    raise NearDedupError(f"{where(package_id, rel)}: file under {DATA_DIR}/ "
                                         f"is not listed in {MANIFEST}")


def _check_listed_files(listing: dict[str, FileInfo], package_id: str,
                        entries: list[FileEntry]) -> None:
    """`_check_files_on_disk` for a package on object storage, against its listing (object
    storage has no symlinks, and a key is always inside its prefix)."""
    listed: set[str] = set()
    for entry in entries:
        if entry.path in listed:
            raise NearDedupError(f"{where(package_id, MANIFEST)}: {entry.path} is listed twice")
        listed.add(entry.path)
        loc = where(package_id, entry.path)
        found = listing.get(entry.path)
        if found is None:
            raise NearDedupError(f"{loc}: listed in {MANIFEST} but missing")
        if found.size != entry.bytes:
            raise NearDedupError(f"{loc}: size is {found.size} bytes, {MANIFEST} says "
                                 f"{entry.bytes} (file changed)")
    for rel in listing:
        if rel.startswith(DATA_DIR + "/") and rel not in listed:
            raise NearDedupError(f"{where(package_id, rel)}: file under {DATA_DIR}/ is not "
                                 f"listed in {MANIFEST}")


def dependency_order(packages: Sequence[Package]) -> list[Package]:
    """Packages with each one's depends_on packages first; otherwise in the order given."""
    by_id = {pkg.package_id: pkg for pkg in packages}
    order: list[Package] = []
    done: set[str] = set()
    active: list[str] = []

    def visit(pkg: Package) -> None:
        if pkg.package_id in done:
            return
        if pkg.package_id in active:
            cycle = " -> ".join(active[active.index(pkg.package_id):] + [pkg.package_id])
            raise NearDedupError(f"{where(pkg.package_id, MANIFEST)}: lineage.depends_on forms "
                                 f"a cycle ({cycle})")
        active.append(pkg.package_id)
        for dep in pkg.depends_on:
            if dep not in by_id:
                raise NearDedupError(f"{where(pkg.package_id, MANIFEST)}: lineage.depends_on "
                                     f"names package {dep}, which is not among the inputs; "
                                     f"give it too")
            visit(by_id[dep])
        active.pop()
        done.add(pkg.package_id)
        order.append(pkg)

    for pkg in packages:
        visit(pkg)
    return order


def open_packages(paths: Iterable[str | Path | Location]) -> list[Package]:
    """Open one command's input packages (cheap checks, no data read), in the order given."""
    packages = [load_package(p) for p in paths]
    if not packages:
        raise NearDedupError("no input packages given")
    by_id: dict[str, Package] = {}
    first = packages[0]
    for pkg in packages:
        if pkg.kind != first.kind:
            raise NearDedupError(f"{where(pkg.package_id)}: kind {pkg.kind} differs from kind "
                                 f"{first.kind} of package {first.package_id}; one command's "
                                 f"inputs must be all cpt or all sft")
        if pkg.package_id in by_id:
            raise NearDedupError(f"{where(pkg.package_id)}: package id given twice "
                                 f"({by_id[pkg.package_id].path} and {pkg.path})")
        by_id[pkg.package_id] = pkg
    dependency_order(packages)
    return packages
