"""Atomic output folders, canonical JSON/JSONL writing and `sha256sum`-compatible checksums.

Reports and mixture packages are written into a temporary sibling folder and renamed into
place, so a reader sees either nothing or the complete folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from near_dedup_core.errors import NearDedupError

CHECKSUMS = "checksums.sha256"
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def json_line(obj: object) -> bytes:
    """One canonical JSONL line: sorted keys, compact, UTF-8, trailing newline."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def write_jsonl(path: Path, rows: Iterable[object]) -> int:
    n = 0
    with open(path, "wb") as fh:
        for row in rows:
            fh.write(json_line(row))
            n += 1
    return n


def write_json(path: Path, obj: object) -> None:
    """Pretty, key-sorted JSON (manifests, plans): stable bytes for stable input."""
    path.write_bytes(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2
                                  | orjson.OPT_APPEND_NEWLINE))


def read_json_object(path: Path, label: str) -> dict:
    """Parse a file holding one JSON object; problems are one line ``<label> <path>: …``."""
    try:
        raw = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise NearDedupError(f"{label} {path}: file not found") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise NearDedupError(f"{label} {path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise NearDedupError(f"{label} {path}: expected a JSON object")
    return raw


def iter_json_objects(folder: Path, rel: str, label: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a JSONL file; a line that is not a JSON object is one line
    ``<label>: <rel>:<n>: …``."""
    with open(folder / rel, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise NearDedupError(f"{label}: {rel}:{n}: not valid JSON") from None
            if not isinstance(obj, dict):
                raise NearDedupError(f"{label}: {rel}:{n}: not a JSON object")
            yield n, obj


def is_within(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def require_new_output(target: Path) -> None:
    """Outputs are never replaced: ``target`` must not exist, not even as a broken symlink."""
    if target.exists() or target.is_symlink():
        raise NearDedupError(f"output {target} already exists; choose a new directory")


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a fresh temporary sibling of ``target``; rename it to ``target`` on success.

    On any exception the temporary folder is removed and ``target`` is never created.
    """
    require_new_output(target)
    parent = target.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{target.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_checksums(folder: Path) -> None:
    """Write ``checksums.sha256`` over every other file below ``folder`` (sorted paths)."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel == CHECKSUMS:
            continue
        lines.append(f"{sha256_file(path)}  {rel}\n")
    (folder / CHECKSUMS).write_text("".join(lines), encoding="utf-8")


def verify_checksums(folder: Path, label: str) -> list[str]:
    """Check ``checksums.sha256`` against the folder: every listed file matches, none missing,
    no unlisted file. Returns the relative paths listed; raises NearDedupError on any mismatch."""
    sums = folder / CHECKSUMS
    if not sums.is_file():
        raise NearDedupError(f"{label} {folder}: {CHECKSUMS} is missing")
    try:
        text = sums.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise NearDedupError(f"{label} {folder}: {CHECKSUMS} is not UTF-8 text") from None
    listed: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel:
            raise NearDedupError(f"{label} {folder}: {CHECKSUMS}:{n}: malformed line")
        listed[rel] = digest
    for rel, digest in listed.items():
        path = folder / rel
        if not path.is_file():
            raise NearDedupError(f"{label} {folder}: {rel} is listed in {CHECKSUMS} but missing")
        if sha256_file(path) != digest:
            raise NearDedupError(f"{label} {folder}: {rel} does not match its sha256 "
                                 f"in {CHECKSUMS} (file changed)")
    for path in folder.rglob("*"):
        if path.is_file():
            rel = path.relative_to(folder).as_posix()
            if rel != CHECKSUMS and rel not in listed:
                raise NearDedupError(f"{label} {folder}: {rel} is not listed in {CHECKSUMS}")
    return sorted(listed)
