"""The contamination report's files, one strict model each (`PairLine` per line of
``contamination.jsonl``, `Summary`, `Manifest`), and ``summary.json`` and the manifest's
``counts`` as recomputed from the pair lines. The writer builds its files through these
models and the verifier and the mixture read them through the same ones: strict JSON types
(no string for a number, no boolean for a number), unknown keys refused."""

from __future__ import annotations

from collections import defaultdict
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

FORMAT: Final = "near-dedup-contamination"
FORMAT_VERSION: Final = 1
FILES = ("contamination.jsonl", "summary.json")
HEX64 = r"^[0-9a-f]{64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class EvalRef(_Strict):
    """Where an eval item is: its package, sample id, split, data file and line."""

    package_id: str = Field(min_length=1)
    sample_id: str = Field(min_length=1)
    split: str = Field(min_length=1)
    file: str = Field(min_length=1)
    line: int = Field(ge=1)


class TrainingRef(EvalRef):
    """Where a training sample is, and its domain (its ref target's when it has none)."""

    domain: str | None


class Span(_Strict):
    start: int = Field(ge=0)
    end: int = Field(ge=1)


class PairLine(_Strict):
    """One line of ``contamination.jsonl``: a training sample that contains an eval item."""

    eval: EvalRef
    training: TrainingRef
    containment: float = Field(gt=0.0, le=1.0)
    item_shingles: int = Field(ge=1)
    common_shingles: int = Field(ge=1)
    span: Span
    numbers_differ: bool


class ByTraining(_Strict):
    domain: str | None
    split: str
    items_leaked: int = Field(ge=1)
    training_samples: int = Field(ge=1)


class EvalSummary(_Strict):
    package_id: str
    items: int = Field(ge=0)
    items_checked: int = Field(ge=0)
    items_skipped_short: int = Field(ge=0)
    items_leaked: int = Field(ge=0)
    training_samples_affected: int = Field(ge=0)
    by_training: list[ByTraining]


class TrainingSummary(_Strict):
    samples: int = Field(ge=0)
    samples_contaminated: int = Field(ge=0)


class Summary(_Strict):
    """``summary.json``."""

    evals: list[EvalSummary]
    pairs: int = Field(ge=0)
    training: TrainingSummary


class PackageEntry(_Strict):
    """An eval package or an input package of the pool, in the order given."""

    package_id: str = Field(min_length=1)
    kind: Literal["cpt", "sft"]
    manifest_sha256: str = Field(pattern=HEX64)
    records: int = Field(ge=0)
    path: str = Field(min_length=1)


class Candidates(_Strict):
    filter: Literal["prefix"]
    order: str
    extra_hits: int = Field(ge=1)
    anchors: int = Field(ge=0)
    verified: int = Field(ge=0)


class Counts(_Strict):
    pairs: int = Field(ge=0)
    items: int = Field(ge=0)
    items_checked: int = Field(ge=0)
    items_skipped_short: int = Field(ge=0)
    items_leaked: int = Field(ge=0)
    training_samples: int = Field(ge=0)
    training_samples_contaminated: int = Field(ge=0)


class FileLines(_Strict):
    lines: int = Field(ge=0)


class Files(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    pairs: FileLines = Field(alias="contamination.jsonl")


class Manifest(_Strict):
    """``manifest.json``. ``config`` is checked against `NearDedupConfig` by the verifier
    (every key present, as the writer writes it)."""

    format: Literal["near-dedup-contamination"]
    format_version: int
    tool_version: str = Field(min_length=1)
    algorithm_version: str = Field(min_length=1)
    config: dict[str, object]
    candidates: Candidates
    evals: list[PackageEntry] = Field(min_length=1)
    inputs: list[PackageEntry] = Field(min_length=1)
    counts: Counts
    files: Files


def problem(exc: ValidationError) -> str:
    """The first error of a validation, as ``field.path: message``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]


def summarize(lines: list[PairLine], evals: list[dict], training_samples: int) -> Summary:
    """``summary.json`` from the pair lines and the per-eval item counts (``evals``:
    package_id, items, items_checked, items_skipped_short); the verifier recomputes it the
    same way."""
    leaked: dict[str, set] = defaultdict(set)
    affected: dict[str, set] = defaultdict(set)
    groups: dict[tuple[str, str | None, str], tuple[set, set]] = {}
    contaminated = set()
    for row in lines:
        e, t = row.eval, row.training
        sample = (t.package_id, t.sample_id)
        leaked[e.package_id].add(e.sample_id)
        affected[e.package_id].add(sample)
        contaminated.add(sample)
        g = groups.setdefault((e.package_id, t.domain, t.split), (set(), set()))
        g[0].add(e.sample_id)
        g[1].add(sample)
    out = []
    for ev in evals:
        pid = ev["package_id"]
        by = [ByTraining(domain=d, split=s, items_leaked=len(g[0]), training_samples=len(g[1]))
              for (p, d, s), g in sorted(groups.items(),
                                         key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
              if p == pid]
        out.append(EvalSummary(**ev, items_leaked=len(leaked[pid]),
                               training_samples_affected=len(affected[pid]), by_training=by))
    return Summary(evals=out, pairs=len(lines),
                   training=TrainingSummary(samples=training_samples,
                                            samples_contaminated=len(contaminated)))


def counts_of(summary: Summary) -> Counts:
    """The manifest's ``counts`` (all recomputable from the lines and the eval item counts)."""
    ev = summary.evals
    return Counts(pairs=summary.pairs,
                  items=sum(e.items for e in ev),
                  items_checked=sum(e.items_checked for e in ev),
                  items_skipped_short=sum(e.items_skipped_short for e in ev),
                  items_leaked=sum(e.items_leaked for e in ev),
                  training_samples=summary.training.samples,
                  training_samples_contaminated=summary.training.samples_contaminated)
