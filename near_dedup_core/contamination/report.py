"""The contamination report's files, one strict model each (`PairLine` per line of
``contamination.jsonl``, `SetAsideLine` per line of ``set_aside.jsonl``, `Summary`,
`Manifest`), and ``summary.json`` and the manifest's ``counts`` as recomputed from the lines.
Format 4 is written; formats 2 and 3 (the same files) and format 1 (no set-aside file,
pairs without the matched texts) are still read and verified, format 1 through its own models
(`models_of`). The writer builds its files through these
models and the verifier and the mixture read them through the same ones: strict JSON types
(no string for a number, no boolean for a number), unknown keys refused."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final, Literal, NamedTuple

from pydantic import ConfigDict, Field, ValidationError

from near_dedup_core.formats import StrictModel as _Strict
from near_dedup_core.formats.report import FileLines

FORMAT: Final = "near-dedup-contamination"
FORMAT_VERSION: Final = 4
#: format versions `report verify` reads (formats 3 and 4 have the files and models of format
#: 2; format 3 matches short items by the rules of docs/contamination.md, "Short items", and
#: format 4 adds the set-aside reason ``template``)
VERSIONS = (1, 2, 3, 4)
FILES = ("contamination.jsonl", "set_aside.jsonl", "summary.json")
FILES_V1 = ("contamination.jsonl", "summary.json")
HEX64 = r"^[0-9a-f]{64}$"
#: config keys a format 1 manifest does not hold (they came with format 2)
NEW_IN_V2 = ("contamination_common_samples", "contamination_allowlist")
#: config keys a manifest of a format before 4 does not hold
NEW_IN_V4 = ("contamination_template_samples",)


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


class PairLineV1(_Strict):
    """One line of a format 1 ``contamination.jsonl``."""

    eval: EvalRef
    training: TrainingRef
    containment: float = Field(gt=0.0, le=1.0)
    item_shingles: int = Field(ge=1)
    common_shingles: int = Field(ge=1)
    span: Span
    numbers_differ: bool


Field_ = Literal["text", "text+choices", "messages"]
Method = Literal["containment", "exact"]


class PairLine(PairLineV1):
    """One line of ``contamination.jsonl``: a training sample that contains an eval item.
    ``span`` is in the sample's normalized compared text and ``training_text`` its text;
    ``item_span``/``item_text`` the same in the item's normalized text. With ``method``
    ``exact``, ``item_shingles`` and ``common_shingles`` count the item's words."""

    field: Field_
    method: Method
    item_span: Span
    item_text: str
    training_text: str


class SetAsideLine(_Strict):
    """One line of ``set_aside.jsonl``: an item whose matches are not reported as
    contamination, and why: ``common`` (found in ``training_samples`` samples of the pool,
    at least ``contamination_common_samples``), ``template`` (since format 4: found with a
    word changed in ``training_samples`` samples, at least ``contamination_template_samples``;
    those matches are set aside) or ``allowlist`` (every match lies within allowlist entry
    ``allowlist_entry`` of the manifest). ``example`` is its first sample set aside,
    ``training_text`` the text matched there."""

    eval: EvalRef
    field: Field_
    reason: Literal["common", "template", "allowlist"]
    training_samples: int = Field(ge=1)
    allowlist_entry: int | None = Field(ge=0)
    example: TrainingRef
    training_text: str


class ByTraining(_Strict):
    domain: str | None
    split: str
    items_leaked: int = Field(ge=1)
    training_samples: int = Field(ge=1)


class EvalSummaryV1(_Strict):
    package_id: str
    items: int = Field(ge=0)
    items_checked: int = Field(ge=0)
    items_skipped_short: int = Field(ge=0)
    items_leaked: int = Field(ge=0)
    training_samples_affected: int = Field(ge=0)
    by_training: list[ByTraining]


class EvalSummary(EvalSummaryV1):
    """Per eval package. Since format 2 ``items_skipped_short`` counts only the short items
    with no letter (a number alone is no item); ``items_set_aside`` the items with a line in
    ``set_aside.jsonl``."""

    items_set_aside: int = Field(ge=0)


class TrainingSummary(_Strict):
    samples: int = Field(ge=0)
    samples_contaminated: int = Field(ge=0)


class SummaryV1(_Strict):
    evals: list[EvalSummaryV1]
    pairs: int = Field(ge=0)
    training: TrainingSummary


class Summary(SummaryV1):
    """``summary.json``."""

    evals: list[EvalSummary]  # type: ignore[assignment]
    set_aside: int = Field(ge=0)


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


class CountsV1(_Strict):
    pairs: int = Field(ge=0)
    items: int = Field(ge=0)
    items_checked: int = Field(ge=0)
    items_skipped_short: int = Field(ge=0)
    items_leaked: int = Field(ge=0)
    training_samples: int = Field(ge=0)
    training_samples_contaminated: int = Field(ge=0)


class Counts(CountsV1):
    items_set_aside: int = Field(ge=0)
    set_aside: int = Field(ge=0)


class FilesV1(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True,
                              defer_build=True)

    pairs: FileLines = Field(alias="contamination.jsonl")


class Files(FilesV1):
    set_aside: FileLines = Field(alias="set_aside.jsonl")


class AllowEntry(_Strict):
    """An allowlist entry: public text that is expected in the pool, and why."""

    text: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class ManifestV1(_Strict):
    """A format 1 ``manifest.json``."""

    format: Literal["near-dedup-contamination"]
    format_version: int
    tool_version: str = Field(min_length=1)
    algorithm_version: str = Field(min_length=1)
    config: dict[str, object]
    candidates: Candidates
    evals: list[PackageEntry] = Field(min_length=1)
    inputs: list[PackageEntry] = Field(min_length=1)
    counts: CountsV1
    files: FilesV1


class Manifest(ManifestV1):
    """``manifest.json``. ``config`` is checked against `NearDedupConfig` by the verifier
    (every key present, as the writer writes it); ``allowlist`` holds the entries the run
    used (from ``contamination_allowlist`` or ``--allowlist``), each with its reason."""

    counts: Counts
    files: Files
    allowlist: list[AllowEntry]


class Models(NamedTuple):
    """The models of one format version."""

    files: tuple[str, ...]
    manifest: Any
    pair: Any
    summary: Any


def models_of(version: int) -> Models:
    """The models of format ``version`` (one of `VERSIONS`)."""
    if version == 1:
        return Models(FILES_V1, ManifestV1, PairLineV1, SummaryV1)
    return Models(FILES, Manifest, PairLine, Summary)


def problem(exc: ValidationError) -> str:
    """The first error of a validation, as ``field.path: message``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]


def summarize(lines: Sequence[PairLineV1], evals: list[dict], training_samples: int,
              set_aside: list[SetAsideLine] | None = None) -> SummaryV1:
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
    out: list[Any] = []
    for ev in evals:
        pid = ev["package_id"]
        by = [ByTraining(domain=d, split=s, items_leaked=len(g[0]), training_samples=len(g[1]))
              for (p, d, s), g in sorted(groups.items(),
                                         key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
              if p == pid]
        if set_aside is None:
            out.append(EvalSummaryV1(**ev, items_leaked=len(leaked[pid]),
                                     training_samples_affected=len(affected[pid]),
                                     by_training=by))
        else:
            aside = {a.eval.sample_id for a in set_aside if a.eval.package_id == pid}
            out.append(EvalSummary(**ev, items_leaked=len(leaked[pid]),
                                   training_samples_affected=len(affected[pid]),
                                   by_training=by, items_set_aside=len(aside)))
    training = TrainingSummary(samples=training_samples, samples_contaminated=len(contaminated))
    if set_aside is None:
        return SummaryV1(evals=out, pairs=len(lines), training=training)
    return Summary(evals=out, pairs=len(lines), training=training, set_aside=len(set_aside))


def counts_of(summary: SummaryV1) -> CountsV1:
    """The manifest's ``counts`` (all recomputable from the lines and the eval item counts)."""
    ev = summary.evals
    if isinstance(summary, Summary):
        return Counts(**counts_of(SummaryV1.model_construct(**dict(summary))).model_dump(),
                      items_set_aside=sum(e.items_set_aside for e in summary.evals),
                      set_aside=summary.set_aside)
    return CountsV1(pairs=summary.pairs,
                  items=sum(e.items for e in ev),
                  items_checked=sum(e.items_checked for e in ev),
                  items_skipped_short=sum(e.items_skipped_short for e in ev),
                  items_leaked=sum(e.items_leaked for e in ev),
                  training_samples=summary.training.samples,
                  training_samples_contaminated=summary.training.samples_contaminated)
