"""Snapshot packages (format v2, SPEC §2): open and check manifests, stream records, create.

A package is a directory holding ``manifest.json`` and JSONL shards (plain or gzip) under
``data/``. Checking happens in two stages so that a command can refuse bad input before it
writes anything, while reading every shard only once:

- `open_packages` reads manifests and file sizes only: format, lineage, listed and unlisted
  files, and the rules across one command's inputs (one kind, unique package ids, every
  ``depends_on`` among the inputs, no dependency cycle).
- `stream_records` is the single pass over the data. It yields every record while checking each
  line, and checks each shard's byte count, sha256 and record count when the shard ends.
  A consumer must treat an exception as "the whole input is invalid" and publish nothing.

Every error is one line that starts with the location (`errors.where`): package, file, line.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import gzip
import hashlib
import io
import json
import mmap
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import NamedTuple, TypeGuard

import orjson

from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import atomic_dir, is_within, require_new_output, utc_now

FORMAT = "training-snapshot"
FORMAT_VERSION = 2
KINDS = ("cpt", "sft")
MANIFEST = "manifest.json"
DATA_DIR = "data"
SHARD_SUFFIXES = (".jsonl", ".jsonl.gz")

#: Package ids, split names and mixture names: letters, digits, ".", "_" and "-".
ID_PATTERN = r"[A-Za-z0-9._-]+"
ID_RE = re.compile(ID_PATTERN)
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_GZIP_MAGIC = b"\x1f\x8b"
_READ_BUFFER = 1 << 20
# Fields that carry content; a `ref` record takes its content from the referenced sample.
_CONTENT_FIELDS = {"cpt": ("text",), "sft": ("task", "system", "material", "messages")}


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


@dataclass(slots=True)
class Record:
    """One sample as read from a shard.

    ``file`` is the manifest-relative shard path and ``line`` its 1-based line number;
    ``position`` is the 0-based ordinal of the record within its package in stream order.
    ``ref`` is ``(package_id, sample_id)`` for an incremental reference, else None.
    """

    package_id: str
    split: str
    file: str
    line: int
    position: int
    sample_id: str
    data: dict
    ref: tuple[str, str] | None


# --------------------------------------------------------------------------- manifests


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int


def _string_list(value: object) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def _check_package_ids(loc: str, field: str, ids: list[str]) -> None:
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
    if type(sha) is not str or not _SHA256_RE.fullmatch(sha):
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
    _check_package_ids(loc, "lineage.parents", lineage["parents"])
    _check_package_ids(loc, "lineage.depends_on", lineage["depends_on"])
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


# --------------------------------------------------------------------------- records


class _LineProblem(Exception):
    """A record line breaks a rule; the caller prefixes the package, file and line."""


def _field_problem(data: dict, field: str, expected: str) -> _LineProblem:
    if field not in data:
        return _LineProblem(f"missing field '{field}'")
    return _LineProblem(f"field '{field}' must be {expected}, found {_type_name(data[field])}")


def _json_problem(raw: bytes | memoryview, exc: Exception) -> _LineProblem:
    raw = bytes(raw)
    if not raw.strip():
        return _LineProblem("empty line")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return _LineProblem(f"line is not valid UTF-8 (byte {err.start + 1})")
    return _LineProblem(f"line is not valid JSON ({exc})")


def _check_common(data: dict) -> None:
    if "domain" in data and type(data["domain"]) is not str:
        raise _field_problem(data, "domain", "a string")
    if "source" in data and type(data["source"]) is not dict:
        raise _field_problem(data, "source", "an object")


def _check_cpt(data: dict) -> None:
    if type(data.get("text")) is not str:
        raise _field_problem(data, "text", "a string")
    _check_common(data)


def _check_sft(data: dict) -> None:
    if type(data.get("task")) is not str:
        raise _field_problem(data, "task", "a string")
    messages = data.get("messages")
    if type(messages) is not list or not messages:
        raise _field_problem(data, "messages", "a non-empty list")
    for i, message in enumerate(messages):
        if (type(message) is not dict or type(message.get("role")) is not str
                or type(message.get("content")) is not str):
            raise _LineProblem(f"messages[{i}] must be an object with string 'role' and "
                               f"'content'")
    if "system" in data and type(data["system"]) is not str:
        raise _field_problem(data, "system", "a string")
    if "material" in data:
        material = data["material"]
        if type(material) is not dict:
            raise _field_problem(data, "material", "an object")
        if "text" in material and type(material["text"]) is not str:
            raise _LineProblem(f"field 'material.text' must be a string, found "
                               f"{_type_name(material['text'])}")
        if "images" in material:
            images = material["images"]
            if type(images) is not list:
                raise _LineProblem("field 'material.images' must be a list")
            for i, image in enumerate(images):
                if (type(image) is not dict or type(image.get("sha256")) is not str
                        or not _SHA256_RE.fullmatch(image["sha256"])):
                    raise _LineProblem(f"material.images[{i}] must be an object with sha256 "
                                       f"of 64 lowercase hex digits")
    _check_common(data)


_CONTENT_CHECKS = {"cpt": _check_cpt, "sft": _check_sft}


def _check_ref(data: dict, kind: str) -> tuple[str, str]:
    ref = data["ref"]
    if (type(ref) is not dict or type(ref.get("package_id")) is not str
            or type(ref.get("id")) is not str or not ref["id"]):
        raise _LineProblem("field 'ref' must be an object with string 'package_id' and "
                           "non-empty string 'id'")
    for field in _CONTENT_FIELDS[kind]:
        if field in data:
            raise _LineProblem(f"a ref record must not carry content field '{field}'")
    _check_common(data)
    return ref["package_id"], ref["id"]


def _parse_line(raw: bytes | memoryview, kind: str) -> tuple[dict, str, tuple[str, str] | None]:
    """Parse and check one JSONL line as a record of ``kind``: (data, sample id, ref).

    Raises `_LineProblem`, whose message has no location yet.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _json_problem(raw, exc) from None
    if type(data) is not dict:
        raise _LineProblem("line is not a JSON object")
    sample_id = data.get("id")
    if type(sample_id) is not str or not sample_id:
        raise _field_problem(data, "id", "a non-empty string")
    if "ref" in data:
        return data, sample_id, _check_ref(data, kind)
    _CONTENT_CHECKS[kind](data)
    return data, sample_id, None


def _check_record(raw: bytes, kind: str, ids: set[str], depends_on: set[str],
                  targets: dict[str, set[str]] | None) -> tuple[dict, str, tuple[str, str] | None]:
    """`_parse_line` plus the package-level rules: unique id, ref into depends_on (and, with
    ``targets``, to an existing sample). Adds the id to ``ids``."""
    data, sample_id, ref = _parse_line(raw, kind)
    if sample_id in ids:
        raise _LineProblem(f"duplicate id {sample_id!r} in the package")
    ids.add(sample_id)
    if ref is not None:
        _resolve_ref(ref, depends_on, targets)
    return data, sample_id, ref


class _HashingReader(io.RawIOBase):
    """Raw stream over an open file that hashes and counts every byte as stored on disk."""

    def __init__(self, fh) -> None:
        super().__init__()
        self._fh = fh
        self.sha256 = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._fh.readinto(buffer)
        if n:
            self.sha256.update(memoryview(buffer)[:n])
            self.size += n
        return n


# --------------------------------------------------------------------------- line blocks

#: At most this many bytes of whole lines per block (a longer line is a block of its own).
BLOCK_BYTES = 4 << 20
#: At most this many lines per block.
BLOCK_LINES = 1024


@dataclass(frozen=True, slots=True)
class LineBlock:
    """Whole lines of one shard, read and hashed by the caller, parsed by whoever gets it
    (`parse_block`, possibly in a worker process): ``first_line`` is the 1-based line number
    of its first line in the shard, ``first_position`` that record's position in the package.
    The lines are ``data``, or, with ``shared`` = (slot, start, end), bytes start:end of the
    `SharedBlocks` memory that the reader read them into (``data`` is then empty)."""

    package_id: str
    kind: str
    file: str
    split: str
    first_line: int
    first_position: int
    depends_on: tuple[str, ...]
    data: bytes
    line_count: int  # lines in the block (counted once, where the block is cut)
    shared: tuple[int, int, int] | None = None

    def lines(self) -> list[bytes | memoryview]:
        if self.shared is not None:
            return _shared_lines(self.shared[1], self.shared[2])
        lines: list[bytes | memoryview] = list(self.data.split(b"\n"))
        if lines[-1] == b"":  # the newline that ends the last line
            lines.pop()
        return lines


class SharedBlocks:
    """Memory shared with the worker processes of one pass (an anonymous ``memfd``, gone
    with the last process that maps it), in ``slots`` slots of ``slot_bytes``: the reader
    reads and hashes a shard's bytes straight into a free slot, and the blocks cut from it
    name their lines there instead of carrying a copy; a worker parses them from its own
    mapping (`attach_shared`). The lines of a slot are those the reader hashed: a slot is
    read into again only after every block cut from it is released (`release`) by the
    consumer, which does so once the block's result is in."""

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.size = slots * slot_bytes
        self.fd = os.memfd_create("near-dedup-blocks", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.size)
            self.map = mmap.mmap(self.fd, self.size)
        except BaseException:
            os.close(self.fd)
            raise
        self.view = memoryview(self.map)
        self._holders = [0] * slots
        self._free = collections.deque(range(slots))

    def worker_args(self) -> tuple[_SharedFd, int]:
        """What `attach_shared` takes in a worker (picklable into a new pool process)."""
        return _SharedFd(self.fd), self.size

    def take(self) -> int:
        """A free slot, to read into."""
        if not self._free:
            raise RuntimeError("SharedBlocks: no free slot; more blocks in flight than slots")
        return self._free.popleft()

    def hold(self, slot: int) -> None:
        """One more block names lines of ``slot``."""
        self._holders[slot] += 1

    def release(self, slot: int) -> None:
        """One block of ``slot`` is done with; the slot is free once none is left."""
        self._holders[slot] -= 1
        if self._holders[slot] == 0:
            self._free.append(slot)

    def close(self) -> None:
        """Unmap and close; a slice still alive (in the traceback of an interrupted read)
        keeps the mapping until it is collected."""
        with contextlib.suppress(BufferError):
            self.view.release()
            self.map.close()
        os.close(self.fd)


class _SharedFd:
    """A file descriptor that unpickles, in a process started by multiprocessing, as that
    process's own duplicate of it (an int)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return _detach_fd, (reduction.DupFd(self.fd),)


def _detach_fd(dup) -> int:
    return dup.detach()


_attached: mmap.mmap | None = None  # this worker's mapping of the pass's SharedBlocks


def attach_shared(fd: int, size: int) -> None:
    """Map the `SharedBlocks` of ``fd`` (read-only) in this worker process, for good."""
    global _attached
    try:
        _attached = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def _shared_lines(start: int, end: int) -> list[bytes | memoryview]:
    """The lines in bytes start:end of the attached shared memory, without their newlines."""
    buf = _attached
    assert buf is not None, "a block in shared memory is parsed where it is attached"
    view = memoryview(buf)
    find = buf.find
    lines: list[bytes | memoryview] = []
    while start < end:
        stop = find(b"\n", start, end)
        if stop < 0:  # a last line without its newline
            stop = end
        lines.append(view[start:stop])
        start = stop + 1
    return lines


@dataclass(frozen=True, slots=True)
class ShardEnd:
    """The end of a shard, after its last block: ``problem`` says why it is invalid (bytes,
    sha256 or record count differ from the manifest, or it could not be read), else None."""

    package_id: str
    file: str
    problem: NearDedupError | None


class ParsedBlock(NamedTuple):
    """The records of a block, in order, as (sample id, data, ref), up to its first bad line;
    ``problem`` is that line's located error (None when every line is a record)."""

    records: list[tuple[str, dict, tuple[str, str] | None]]
    problem: NearDedupError | None


def parse_block(block: LineBlock) -> ParsedBlock:
    """Check each line of ``block`` as a record of its kind (`_parse_line`, and a ref must name
    a package in ``depends_on``). The rules across lines (unique ids, ref targets) are the
    reader's: see `SampleIds`."""
    depends_on = set(block.depends_on)
    records: list[tuple[str, dict, tuple[str, str] | None]] = []
    for k, raw in enumerate(block.lines()):
        try:
            data, sample_id, ref = _parse_line(raw, block.kind)
            if ref is not None:
                _resolve_ref(ref, depends_on, None)
        except _LineProblem as problem:
            return ParsedBlock(records, NearDedupError(
                f"{where(block.package_id, block.file, block.first_line + k)}: {problem}"))
        records.append((sample_id, data, ref))
    return ParsedBlock(records, None)


class SampleIds:
    """The rules across the records of one pass, applied in record order: a sample id is
    unique within its package, and a ref names a sample of a package streamed before it
    (`dependency_order` puts depends_on first). Keeps the ids of referenced packages only."""

    def __init__(self, packages: Sequence[Package]) -> None:
        self._referenced = {dep for pkg in packages for dep in pkg.depends_on}
        self._known: dict[str, set[str]] = {}
        self._package: str | None = None
        self._ids: set[str] = set()

    def check(self, package_id: str, file: str, line: int, sample_id: str,
              ref: tuple[str, str] | None) -> None:
        if package_id != self._package:
            self._package, self._ids = package_id, set()
            if package_id in self._referenced:
                self._known[package_id] = self._ids
        if sample_id in self._ids:
            raise NearDedupError(f"{where(package_id, file, line)}: duplicate id {sample_id!r} "
                                 f"in the package")
        self._ids.add(sample_id)
        if ref is not None and ref[1] not in self._known.get(ref[0], ()):
            raise NearDedupError(f"{where(package_id, file, line)}: ref to sample {ref[1]!r} "
                                 f"of package {ref[0]}, which has no such sample")

    def check_block(self, package_id: str, file: str, first_line: int, sample_ids: list[str],
                    refs: dict[int, tuple[str, str]]) -> None:
        """`check` for consecutive records from line ``first_line`` on (``refs`` by their
        index in ``sample_ids``): at once when the block has no ref and no repeated id,
        else record by record, which locates the first problem."""
        if not sample_ids:
            return
        if not refs and package_id == self._package:
            block = set(sample_ids)
            if len(block) == len(sample_ids) and self._ids.isdisjoint(block):
                self._ids |= block
                return
        for k, sample_id in enumerate(sample_ids):
            self.check(package_id, file, first_line + k, sample_id, refs.get(k))


def read_blocks(packages: Sequence[Package], block_lines: int = BLOCK_LINES,
                block_bytes: int = BLOCK_BYTES, shared: SharedBlocks | None = None
                ) -> Iterator[LineBlock | ShardEnd]:
    """The data of ``packages`` as line blocks, packages in dependency order, shards in
    manifest order, each shard followed by its `ShardEnd`. Only this reader touches the
    files: it hashes and counts every stored byte. A shard that cannot be read ends the
    stream with its ShardEnd (after the lines read before the failure).

    With ``shared``, plain shards are read into its slots and their blocks name their lines
    there (gzip shards, and a line too long for a slot, still come as bytes); the consumer
    releases each such block's slot once done with it, and keeps fewer blocks than
    ``shared.slots - 1`` unreleased whenever it asks for the next event."""
    for pkg in dependency_order(packages):
        position = 0
        for entry in pkg.files:
            shard = _shard_blocks(pkg, entry, position, block_lines, block_bytes, shared)
            for event in shard:
                if isinstance(event, ShardEnd):
                    yield event
                    if event.problem is not None:
                        return
                    break
                position += event.line_count
                yield event


def _fill(reader: _HashingReader, view: memoryview) -> int:
    """Read into all of ``view`` (less at the end of the file); the bytes read."""
    got = 0
    while got < len(view):
        n = reader.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def _shard_blocks(  # noqa: C901 (one pass over a shard: plain, gzip and shared-memory reads)
        pkg: Package, entry: FileEntry, position: int, block_lines: int,
                  block_bytes: int, shared: SharedBlocks | None = None
                  ) -> Iterator[LineBlock | ShardEnd]:
    depends_on = tuple(pkg.depends_on)
    line = 0  # lines handed out so far
    pending: list[bytes] = []

    def block(data: bytes, lines: int) -> LineBlock:
        return LineBlock(pkg.package_id, pkg.kind, entry.path, entry.split, line + 1,
                         position + line, depends_on, data, lines)

    try:
        with open(pkg.path / entry.path, "rb", buffering=0) as raw_file:
            counter = _HashingReader(raw_file)
            buffered = io.BufferedReader(counter, _READ_BUFFER)
            if entry.path.endswith(".gz"):  # line by line, so a failure has its exact line
                size = 0
                with gzip.GzipFile(fileobj=buffered, mode="rb") as text:
                    for raw in text:
                        pending.append(raw)
                        size += len(raw)
                        if size >= block_bytes or len(pending) >= block_lines:
                            out = block(b"".join(pending), len(pending))
                            yield out
                            line += len(pending)
                            pending, size = [], 0
            else:
                rest = b""
                while True:
                    # data[lo:hi] is the carried-over partial line, then the chunk just read
                    slot = -1
                    data: bytes | mmap.mmap
                    if shared is not None and len(rest) + block_bytes <= shared.slot_bytes:
                        slot = shared.take()
                        shared.hold(slot)  # this reader's hold, until it is done with the slot
                        lo = slot * shared.slot_bytes
                        try:
                            shared.view[lo:lo + len(rest)] = rest
                            n = _fill(counter, shared.view[lo + len(rest):
                                                           lo + len(rest) + block_bytes])
                        except BaseException:
                            shared.release(slot)
                            raise
                        data, hi = shared.map, lo + len(rest) + n
                    else:
                        if shared is not None:  # a long line: this reader reads unbuffered
                            buf = bytearray(block_bytes)
                            n = _fill(counter, memoryview(buf))
                            chunk = bytes(buf[:n])
                        else:
                            chunk = buffered.read(block_bytes)
                            n = len(chunk)
                        data = rest + chunk
                        lo, hi = 0, len(data)
                    if not n:
                        if slot >= 0:
                            shared.release(slot)  # type: ignore[union-attr]
                        break
                    found = data.rfind(b"\n", lo, hi)
                    end = lo if found < 0 else found + 1
                    start = lo
                    while start < end:  # pieces of at most block_lines lines
                        cut = start
                        lines = 0
                        while lines < block_lines:
                            cut = data.find(b"\n", cut, end) + 1
                            lines += 1
                            if cut == end:
                                break
                        if slot >= 0:
                            shared.hold(slot)  # type: ignore[union-attr]
                            out = LineBlock(pkg.package_id, pkg.kind, entry.path, entry.split,
                                            line + 1, position + line, depends_on, b"", lines,
                                            (slot, start, cut))
                        else:
                            out = block(data[start:cut], lines)
                        yield out
                        line += lines
                        start = cut
                    rest = data[end:hi]
                    if slot >= 0:
                        shared.release(slot)  # type: ignore[union-attr]
                if rest:
                    pending.append(rest)
            if pending:
                yield block(b"".join(pending), len(pending))
                line += len(pending)
                pending = []
            while buffered.read(_READ_BUFFER):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        if pending:
            yield block(b"".join(pending), len(pending))
            line += len(pending)
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        loc = where(pkg.package_id, entry.path, line + 1 if line else None)
        yield ShardEnd(pkg.package_id, entry.path,
                       NearDedupError(f"{loc}: cannot read ({detail})"))
        return
    yield ShardEnd(pkg.package_id, entry.path, _shard_end_problem(pkg.package_id, entry,
                                                                  counter, line))


def _stream_package(pkg: Package, ids: set[str],
                    targets: dict[str, set[str]] | None) -> Iterator[Record]:
    """Yield ``pkg``'s records, checking lines, refs and each shard against the manifest.

    ``targets`` maps each depends_on package id to its sample ids; None checks only that a
    ref names a package in depends_on (at creation, when those packages are not at hand).
    """
    position = 0
    for entry in pkg.files:
        for event in _shard_blocks(pkg, entry, position, BLOCK_LINES, BLOCK_BYTES):
            if isinstance(event, ShardEnd):
                if event.problem is not None:
                    raise event.problem
                continue
            parsed = parse_block(event)
            for k, (sample_id, data, ref) in enumerate(parsed.records):
                line = event.first_line + k
                if sample_id in ids:
                    raise NearDedupError(f"{where(pkg.package_id, entry.path, line)}: "
                                         f"duplicate id {sample_id!r} in the package")
                ids.add(sample_id)
                if ref is not None and targets is not None and ref[1] not in targets[ref[0]]:
                    raise NearDedupError(f"{where(pkg.package_id, entry.path, line)}: ref to "
                                         f"sample {ref[1]!r} of package {ref[0]}, which has no "
                                         f"such sample")
                yield Record(pkg.package_id, entry.split, entry.path, line,
                             event.first_position + k, sample_id, data, ref)
            if parsed.problem is not None:
                raise parsed.problem
            position += len(parsed.records)


def _resolve_ref(ref: tuple[str, str], depends_on: set[str],
                 targets: dict[str, set[str]] | None) -> None:
    target_package, target_id = ref
    if target_package not in depends_on:
        raise _LineProblem(f"ref names package {target_package!r}, which is not in this "
                           f"package's lineage.depends_on")
    if targets is not None and target_id not in targets[target_package]:
        raise _LineProblem(f"ref to sample {target_id!r} of package {target_package}, "
                           f"which has no such sample")


def _shard_end_problem(package_id: str, entry: FileEntry, counter: _HashingReader,
                       records: int) -> NearDedupError | None:
    loc = where(package_id, entry.path)
    if counter.size != entry.bytes:
        return NearDedupError(f"{loc}: read {counter.size} bytes, {MANIFEST} says {entry.bytes} "
                              f"(file changed)")
    if counter.sha256.hexdigest() != entry.sha256:
        return NearDedupError(f"{loc}: sha256 does not match {MANIFEST} (file changed)")
    if records != entry.records:
        return NearDedupError(f"{loc}: has {records} records, {MANIFEST} says {entry.records}")
    return None


def stream_records(packages: Sequence[Package]) -> Iterator[Record]:
    """One validating pass over every record of ``packages`` (as returned by open_packages).

    Packages come in dependency order (depends_on first, otherwise input order), shards in
    manifest order. A ref is checked against the sample ids of the already streamed target.
    """
    order = dependency_order(packages)
    referenced = {dep for pkg in order for dep in pkg.depends_on}
    known: dict[str, set[str]] = {}
    for pkg in order:
        ids: set[str] = set()
        yield from _stream_package(pkg, ids, {dep: known[dep] for dep in pkg.depends_on})
        if pkg.package_id in referenced:
            known[pkg.package_id] = ids


def head_records(pkg: Package, entry: FileEntry, limit: int) -> Iterator[dict]:
    """The data of the first ``limit`` records of one shard that carry their own content
    (refs are skipped), for sampling a pool cheaply. Nothing is checked beyond the line
    itself: reading stops quietly at the first line that is no record of the package's kind
    (or at a file that cannot be read), and the command's full pass over the pool reports
    it with its place."""
    taken = 0
    path = pkg.path / entry.path
    try:
        with (gzip.open(path, "rb") if entry.path.endswith(".gz") else open(path, "rb")) as fh:
            for raw in fh:
                if taken == limit:
                    return
                try:
                    data, _sample_id, ref = _parse_line(raw, pkg.kind)
                except _LineProblem:
                    return
                if ref is None:
                    taken += 1
                    yield data
    except (OSError, EOFError, zlib.error):  # unreadable, or a damaged gzip stream
        return


def validate_packages(paths: Iterable[str | Path]) -> list[Package]:
    """Fully validate packages given together as one command's inputs (`snapshot validate`)."""
    packages = open_packages(paths)
    collections.deque(stream_records(packages), maxlen=0)
    return packages


# --------------------------------------------------------------------------- creation


def parse_split_args(items: Iterable[str]) -> list[tuple[str, Path]]:
    """``["train=a.jsonl", "validation=v.jsonl"]`` -> ``[("train", Path("a.jsonl")), ...]``."""
    result = []
    for item in items:
        split, sep, file = item.partition("=")
        if not sep or not file or not ID_RE.fullmatch(split):
            raise NearDedupError(f"usage: --split {item!r} must be SPLIT=FILE with a split name "
                                 f"of {ID_PATTERN}, e.g. train=new.jsonl")
        result.append((split, Path(file)))
    return result


def _parse_tokenizer(package_id: str, kind: str, tokenizer: str | None) -> dict | None:
    if kind != "cpt":
        if tokenizer is not None:
            raise NearDedupError(f"{where(package_id)}: --tokenizer is only for cpt packages")
        return None
    if tokenizer is None:
        raise NearDedupError(f"{where(package_id)}: a cpt package needs --tokenizer "
                             f"NAME@REVISION")
    name, sep, revision = tokenizer.rpartition("@")
    if not sep or not name or not revision:
        raise NearDedupError(f"{where(package_id)}: --tokenizer {tokenizer!r} must be "
                             f"NAME@REVISION, e.g. qwen2-tok@r3")
    return {"name": name, "revision": revision}


def _created_at(package_id: str, created_at: str | None) -> str:
    if created_at is None:
        return utc_now()
    try:
        dt.datetime.fromisoformat(created_at)
    except ValueError:
        raise NearDedupError(f"{where(package_id)}: --created-at {created_at!r} is not an ISO "
                             f"timestamp (e.g. 2026-11-28T00:00:00Z)") from None
    return created_at


def _copy_shard(kind: str, package_id: str, depends_on: set[str], source: Path, dest: Path,
                ids: set[str]) -> tuple[int, int, str]:
    """Copy ``source`` byte for byte to ``dest``, checking every line as a record of ``kind``.

    Returns (records, bytes, sha256). Errors name the source file and line.
    """
    sha = hashlib.sha256()
    size = 0
    line = 0
    try:
        with open(source, "rb") as src, open(dest, "wb") as out:
            if src.read(2) == _GZIP_MAGIC:
                raise NearDedupError(f"{where(package_id, str(source))}: is gzip-compressed; "
                                     f"snapshot create takes plain JSONL")
            src.seek(0)
            for raw in src:
                line += 1
                try:
                    _check_record(raw, kind, ids, depends_on, None)
                except _LineProblem as problem:
                    raise NearDedupError(f"{where(package_id, str(source), line)}: "
                                         f"{problem}") from None
                out.write(raw)
                sha.update(raw)
                size += len(raw)
    except OSError as exc:
        raise NearDedupError(f"{where(package_id, str(source))}: cannot read or copy "
                             f"({exc.strerror or exc})") from None
    if line == 0:
        raise NearDedupError(f"{where(package_id, str(source))}: has no records")
    return line, size, sha.hexdigest()


def create_package(kind: str, package_id: str, tokenizer: str | None,
                   splits: Sequence[tuple[str, Path]], depends_on: Sequence[str],
                   parents: Sequence[str], created_at: str | None, output: Path) -> Package:
    """Build a package at ``output`` from plain JSONL files, atomically, and validate it.

    Each (split, file) becomes ``data/<split>/part-NNNNN.jsonl`` (numbered per split in the
    order given), copied byte for byte after every line was checked. Refs can only be checked
    for shape and for naming a package in ``depends_on``: those packages are not given here.
    """
    if not isinstance(package_id, str) or not ID_RE.fullmatch(package_id):
        raise NearDedupError(f"package id {package_id!r} must match {ID_PATTERN}")
    if kind not in KINDS:
        raise NearDedupError(f"{where(package_id)}: kind must be one of {', '.join(KINDS)}")
    tokenizer_obj = _parse_tokenizer(package_id, kind, tokenizer)
    depends_on, parents = list(depends_on), list(parents)
    loc = where(package_id)
    _check_package_ids(loc, "depends_on", depends_on)
    _check_package_ids(loc, "parents", parents)
    if package_id in depends_on:
        raise NearDedupError(f"{loc}: a package cannot depend on itself")
    stamp = _created_at(package_id, created_at)
    if not splits:
        raise NearDedupError(f"{loc}: give at least one --split SPLIT=FILE")
    for split, source in splits:
        if not ID_RE.fullmatch(split):
            raise NearDedupError(f"{loc}: split name {split!r} must match {ID_PATTERN}")
        if not Path(source).is_file():
            raise NearDedupError(f"{where(package_id, str(source))}: no such file")
    output = Path(output)
    require_new_output(output)

    with atomic_dir(output) as tmp:
        files = []
        ids: set[str] = set()
        shard_numbers: dict[str, int] = collections.Counter()
        for split, source in splits:
            rel = f"{DATA_DIR}/{split}/part-{shard_numbers[split]:05d}.jsonl"
            shard_numbers[split] += 1
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            records, size, digest = _copy_shard(kind, package_id, set(depends_on), Path(source),
                                                dest, ids)
            files.append({"path": rel, "split": split, "records": records, "bytes": size,
                          "sha256": digest})
        manifest: dict = {"format": FORMAT, "format_version": FORMAT_VERSION,
                          "package_id": package_id, "kind": kind, "created_at": stamp}
        if tokenizer_obj is not None:
            manifest["tokenizer"] = tokenizer_obj
        manifest["lineage"] = {"parents": parents, "depends_on": depends_on}
        manifest["files"] = files
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n",
                                    encoding="utf-8")
        written = load_package(tmp)
        collections.deque(_stream_package(written, set(), None), maxlen=0)
    return load_package(output)
