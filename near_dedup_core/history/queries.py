"""The queries of `index find`, read and checked before the index is opened: a text file
(``--text``), a JSONL file of ``{"id", "text"}`` (CPT) or SFT records (``--jsonl``), samples
of a package (``--package DIR --sample ID…``), or hashes as the index and reports record them
(``--hash``: a content id of 32 hex digits or a text sha256 of 64). Every problem is one line
naming the file and line, or the package and sample, or the hash."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

from near_dedup_core.compare import compared_text, sft_scope
from near_dedup_core.errors import NearDedupError
from near_dedup_core.package import load_package
from near_dedup_core.package.records import LineProblem, check_object, parse_line
from near_dedup_core.package.stream import SampleIsRef, read_samples
from near_dedup_core.storage import Location


class Query(NamedTuple):
    """One question: ``source`` says how it was given (``text``, ``jsonl``, ``sample``,
    ``hash``). A text's ``kind`` is ``cpt`` or ``sft``; an SFT text carries its scope key (it
    is only compared within that scope, as a scan compares it), a CPT text none (it is
    looked up in every CPT scope of the index). A hash query has no text: ``hash`` holds its
    bytes (16: a content id, 32: a text sha256) and the index gives its text."""

    id: str
    source: str
    kind: str | None
    text: str | None
    scope_key: str | None
    domain: str | None
    hash: bytes | None = None


def _decode(data: bytes, label: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise NearDedupError(f"{label}: not UTF-8 text (byte {err.start + 1})") from None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise NearDedupError(f"{path}: not found") from None
    except IsADirectoryError:
        raise NearDedupError(f"{path}: a folder, not a text file") from None
    except OSError as exc:
        raise NearDedupError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def text_query(path: Path) -> Query:
    """The whole file as one CPT text; the query's id is the path as given."""
    return Query(str(path), "text", "cpt", _decode(_read(path), str(path)), None, None)


def jsonl_queries(path: Path) -> list[Query]:
    """One query per line: ``{"id", "text"}`` (a CPT text) or an SFT record as packages
    carry it (``id``, ``task``, ``messages``, optional ``system`` and ``material``), each
    checked as a package's record is; ids are unique within the file."""
    out: list[Query] = []
    seen: set[str] = set()
    for n, raw in enumerate(_lines(_read(path)), 1):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        kind = "sft" if isinstance(obj, dict) and "messages" in obj else "cpt"
        try:  # a line is parsed once (its JSON problem is `parse_line`'s)
            data, sample_id, ref = parse_line(raw, kind) if obj is None else \
                check_object(obj, kind)
        except LineProblem as exc:
            raise NearDedupError(f"{path}:{n}: {exc}") from None
        if ref is not None:
            raise NearDedupError(f"{path}:{n}: a ref is not a text; give the text itself")
        if sample_id in seen:
            raise NearDedupError(f"{path}:{n}: duplicate id {sample_id!r}")
        seen.add(sample_id)
        domain = data.get("domain")
        out.append(Query(sample_id, "jsonl", kind, compared_text(kind, data),
                         sft_scope(data).key if kind == "sft" else None, domain))
    if not out:
        raise NearDedupError(f"{path}: no query (one JSON object per line)")
    return out


def _lines(data: bytes) -> Iterator[memoryview]:
    """The lines of ``data``, each without its ``\\n`` (a final one starts no empty line),
    as views of it, not copies (``split`` copied the 39 MB of 10,000 queries: 0.01 s)."""
    view = memoryview(data)
    start, size = 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        if end < 0:
            end = size
        yield view[start:end]
        start = end + 1


def sample_queries(package: Path | Location, sample_ids: Sequence[str]) -> list[Query]:
    """The samples ``sample_ids`` of the package at ``package``, in the order given, read
    (and checked) from its data files. A sample stored as a ref to another package's sample
    is refused: that package's sample is the one to ask about."""
    pkg = load_package(package)
    try:
        records = read_samples(pkg, sample_ids)
    except SampleIsRef as exc:
        raise NearDedupError(f"{exc}; ask about that package's sample") from None
    sft = pkg.kind == "sft"
    return [Query(f"{pkg.package_id}/{s}", "sample", pkg.kind, compared_text(pkg.kind, data),
                  sft_scope(data).key if sft else None, data.get("domain"))
            for s, data in records.items()]


_HEX = re.compile(r"[0-9a-f]{32}|[0-9a-f]{64}")


def hash_query(text: str) -> Query:
    """A content id (32 hex digits, ``content_id`` of a report) or the sha256 of a raw text
    (64 hex digits, ``text_sha256``)."""
    value = text.strip().lower()
    if not _HEX.fullmatch(value):
        raise NearDedupError(f"--hash {text}: not a content id (32 hex digits) or a text "
                             f"sha256 (64 hex digits)")
    return Query(value, "hash", None, None, None, None, bytes.fromhex(value))
