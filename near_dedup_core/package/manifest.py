"""The package manifest (docs/contract.md §2): its checks, the files it lists, and the rules
across one command's input packages. Nothing here reads a shard's data."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

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
    """A package whose manifest passed the cheap checks of `open_packages`."""

    path: Path
    package_id: str
    kind: str
    created_at: str
    manifest: dict
    manifest_sha256: str
    files: list[FileEntry]
    tokenizer: dict | None
    depends_on: list[str]
    parents: list[str]

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


def load_package(path: str | Path) -> Package:
    """Open one package: the manifest validated by its model (`model.Manifest`) and a stat of
    every listed file, no data read."""
    from near_dedup_core.package.model import ManifestProblem, parse_manifest

    path = Path(path)
    raw, manifest_sha256 = _read_manifest(path)
    try:
        manifest = parse_manifest(raw)
    except ManifestProblem as problem:
        label = str(path) if problem.of_package_id else raw["package_id"]
        raise NearDedupError(f"{where(label, MANIFEST)}: {problem}") from None
    package_id = manifest.package_id
    entries = [FileEntry(path=f.path, split=f.split, records=f.records, bytes=f.bytes,
                         sha256=f.sha256) for f in manifest.files]
    _check_files_on_disk(path, package_id, entries)
    package = Package(path=path, package_id=package_id, kind=manifest.kind,
                      created_at=manifest.created_at, manifest=raw,
                      manifest_sha256=manifest_sha256, files=entries,
                      tokenizer=None if manifest.tokenizer is None
                      else manifest.tokenizer.model_dump(),
                      depends_on=list(manifest.lineage.depends_on),
                      parents=list(manifest.lineage.parents))
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


def open_packages(paths: Iterable[str | Path]) -> list[Package]:
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
