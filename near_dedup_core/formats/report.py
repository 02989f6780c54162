"""The near-dedup report's files as typed models, one per file format (docs/contract.md,
"scan"): ``manifest.json`` (`ReportManifest`, which the scan builds and writes) and the
lines of ``decisions.jsonl`` (`DecisionRow`), ``relations.jsonl`` (`RelationRow`) and
``origins.jsonl`` (`OriginRow`).

Format 2 is format 1 with takedowns (docs/takedowns.md): a scan of an index that holds
takedowns in force writes format 2, whose manifest lists them (``takedowns``), whose
decisions may have the reason ``takedown`` and whose relations to a taken-down text carry
``takedown`` (request id and text id); a scan of any other index writes format 1, byte for
byte as before. The models read both; a format 1 report holds none of these.

The scan writes the JSONL files with a byte writer (`near_dedup_core.scan.write`); the
verifier (`near_dedup_core.report.verify`) and the audit tools (`near_dedup_core.audit`) read
them through these models with `iter_rows`, so every line has exactly its fields with strict
JSON types (a string Jaccard, a ``history_only`` of 0, ``"decision": 5``, an extra or a
missing field: refused with the line's number), and the code after it reads attributes.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import orjson
from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
)

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats import StrictModel

FORMAT: Final = "near-dedup-report"
FORMAT_VERSION = 2
#: The format versions this tool reads and verifies.
VERSIONS = (1, 2)
FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")

HEX32 = r"^[0-9a-f]{32}$"  # a content id is 16 bytes
HEX64 = r"^[0-9a-f]{64}$"
#: A package's data file as its manifest lists it: relative, below ``data/``, no ``.`` or
#: ``..`` component, ``.jsonl`` or ``.jsonl.gz`` (`near_dedup_core.package.load_package`).
SHARD_PATH = (r"^data(?:/(?:[^/\\.][^/\\]*|\.[^/\\.][^/\\]*|\.\.[^/\\]+))*"
              r"/[^/\\]*\.jsonl(?:\.gz)?$")

#: What each pattern means, for messages.
PATTERN_NAMES = {HEX32: "32 lowercase hex digits", HEX64: "64 lowercase hex digits",
                 SHARD_PATH: "a data file path of a package (relative, inside data/, no .., "
                             ".jsonl or .jsonl.gz)"}

Decision = Literal["keep", "exclude"]
Reason = Literal["unique", "retained_split", "guard_blocked", "match_not_kept",
                 "exact_duplicate", "near_duplicate", "takedown"]
SampleKey = tuple[str, str]  # (package_id, sample_id)


# --------------------------------------------------------------------------- manifest.json


class ReportInput(StrictModel):
    """One input package of the scanned pool, in input order."""

    package_id: str
    kind: Literal["cpt", "sft"]
    manifest_sha256: str = Field(pattern=HEX64)
    records: int = Field(ge=0)
    path: str


class IndexStatePackage(StrictModel):
    """A package held by the index when the report was frozen."""

    package_id: str
    kind: Literal["cpt", "sft"]
    manifest_sha256: str = Field(pattern=HEX64)
    batch: int = Field(ge=0)


class IndexState(StrictModel):
    packages: list[IndexStatePackage]
    batches: int = Field(ge=0)
    contents: int = Field(ge=0)


class SplitCounts(StrictModel):
    keep: int = Field(ge=0)
    exclude: int = Field(ge=0)


class CandidateCounts(StrictModel):
    lsh_pairs: int = Field(ge=0)
    after_filters: int = Field(ge=0)


class ReportCounts(StrictModel):
    samples: int = Field(ge=0)
    keep: int = Field(ge=0)
    exclude: int = Field(ge=0)
    by_split: dict[str, SplitCounts]
    by_reason: dict[str, int]
    relations: int = Field(ge=0)
    history_only_relations: int = Field(ge=0)
    blocked_relations: int = Field(ge=0)
    near_relations_jaccard: dict[str, int]
    candidates: CandidateCounts


class FileLines(StrictModel):
    lines: int = Field(ge=0)


class ReportFiles(StrictModel):
    decisions: FileLines = Field(alias="decisions.jsonl")
    relations: FileLines = Field(alias="relations.jsonl")
    origins: FileLines = Field(alias="origins.jsonl")

    @classmethod
    def of_lines(cls, *, decisions: int, relations: int, origins: int) -> ReportFiles:
        """The line counts of the three JSONL files."""
        return cls.model_validate({"decisions.jsonl": {"lines": decisions},
                                   "relations.jsonl": {"lines": relations},
                                   "origins.jsonl": {"lines": origins}})


class AppliedTakedown(StrictModel):
    """A takedown in force when the report was frozen (format 2): its request, the act that
    recorded it, its texts, and the pool samples it took down."""

    request_id: str = Field(min_length=1)
    act: int = Field(ge=1)
    texts: int = Field(ge=0)
    samples: int = Field(ge=0)


class ReportManifest(StrictModel):
    """``manifest.json`` of a report (format_version 1, or 2 with ``takedowns``)."""

    format: Literal["near-dedup-report"]
    format_version: int
    tool_version: str
    algorithm_version: str = Field(min_length=1)
    config: NearDedupConfig
    config_fingerprint: str = Field(pattern=HEX64)
    inputs: list[ReportInput] = Field(min_length=1)
    index: IndexState
    counts: ReportCounts
    files: ReportFiles
    takedowns: list[AppliedTakedown] | None = None

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if self.takedowns is None:
            data.pop("takedowns", None)
        return data

    @property
    def kinds(self) -> list[str]:
        """The kinds of data of the inputs (one, as a scan's inputs are of one kind)."""
        return sorted({i.kind for i in self.inputs})

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``manifest.json`` (the scan writes it with `fsutil.write_json`:
        keys sorted, so the bytes follow from the values)."""
        return self.model_dump(mode="json", by_alias=True)


# --------------------------------------------------------------------------- JSONL rows


class SampleRef(StrictModel):
    """A pool sample: ``kept`` of a decision, ``sample`` of a relation."""

    package_id: str
    sample_id: str

    @property
    def key(self) -> SampleKey:
        return (self.package_id, self.sample_id)


class MatchRef(StrictModel):
    """The matched content of a relation and its first pool sample (null ids: history)."""

    content_id: str = Field(pattern=HEX32)
    package_id: str | None
    sample_id: str | None

    @property
    def key(self) -> SampleKey | None:
        if self.package_id is None or self.sample_id is None:
            return None
        return (self.package_id, self.sample_id)


class MatchSource(StrictModel):
    """Where a matched content came from outside the pool (an indexed package's sample)."""

    package_id: str
    sample_id: str
    split: str


class DecisionRow(StrictModel):
    """One line of ``decisions.jsonl``: one sample of the pool."""

    package_id: str
    sample_id: str
    split: str
    scope: str
    content_id: str = Field(pattern=HEX32)
    text_sha256: str = Field(pattern=HEX64)
    decision: Decision
    kept: SampleRef | None
    reason: Reason
    jaccard: float | None

    @property
    def key(self) -> SampleKey:
        return (self.package_id, self.sample_id)


class TakedownRef(StrictModel):
    """The takedown a relation is to (format 2): its request and the taken-down text's id
    within it; the relation's ``match.content_id`` is the text's id in reports
    (`formats.takedown.TakedownItem.text_id`)."""

    request_id: str = Field(min_length=1)
    item: str = Field(min_length=1)


class RelationRow(StrictModel):
    """One line of ``relations.jsonl``: a verified pair, from the later sample's side, or a
    sample's match with a taken-down text (``takedown``, format 2)."""

    sample: SampleRef
    match: MatchRef
    jaccard: float
    kind: Literal["exact", "near"]
    history_only: bool
    match_sources: list[MatchSource]
    blocked_by: Literal["numbers", "units"] | None
    takedown: TakedownRef | None = None

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if self.takedown is None:
            data.pop("takedown", None)
        return data


class OriginRow(StrictModel):
    """One line of ``origins.jsonl``: where a sample of the pool came from."""

    package_id: str
    sample_id: str
    split: str
    file: str = Field(pattern=SHARD_PATH)
    line: int = Field(ge=1)
    source: dict[str, Any] | None

    @property
    def key(self) -> SampleKey:
        return (self.package_id, self.sample_id)


ROW_MODELS: dict[str, type[StrictModel]] = {"decisions.jsonl": DecisionRow,
                                             "relations.jsonl": RelationRow,
                                             "origins.jsonl": OriginRow}
Row = TypeVar("Row", bound=StrictModel)

#: Bytes of whole lines validated per call (one JSON array of them).
BATCH_BYTES = 1 << 20


@cache
def _batch_adapter(model: type[StrictModel]) -> TypeAdapter:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def _describe(exc: ValidationError) -> str:
    """The first problem of a line: the field (dotted path) and what is wrong with it."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    if first["type"] == "missing":
        return f"missing field '{field}'"
    if first["type"] == "extra_forbidden":
        return f"unknown field '{field}'"
    if first["type"] == "json_invalid":
        return "not valid JSON"
    if not field and first["type"] == "model_type":
        return "not a JSON object"
    if first["type"] == "string_pattern_mismatch":
        what = PATTERN_NAMES.get(first["ctx"]["pattern"], "the format's pattern")
        return f"{field} must be {what}, found {first.get('input')!r}"
    found = first.get("input")
    shown = "" if isinstance(found, (dict, list)) else f", found {found!r}"
    return f"{field}: {first['msg'].removeprefix('Value error, ')}{shown}"


def line_problem(raw: bytes, model: type[StrictModel]) -> str | None:
    """What is wrong with one line for ``model`` (None: nothing)."""
    try:
        model.model_validate_json(raw)
    except ValidationError as exc:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return "not valid JSON"
        if not isinstance(value, dict):
            return "not a JSON object"
        return _describe(exc)
    return None


def decision_rows(report: Path) -> Iterator[tuple[int, DecisionRow]]:
    """(line number, row) of ``decisions.jsonl`` (`iter_rows`)."""
    return iter_rows(report, "decisions.jsonl", DecisionRow, f"report {report}")


def relation_rows(report: Path) -> Iterator[tuple[int, RelationRow]]:
    """(line number, row) of ``relations.jsonl`` (`iter_rows`)."""
    return iter_rows(report, "relations.jsonl", RelationRow, f"report {report}")


def origin_rows(report: Path) -> Iterator[tuple[int, OriginRow]]:
    """(line number, row) of ``origins.jsonl`` (`iter_rows`)."""
    return iter_rows(report, "origins.jsonl", OriginRow, f"report {report}")


def iter_rows(folder: Path, name: str, model: type[Row],
              label: str) -> Iterator[tuple[int, Row]]:
    """(line number, row) of one JSONL file, each line validated against ``model``. Lines
    are validated a batch at a time (one JSON array of up to `BATCH_BYTES` of whole lines);
    a batch that fails is re-read line by line, so the first bad line is one line
    ``<label>: <name>:<n>: <problem>``."""
    row_model: Any = model
    adapter = _batch_adapter(row_model)
    n = 0
    try:
        fh = open(folder / name, "rb")
    except OSError as exc:
        raise NearDedupError(f"{label}: {name} cannot be read ({exc.strerror})") from None
    with fh:
        while lines := fh.readlines(BATCH_BYTES):
            try:
                rows = adapter.validate_json(b"[" + b",".join(lines) + b"]")
            except ValidationError:
                rows = None
            if rows is None or len(rows) != len(lines):
                for k, raw in enumerate(lines, n + 1):
                    problem = line_problem(raw, row_model)
                    if problem is not None:
                        raise NearDedupError(f"{label}: {name}:{k}: {problem}")
                raise NearDedupError(f"{label}: {name}:{n + 1}: lines do not split into one "
                                     f"JSON object each")
            for row in rows:
                n += 1
                yield n, row
