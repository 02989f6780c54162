"""Atomic output folders, canonical JSON/JSONL writing and `sha256sum`-compatible checksums.

Reports and mixture packages are written into a temporary sibling folder and renamed into
place, so a reader sees either nothing or the complete folder.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import glob
import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import orjson

from near_dedup_core.errors import NearDedupError

if TYPE_CHECKING:
    from pydantic import BaseModel

CHECKSUMS = "checksums.sha256"
M = TypeVar("M", bound="BaseModel")
_CHUNK = 1 << 20


def utc_now() -> str:
    """Now, in UTC, as the timestamps of manifests and index batches write it
    (``2026-11-25T00:00:00Z``)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def write_lines(path: Path, lines: Iterable[bytes], batch: int = 4096) -> tuple[int, str]:
    """Write byte lines (each with its newline) to ``path`` in batches of ``batch`` lines;
    returns (lines, sha256 hex of the file), so that `write_checksums` need not read the file
    again."""
    n = 0
    h = hashlib.sha256()
    pending: list[bytes] = []
    with open(path, "wb") as fh:
        for line in lines:
            pending.append(line)
            if len(pending) >= batch:
                data = b"".join(pending)
                fh.write(data)
                h.update(data)
                n += len(pending)
                pending.clear()
        data = b"".join(pending)
        fh.write(data)
        h.update(data)
        n += len(pending)
    return n, h.hexdigest()


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


def validate_model(model: type[M], raw: object, label: str) -> M:
    """``model.model_validate(raw)`` with the first problem as one line naming ``label``."""
    from pydantic import ValidationError  # the model's module has imported pydantic

    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        raise NearDedupError(f"{label}: {loc + ': ' if loc else ''}{msg}") from None


def read_model(path: Path, model: type[M], label: str) -> M:
    """Read a JSON file of a frozen folder into ``model`` (strict types, unknown keys refused
    where the model says so). Every problem is one line ``<label>: <file name>…``: missing,
    not JSON, not an object, or the first field that does not fit."""
    try:
        raw = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise NearDedupError(f"{label}: {path.name} is missing") from None
    except OSError as exc:
        raise NearDedupError(f"{label}: {path.name} cannot be read ({exc.strerror})") from None
    except orjson.JSONDecodeError as exc:
        raise NearDedupError(f"{label}: {path.name} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise NearDedupError(f"{label}: {path.name} is not a JSON object")
    return validate_model(model, raw, f"{label}: {path.name}")


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


#: The ``format`` of each frozen folder's ``manifest.json`` (snapshot package, mixture package,
#: near-dedup report, contamination report), as what an output inside one is refused as: a
#: file added below it would make it fail its own validation.
FROZEN_FORMATS = {"training-snapshot": "package", "mixture-package": "mixture package",
                  "near-dedup-report": "report", "near-dedup-contamination":
                  "contamination report"}


def _frozen_folder_around(target: Path) -> tuple[Path, str] | None:
    """The nearest folder at or above ``target`` whose ``manifest.json`` names a frozen
    format, with what it is; None if there is none (an unreadable manifest names nothing)."""
    for folder in (target.resolve(), *target.resolve().parents):
        try:
            manifest = orjson.loads((folder / "manifest.json").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(manifest, dict) and manifest.get("format") in FROZEN_FORMATS:
            return folder, FROZEN_FORMATS[manifest["format"]]
    return None


def _require_absent(target: Path) -> None:
    if target.exists() or target.is_symlink():
        raise NearDedupError(f"output {target} already exists; choose a new directory")


def _require_outside_frozen_folders(target: Path) -> None:
    found = _frozen_folder_around(target)
    if found is not None:
        folder, what = found
        raise NearDedupError(f"output {target} is inside {what} {folder}; a {what} is "
                             f"immutable, choose a directory outside it")


def require_new_output(target: Path) -> None:
    """Outputs are never replaced: ``target`` must not exist, not even as a broken symlink,
    nor lie inside a package, mixture or report (any folder `FROZEN_FORMATS` names)."""
    _require_absent(target)
    _require_outside_frozen_folders(target)


def require_new_output_outside(target: Path, packages: Sequence[str | Path]) -> None:
    """`require_new_output`, naming an input package that holds ``target`` as such."""
    _require_absent(target)
    for package in packages:
        if is_within(target, Path(package)):
            raise NearDedupError(f"output {target} is inside input package {package}; "
                                 f"packages are immutable")
    _require_outside_frozen_folders(target)


_NO_SPACE = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _temporaries(target: Path) -> Iterator[tuple[Path, int]]:
    """The ``.<name>.tmp-<pid>`` siblings of ``target`` of other processes, with their pid."""
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.tmp-*"):
        pid = tmp.name.rpartition(".tmp-")[2]
        if pid.isdigit() and int(pid) != os.getpid():
            yield tmp, int(pid)


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove ``.<name>.tmp-<pid>`` siblings of ``target`` left by processes that no longer
    run (killed while writing); a temporary of a live process is left alone (if the pid has
    been reused, the folder stays until that process is gone too). Returns the removed paths."""
    removed = []
    for tmp, pid in _temporaries(target):
        if _pid_alive(pid):
            continue
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a fresh temporary sibling ``.<name>.tmp-<pid>`` of ``target``; rename it to
    ``target`` on success.

    Stale temporaries of dead processes are removed first (a live process's is left alone:
    its pid may have been reused). On any exception the temporary folder is removed and
    ``target`` is never created; a full disk or file-size limit, or another run writing the
    same output that published it first, is one line naming the output.
    """
    require_new_output(target)
    parent = target.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    tmp = parent / f".{target.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        os.rename(tmp, target)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY) and target.exists():
            raise NearDedupError(f"output {target} already exists: another run writing this "
                                 f"output published it first; nothing was written by this "
                                 f"one") from None
        if exc.errno in _NO_SPACE:
            raise NearDedupError(f"output {target}: cannot write ({exc.strerror}: out of disk "
                                 f"space or over the file-size limit); nothing was "
                                 f"written") from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def checksum_order(rel: str) -> list[str]:
    """Sort key of a relative POSIX path in ``checksums.sha256``: component by component
    (``pathlib`` order), so ``data/a/x`` sorts before ``data/a-b/x``."""
    return rel.split("/")


def write_checksums(folder: Path, known: dict[str, str] | None = None) -> None:
    """Write ``checksums.sha256`` over every other file below ``folder``: one line
    ``<sha256 hex>  <relative posix path>`` per file, sorted by `checksum_order`, LF endings,
    final newline — the only form `verify_checksums` accepts. ``known`` gives the digests of
    files the caller has just written and hashed (relative path -> hex, see `write_lines`);
    every other file is read."""
    known = known or {}
    rels = sorted((p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()),
                  key=checksum_order)
    lines = [f"{known.get(rel) or sha256_file(folder / rel)}  {rel}\n" for rel in rels
             if rel != CHECKSUMS]
    (folder / CHECKSUMS).write_text("".join(lines), encoding="utf-8")


_CHECKSUM_LINE = re.compile(r"([0-9a-f]{64})  ([^\x00-\x1f\x7f]+)")


def parse_checksums(text: str, where: str) -> dict[str, str]:
    """The canonical listing, path → digest; anything else is one line naming the line."""
    if text and not text.endswith("\n"):
        raise NearDedupError(f"{where}: {CHECKSUMS} does not end with a newline")
    listed: dict[str, str] = {}
    previous: list[str] | None = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if line.endswith("\r"):
            raise NearDedupError(f"{where}: {CHECKSUMS}:{n}: CRLF line ending (LF only)")
        m = _CHECKSUM_LINE.fullmatch(line)
        if m is None:
            raise NearDedupError(f"{where}: {CHECKSUMS}:{n}: malformed line (expected "
                                 f"'<64 lowercase hex>  <relative path>')")
        digest, rel = m.groups()
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise NearDedupError(f"{where}: {CHECKSUMS}:{n}: path {rel!r} is not a plain "
                                 f"relative path inside the folder")
        if rel == CHECKSUMS:
            raise NearDedupError(f"{where}: {CHECKSUMS}:{n}: lists {CHECKSUMS} itself")
        if rel in listed:
            raise NearDedupError(f"{where}: {CHECKSUMS}:{n}: {rel} is listed twice")
        if previous is not None and parts < previous:
            raise NearDedupError(f"{where}: {CHECKSUMS}:{n}: lines are not sorted by path")
        previous = parts
        listed[rel] = digest
    return listed


def _plain_tree(folder: Path, where: str) -> tuple[set[str], set[str]]:
    """(files, directories) below ``folder`` as relative POSIX paths, walked without following
    links. A frozen folder holds directories and regular files only: a symlink (whatever it
    points to) or a special file is refused."""
    files: set[str] = set()
    dirs: set[str] = set()
    stack = [("", folder)]
    while stack:
        prefix, current = stack.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.is_symlink():
                    raise NearDedupError(f"{where}: {rel} is a symlink; a frozen folder holds "
                                         f"plain files only")
                if entry.is_dir(follow_symlinks=False):
                    dirs.add(rel)
                    stack.append((rel + "/", Path(entry.path)))
                elif entry.is_file(follow_symlinks=False):
                    files.add(rel)
                else:
                    raise NearDedupError(f"{where}: {rel} is not a regular file; a frozen "
                                         f"folder holds plain files only")
    return files, dirs


def _sha256_inside(folder: Path, rel: str, where: str) -> str:
    """sha256 of ``folder/rel``, opened without following a symlink in the last component
    and only if it resolves inside ``folder``."""
    path = folder / rel
    if not is_within(path, folder):
        raise NearDedupError(f"{where}: {rel} resolves outside the folder")
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify_checksums(folder: Path, label: str) -> dict[str, str]:
    """Check a frozen folder against its ``checksums.sha256``; return path → sha256 of every
    listed file, in listing order. Raises NearDedupError naming the first problem.

    The listing must be exactly what `write_checksums` writes: every other file once, sorted,
    LF line endings, final newline, lowercase hex, relative paths without ``.``/``..``
    components. The folder must hold plain files and directories only (no symlink, even to an
    identical copy; no special file), no directory without a listed file below it, no
    unlisted file. Files are opened without following symlinks and only inside the folder, so
    verify never reads outside it.
    """
    where = f"{label} {folder}"
    sums = folder / CHECKSUMS
    if sums.is_symlink():
        raise NearDedupError(f"{where}: {CHECKSUMS} is a symlink; a frozen folder holds plain "
                             f"files only")
    if not sums.is_file():
        raise NearDedupError(f"{where}: {CHECKSUMS} is missing")
    try:
        text = sums.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise NearDedupError(f"{where}: {CHECKSUMS} is not UTF-8 text") from None
    listed = parse_checksums(text, where)
    files, dirs = _plain_tree(folder, where)
    for rel in listed:
        if rel not in files:
            raise NearDedupError(f"{where}: {rel} is listed in {CHECKSUMS} but missing")
    for rel in sorted(files, key=checksum_order):
        if rel != CHECKSUMS and rel not in listed:
            raise NearDedupError(f"{where}: {rel} is not listed in {CHECKSUMS}")
    holding = {"/".join(rel.split("/")[:k]) for rel in listed
               for k in range(1, rel.count("/") + 1)}
    for rel in sorted(dirs - holding, key=checksum_order):
        raise NearDedupError(f"{where}: directory {rel} holds no listed file")
    for rel, digest in listed.items():
        if _sha256_inside(folder, rel, where) != digest:
            raise NearDedupError(f"{where}: {rel} does not match its sha256 in {CHECKSUMS} "
                                 f"(file changed)")
    return listed
