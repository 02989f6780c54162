"""The package manifest as one strict pydantic model (docs/contract.md §2): strict JSON types
(a string where an integer belongs is refused, never coerced), unknown keys refused, and the
first problem as one line in the words `load_package` has always used.

Imported by `manifest.load_package` on first use: a worker process that only parses line blocks
never loads pydantic.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from near_dedup_core.package.manifest import (
    DATA_DIR,
    FORMAT,
    FORMAT_VERSION,
    ID_PATTERN,
    ID_RE,
    KINDS,
    SHA256_RE,
    SHARD_SUFFIXES,
)

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
_LINEAGE = "lineage must be an object with lists of package ids 'parents' and 'depends_on'"


class Tokenizer(BaseModel):
    model_config = _STRICT

    name: Annotated[str, Field(min_length=1)]
    revision: Annotated[str, Field(min_length=1)]


class Lineage(BaseModel):
    """``parents``: what this version was derived from; ``depends_on``: the packages whose
    samples its ``ref`` records name."""

    model_config = _STRICT

    parents: list[str]
    depends_on: list[str]

    @field_validator("parents", "depends_on")
    @classmethod
    def _package_ids(cls, ids: list[str], info: ValidationInfo) -> list[str]:
        for item in ids:
            if not ID_RE.fullmatch(item):
                raise ValueError(f"lineage.{info.field_name} entry {item!r} is not a package "
                                 f"id ({ID_PATTERN})")
        if len(set(ids)) != len(ids):
            raise ValueError(f"lineage.{info.field_name} lists a package twice")
        return ids


class ShardFile(BaseModel):
    """One shard as listed: a plain relative path below ``data/`` ending in .jsonl[.gz]."""

    model_config = _STRICT

    path: str
    split: Annotated[str, Field(min_length=1)]
    records: Annotated[int, Field(ge=0)]
    bytes: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, Field(pattern=SHA256_RE.pattern)]

    @field_validator("path")
    @classmethod
    def _shard_path(cls, path: str) -> str:
        pure = PurePosixPath(path)
        if not path:
            raise ValueError("must be a non-empty string")
        if ("\\" in path or pure.is_absolute() or pure.as_posix() != path
                or any(part in ("..", ".") for part in pure.parts)
                or len(pure.parts) < 2 or pure.parts[0] != DATA_DIR):
            raise ValueError(f"{path!r} must be a relative path inside {DATA_DIR}/")
        if not path.endswith(SHARD_SUFFIXES):
            raise ValueError(f"{path!r} must end with .jsonl or .jsonl.gz")
        return path


class Manifest(BaseModel):
    """``manifest.json`` of a snapshot package (format v2). Fields in the order they are
    checked: the first problem is the one reported."""

    model_config = _STRICT

    package_id: Annotated[str, Field(pattern=f"^{ID_PATTERN}$")]
    format: Literal["training-snapshot"]
    format_version: int
    kind: Literal["cpt", "sft"]
    created_at: Annotated[str, Field(min_length=1)]
    tokenizer: Tokenizer | None = Field(default=None, validate_default=True)
    lineage: Lineage
    files: list[ShardFile]

    @field_validator("format_version")
    @classmethod
    def _version(cls, version: int) -> int:
        if version != FORMAT_VERSION:
            raise ValueError(f"format_version must be {FORMAT_VERSION}, found {version!r}")
        return version

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_for_cpt(cls, tokenizer: Tokenizer | None,
                           info: ValidationInfo) -> Tokenizer | None:
        if tokenizer is None and info.data.get("kind") == "cpt":
            raise ValueError("tokenizer is required for cpt: an object with non-empty string "
                             "name and revision, found None")
        return tokenizer

    @field_validator("lineage")
    @classmethod
    def _not_itself(cls, lineage: Lineage, info: ValidationInfo) -> Lineage:
        if info.data.get("package_id") in lineage.depends_on:
            raise ValueError("lineage.depends_on names the package itself")
        return lineage


def _dotted(loc: tuple[int | str, ...]) -> str:
    """``("files", 0, "path")`` as ``files[0].path``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _problem(raw: dict, error: ErrorDetails) -> str:
    """One line for pydantic's first error, in the words of the checks before the model."""
    loc = error["loc"]
    field = loc[0] if loc else ""
    value = raw.get(field) if isinstance(field, str) else None
    if error["type"] == "extra_forbidden":
        return f"{_dotted(loc)} is not a field of the manifest (unknown key)"
    if error["type"] == "value_error":
        message = str(error["ctx"]["error"])
        if field == "files" and len(loc) == 3:
            return f"files[{loc[1]}].{loc[2]} {message}"
        return message
    if field == "package_id":
        return f"package_id must match {ID_PATTERN}, found {value!r}"
    if field == "format":
        return f"format must be {FORMAT!r}, found {value!r}"
    if field == "format_version":
        return f"format_version must be {FORMAT_VERSION}, found {value!r}"
    if field == "kind":
        return f"kind must be one of {', '.join(KINDS)}, found {value!r}"
    if field == "created_at":
        return "created_at must be a non-empty string"
    if field == "tokenizer":
        need = "required for cpt: " if raw.get("kind") == "cpt" else ""
        return (f"tokenizer is {need}an object with non-empty string name and revision, "
                f"found {value!r}")
    if field == "lineage":
        return _LINEAGE
    if field == "files" and len(loc) == 1:
        return "files must be a list"
    if field == "files" and len(loc) == 2:
        return f"files[{loc[1]}] must be an object"
    if field == "files":
        index, key = loc[1], loc[2]
        item = value[index] if isinstance(value, list) and isinstance(index, int) else {}
        found = item.get(key) if isinstance(item, dict) else None
        if key == "path":
            return f"files[{index}].path must be a non-empty string"
        if key == "split":
            return f"files[{index}].split must be a non-empty string"
        if key in ("records", "bytes"):
            return f"files[{index}].{key} must be a non-negative integer, found {found!r}"
        if key == "sha256":
            return f"files[{index}].sha256 must be 64 lowercase hex digits"
    return f"{_dotted(loc)}: {error['msg']}"


class ManifestProblem(Exception):
    """The manifest's first problem, one line without its location; ``of_package_id`` when
    it is the package id itself (then the package is named by its folder, not its id)."""

    def __init__(self, message: str, of_package_id: bool) -> None:
        super().__init__(message)
        self.of_package_id = of_package_id


def parse_manifest(raw: dict) -> Manifest:
    """The validated manifest; raises `ManifestProblem`. ``package_id`` is checked first, so
    that every other problem can be located by the package id."""
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ManifestProblem(_problem(raw, first),
                              bool(first["loc"]) and first["loc"][0] == "package_id") from None
