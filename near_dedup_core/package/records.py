"""Record lines: one JSONL line checked as a CPT or SFT record (docs/contract.md §2), without
its location; callers prefix the package, file and line."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from near_dedup_core.package.manifest import SHA256_RE

# Fields that carry content; a `ref` record takes its content from the referenced sample.
CONTENT_FIELDS = {"cpt": ("text",), "sft": ("task", "system", "material", "messages")}


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


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


class LineProblem(Exception):
    """A record line breaks a rule; the caller prefixes the package, file and line."""


def _field_problem(data: dict, field: str, expected: str) -> LineProblem:
    if field not in data:
        return LineProblem(f"missing field '{field}'")
    return LineProblem(f"field '{field}' must be {expected}, found {_type_name(data[field])}")


def _json_problem(raw: bytes | memoryview, exc: Exception) -> LineProblem:
    raw = bytes(raw)
    if not raw.strip():
        return LineProblem("empty line")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return LineProblem(f"line is not valid UTF-8 (byte {err.start + 1})")
    return LineProblem(f"line is not valid JSON ({exc})")


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
            raise LineProblem(f"messages[{i}] must be an object with string 'role' and "
                               f"'content'")
    if "system" in data and type(data["system"]) is not str:
        raise _field_problem(data, "system", "a string")
    if "material" in data:
        material = data["material"]
        if type(material) is not dict:
            raise _field_problem(data, "material", "an object")
        if "text" in material and type(material["text"]) is not str:
            raise LineProblem(f"field 'material.text' must be a string, found "
                               f"{_type_name(material['text'])}")
        if "images" in material:
            images = material["images"]
            if type(images) is not list:
                raise LineProblem("field 'material.images' must be a list")
            for i, image in enumerate(images):
                if (type(image) is not dict or type(image.get("sha256")) is not str
                        or not SHA256_RE.fullmatch(image["sha256"])):
                    raise LineProblem(f"material.images[{i}] must be an object with sha256 "
                                       f"of 64 lowercase hex digits")
    _check_common(data)


_CONTENT_CHECKS = {"cpt": _check_cpt, "sft": _check_sft}


def _check_ref(data: dict, kind: str) -> tuple[str, str]:
    ref = data["ref"]
    if (type(ref) is not dict or type(ref.get("package_id")) is not str
            or type(ref.get("id")) is not str or not ref["id"]):
        raise LineProblem("field 'ref' must be an object with string 'package_id' and "
                           "non-empty string 'id'")
    for field in CONTENT_FIELDS[kind]:
        if field in data:
            raise LineProblem(f"a ref record must not carry content field '{field}'")
    _check_common(data)
    return ref["package_id"], ref["id"]


def parse_line(raw: bytes | memoryview, kind: str) -> tuple[dict, str, tuple[str, str] | None]:
    """Parse and check one JSONL line as a record of ``kind``: (data, sample id, ref).

    Raises `LineProblem`, whose message has no location yet.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _json_problem(raw, exc) from None
    return check_object(data, kind)


def check_object(data: object, kind: str) -> tuple[dict, str, tuple[str, str] | None]:
    """`parse_line`'s checks of a line already parsed as JSON."""
    if type(data) is not dict:
        raise LineProblem("line is not a JSON object")
    sample_id = data.get("id")
    if type(sample_id) is not str or not sample_id:
        raise _field_problem(data, "id", "a non-empty string")
    if "ref" in data:
        return data, sample_id, _check_ref(data, kind)
    _CONTENT_CHECKS[kind](data)
    return data, sample_id, None


def check_record(raw: bytes, kind: str, ids: set[str], depends_on: set[str],
                  targets: dict[str, set[str]] | None) -> tuple[dict, str, tuple[str, str] | None]:
    """`parse_line` plus the package-level rules: unique id, ref into depends_on (and, with
    ``targets``, to an existing sample). Adds the id to ``ids``."""
    data, sample_id, ref = parse_line(raw, kind)
    if sample_id in ids:
        raise LineProblem(f"duplicate id {sample_id!r} in the package")
    ids.add(sample_id)
    if ref is not None:
        resolve_ref(ref, depends_on, targets)
    return data, sample_id, ref


def resolve_ref(ref: tuple[str, str], depends_on: set[str],
                 targets: dict[str, set[str]] | None) -> None:
    target_package, target_id = ref
    if target_package not in depends_on:
        raise LineProblem(f"ref names package {target_package!r}, which is not in this "
                           f"package's lineage.depends_on")
    if targets is not None and target_id not in targets[target_package]:
        raise LineProblem(f"ref to sample {target_id!r} of package {target_package}, "
                           f"which has no such sample")
