"""`snapshot create`: a package built from plain JSONL files, every line checked, published
atomically, then validated like any input."""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.package.manifest import (
    DATA_DIR,
    FORMAT,
    FORMAT_VERSION,
    ID_PATTERN,
    ID_RE,
    KINDS,
    MANIFEST,
    Package,
    check_package_ids,
    load_package,
)
from near_dedup_core.package.records import LineProblem, check_record
from near_dedup_core.package.stream import stream_package
from near_dedup_core.storage import Location, parse_location
from near_dedup_core.storage_names import check_location_text

_GZIP_MAGIC = b"\x1f\x8b"


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
        return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
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
                    check_record(raw, kind, ids, depends_on, None)
                except LineProblem as problem:
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
                   parents: Sequence[str], created_at: str | None,
                   output: str | Path | Location) -> Package:
    """Build a package at ``output`` from plain JSONL files, atomically, and validate it.
    ``output`` may be a URL (``s3://…``): the package is written locally, then published
    there by the storage layer's rule, ``manifest.json`` last (`storage.Location.publish`).

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
    check_package_ids(loc, "depends_on", depends_on)
    check_package_ids(loc, "parents", parents)
    if package_id in depends_on:
        raise NearDedupError(f"{loc}: a package cannot depend on itself")
    stamp = _created_at(package_id, created_at)
    if not splits:
        raise NearDedupError(f"{loc}: give at least one --split SPLIT=FILE")
    for split, source in splits:
        check_location_text(str(source))
        if not ID_RE.fullmatch(split):
            raise NearDedupError(f"{loc}: split name {split!r} must match {ID_PATTERN}")
        if not Path(source).is_file():
            raise NearDedupError(f"{where(package_id, str(source))}: no such file")
    output = parse_location(output)
    output.require_new_output(MANIFEST)

    with output.publish(MANIFEST) as tmp:
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
        collections.deque(stream_package(written, set(), None), maxlen=0)
    return load_package(output)
