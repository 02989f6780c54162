"""The package manifest (docs/contract.md §2): its checks, the files it lists, and the rules
across one command's input packages. Nothing here reads a shard's data."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeGuard

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


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int


def _string_list(value: object) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def check_package_ids(loc: str, field: str, ids: list[str]) -> None:
    for item in ids:
        if not ID_RE.fullmatch(item):
            raise NearDedupError(f"{loc}: {field} entry {item!r} is not a package id "
                                 f"({ID_PATTERN})")
    if len(set(ids)) != len(ids):
        raise NearDedupError(f"{loc}: {field} lists a package twice")


def _canonical_shard_path(loc: str, index: int, path: object) -> str:
    """A listed shard path must be a plain relative path below data/ ending in .jsonl[.gz]."""
    if type(path) is not str or not path:
        raise NearDedupError(f"{loc}: files[{index}].path must be a non-empty string")
    pure = PurePosixPath(path)
    if ("\\" in path or pure.is_absolute() or pure.as_posix() != path
            or any(part in ("..", ".") for part in pure.parts)
            or len(pure.parts) < 2 or pure.parts[0] != DATA_DIR):
        raise NearDedupError(f"{loc}: files[{index}].path {path!r} must be a relative path "
                             f"inside {DATA_DIR}/")
    if not path.endswith(SHARD_SUFFIXES):
        raise NearDedupError(f"{loc}: files[{index}].path {path!r} must end with .jsonl "
                             f"or .jsonl.gz")
    return path


def _file_entry(loc: str, index: int, item: object) -> FileEntry:
    if type(item) is not dict:
        raise NearDedupError(f"{loc}: files[{index}] must be an object")
    path = _canonical_shard_path(loc, index, item.get("path"))
    split = item.get("split")
    if type(split) is not str or not split:
        raise NearDedupError(f"{loc}: files[{index}].split must be a non-empty string")
    for key in ("records", "bytes"):
        value = item.get(key)
        if not _is_int(value) or value < 0:
            raise NearDedupError(f"{loc}: files[{index}].{key} must be a non-negative integer, "
                                 f"found {value!r}")
    sha = item.get("sha256")
    if type(sha) is not str or not SHA256_RE.fullmatch(sha):
        raise NearDedupError(f"{loc}: files[{index}].sha256 must be 64 lowercase hex digits")
    return FileEntry(path=path, split=split, records=item["records"], bytes=item["bytes"],
                     sha256=sha)


def _tokenizer(loc: str, kind: str, value: object) -> dict | None:
    if value is None and kind != "cpt":
        return None
    if (type(value) is not dict or type(value.get("name")) is not str or not value["name"]
            or type(value.get("revision")) is not str or not value["revision"]):
        need = "required for cpt: " if kind == "cpt" else ""
        raise NearDedupError(f"{loc}: tokenizer is {need}an object with non-empty string "
                             f"name and revision, found {value!r}")
    return {"name": value["name"], "revision": value["revision"]}


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
    """Open one package: manifest checks and a stat of every listed file, no data read."""
    path = Path(path)
    manifest, manifest_sha256 = _read_manifest(path)
    package_id = manifest.get("package_id")
    if type(package_id) is not str or not ID_RE.fullmatch(package_id):
        raise NearDedupError(f"{where(str(path), MANIFEST)}: package_id must match "
                             f"{ID_PATTERN}, found {package_id!r}")
    loc = where(package_id, MANIFEST)
    if manifest.get("format") != FORMAT:
        raise NearDedupError(f"{loc}: format must be {FORMAT!r}, found "
                             f"{manifest.get('format')!r}")
    version = manifest.get("format_version")
    if not _is_int(version) or version != FORMAT_VERSION:
        raise NearDedupError(f"{loc}: format_version must be {FORMAT_VERSION}, found {version!r}")
    kind = manifest.get("kind")
    if kind not in KINDS:
        raise NearDedupError(f"{loc}: kind must be one of {', '.join(KINDS)}, found {kind!r}")
    created_at = manifest.get("created_at")
    if type(created_at) is not str or not created_at:
        raise NearDedupError(f"{loc}: created_at must be a non-empty string")
    tokenizer = _tokenizer(loc, kind, manifest.get("tokenizer"))
    lineage = manifest.get("lineage")
    if (type(lineage) is not dict or not _string_list(lineage.get("parents"))
            or not _string_list(lineage.get("depends_on"))):
        raise NearDedupError(f"{loc}: lineage must be an object with lists of package ids "
                             f"'parents' and 'depends_on'")
    check_package_ids(loc, "lineage.parents", lineage["parents"])
    check_package_ids(loc, "lineage.depends_on", lineage["depends_on"])
    if package_id in lineage["depends_on"]:
        raise NearDedupError(f"{loc}: lineage.depends_on names the package itself")
    files = manifest.get("files")
    if type(files) is not list:
        raise NearDedupError(f"{loc}: files must be a list")
    entries = [_file_entry(loc, i, item) for i, item in enumerate(files)]
    _check_files_on_disk(path, package_id, entries)
    package = Package(path=path, package_id=package_id, kind=kind, created_at=created_at,
                      manifest=manifest, manifest_sha256=manifest_sha256, files=entries,
                      tokenizer=tokenizer, depends_on=list(lineage["depends_on"]),
                      parents=list(lineage["parents"]))
    if package.record_count == 0:
        raise NearDedupError(f"{loc}: the package is empty (files list no records)")
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
