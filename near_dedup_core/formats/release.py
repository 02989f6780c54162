"""``release.json``, the record of one day of the daily release (format ``near-dedup-release``):
what was released that day, with the manifest hash of each output. The Dagster release
(`near_dedup_assets.daily`) builds it as a `ReleaseRecord` and writes it with
`fsutil.write_json`; its checks read it back through the same model (`read_release`).

Every path is relative to its root (the release's snapshot, report, mixture or
contamination root setting), so a record does not depend on where the roots are mounted; a
record of format 1 (written before 2026-12-03) holds each path as the release was given it,
absolute, and still reads (a day released then is checked as it is). The
``counts`` of the report are the report manifest's (`ReportCounts`); those of the mixture and
of the contamination report are copied from their manifests as they are there (each file's
own model checks them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field

from near_dedup_core.formats import StrictModel
from near_dedup_core.formats.report import HEX64, ReportCounts
from near_dedup_core.fsutil import read_model

FORMAT: Final = "near-dedup-release"
#: 2: every path is relative to its root, so a rebuild after the roots moved is
#: byte-identical (1: every path as the release was given it; the same fields).
FORMAT_VERSION: Final = 2
FILE: Final = "release.json"


class ReleasedInput(StrictModel):
    """One package of the day's input pool, in name order."""

    package_id: str
    manifest_sha256: str = Field(pattern=HEX64)
    records: int = Field(ge=0)
    path: str


class ReleasedReport(StrictModel):
    """The day's frozen near-dedup report."""

    path: str
    manifest_sha256: str = Field(pattern=HEX64)
    config_fingerprint: str = Field(pattern=HEX64)
    counts: ReportCounts


class ReleasedMixture(StrictModel):
    """The day's mixture package."""

    name: str
    path: str
    manifest_sha256: str = Field(pattern=HEX64)
    counts: dict[str, Any]


class ReleasedContamination(StrictModel):
    """The day's contamination report (recorded only when the mixture used one)."""

    path: str
    manifest_sha256: str = Field(pattern=HEX64)
    counts: dict[str, Any] | None


class ReleaseRecord(StrictModel):
    """``release.json`` (format_version 2, or 1 with every path absolute). ``index`` and
    ``report`` are null on a day released with near-dedup off; ``contamination`` is absent
    unless the mixture used a contamination report."""

    format: Literal["near-dedup-release"]
    format_version: Literal[1, 2]
    day: str
    kind: Literal["cpt", "sft"]
    near_dedup: bool
    inputs: list[ReleasedInput] = Field(min_length=1)
    index: str | None
    report: ReleasedReport | None
    mixture: ReleasedMixture
    contamination: ReleasedContamination | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``release.json`` (``contamination`` only when there is one)."""
        return self.model_dump(mode="json", exclude=None if self.contamination is not None
                               else {"contamination"})


def read_release(folder: Path) -> ReleaseRecord:
    """``release.json`` of the release record ``folder``; a problem is one line naming it."""
    return read_model(folder / FILE, ReleaseRecord, f"release record {folder}")
