"""Mixture on-disk formats: strict pydantic models of ``manifest.json`` (format
``mixture-package``) and ``plan.json`` (format ``mixture-plan``), with the folder names
of the embedded reports. Written by `build_mixture`, read back by `verify_mixture`."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from near_dedup_core.formats import StrictModel
from near_dedup_core.mixture.config import QualityFilter, Strategy

FORMAT: Final = "mixture-package"
FORMAT_VERSION: Final = 1
PLAN_FORMAT: Final = "mixture-plan"
REPORT_DIR: Final = "near-dedup"
CONTAMINATION_DIR: Final = "contamination"


class InputRef(StrictModel):
    """An input package as recorded in a mixture (path as written in the config)."""

    package_id: str
    manifest_sha256: str
    path: str


class DataFile(StrictModel):
    """One data file of a mixture: every record of one split."""

    path: str
    split: str
    records: int = Field(ge=0)
    sha256: str


class ReportRef(StrictModel):
    """The embedded report: its folder inside the mixture and its manifest's sha256."""

    path: Literal["near-dedup"]
    manifest_sha256: str


class ContaminationRef(StrictModel):
    """The embedded contamination report: its folder and its manifest's sha256."""

    path: Literal["contamination"]
    manifest_sha256: str


class ManifestCounts(StrictModel):
    target_records: int
    selected: int
    shortfall: int
    retained: int
    excluded_by_report: int
    by_split: dict[str, int]
    removed_contaminated: int = 0
    by_domain: dict[str, int]


class MixingParameters(StrictModel):
    """What a mixture was made with: written both into ``manifest.json`` and ``plan.json``,
    which `verify_mixture` requires to agree."""

    name: str
    kind: Literal["cpt", "sft"]
    inputs: list[InputRef]
    strategy: Strategy
    seed: int
    target_records: int
    group_by: str
    quality: QualityFilter
    allow_shortfall: bool
    redistribute: bool
    retained_splits: list[str]


class MixtureManifest(MixingParameters):
    """``manifest.json`` of a mixture package (format_version 1)."""

    format: Literal["mixture-package"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    tool_version: str
    counts: ManifestCounts
    near_dedup_report: ReportRef | None
    files: list[DataFile]
    contamination_report: ContaminationRef | None = None


class PlanRow(StrictModel):
    """One domain of a plan (package docstring, steps 1–6)."""

    domain: str
    available_before_dedup: int
    available_after_dedup: int
    eligible: int
    weight: float
    quota: int
    redistributed: int
    selected: int
    shortfall: int
    removed_contaminated: int = 0



class PlanReport(StrictModel):
    """The report a plan was made with: its folder's name, its identity."""

    path: str
    manifest_sha256: str
    excluded_pool_samples: int = Field(ge=0)


class PlanContamination(StrictModel):
    """The contamination report a plan was made with, and how many pool samples it removed."""

    path: str
    manifest_sha256: str
    removed_pool_samples: int = Field(ge=0)


class PlanTotals(StrictModel):
    selected: int = Field(ge=0)
    shortfall: int = Field(ge=0)
    redistributed: int = Field(ge=0)


class PlanFile(MixingParameters):
    """``plan.json`` (`Plan.to_json`), strict JSON types."""

    format: Literal["mixture-plan"]
    format_version: int = Field(ge=FORMAT_VERSION, le=FORMAT_VERSION)
    near_dedup_report: PlanReport | None
    contamination_report: PlanContamination | None = None
    domains: list[PlanRow]
    totals: PlanTotals
    retained_records: dict[str, int]
