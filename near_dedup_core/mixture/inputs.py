"""Mixture inputs: the frozen near-dedup report as a mixture reads it (`ReportView`), the
check that a report (near-dedup or contamination) covers exactly the mixture's input
packages, and ref resolution of input records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import CHECKSUMS, sha256_file
from near_dedup_core.package import Package
from near_dedup_core.report import verify_report

#: Fields of a ref record that override the referenced record's fields when resolving.
REF_OWN_FIELDS = ("id", "domain", "source")

SampleKey = tuple[str, str]  # (package_id, sample_id)


def resolve_ref(own: dict, target: dict) -> dict:
    """The referenced record's fields, then the ref record's own id/domain/source."""
    resolved = {k: v for k, v in target.items() if k != "ref"}
    for key in REF_OWN_FIELDS:
        if key in own:
            resolved[key] = own[key]
    return resolved


@dataclass(frozen=True)
class ReportView:
    """What a mixture needs from a frozen report: identity, inputs and exclusions."""

    path: Path
    manifest_sha256: str
    checksums_sha256: str  # pins every file of the report as it was read
    manifest: dict
    excluded: set[SampleKey]  # pool samples the report excludes

    @property
    def inputs(self) -> list[dict]:
        return self.manifest["inputs"]

    @property
    def retained_splits(self) -> list[str]:
        return list(self.manifest["config"]["retained_splits"])


def read_report(path: Path, label: str = "near_dedup_report") -> ReportView:
    """Verify a report folder (`report.verify_report`) and load its manifest and exclusions."""
    if not (path / "manifest.json").is_file():
        raise NearDedupError(f"{label} {path}: not a near-dedup report (no manifest.json)")
    verified = verify_report(path)
    manifest = verified.manifest  # validated against report.ReportManifest
    excluded = {key for key, d in verified.samples.items() if d.decision == "exclude"}
    return ReportView(path=path, manifest_sha256=sha256_file(path / "manifest.json"),
                      checksums_sha256=sha256_file(path / CHECKSUMS), manifest=manifest,
                      excluded=excluded)


def check_inputs_match(packages: list[Package], report: ReportView) -> None:
    """The mixture inputs must be exactly the report's input pool, else the report is stale."""
    mine = {p.package_id: p.manifest_sha256 for p in packages}
    theirs = {i["package_id"]: i["manifest_sha256"] for i in report.inputs}
    hint = f"the report {report.path} is stale: rescan with the mixture inputs"
    for pid, sha in mine.items():
        if pid not in theirs:
            raise NearDedupError(f"package {pid} is not among the report's inputs; {hint}")
        if theirs[pid] != sha:
            raise NearDedupError(f"package {pid}: manifest sha256 {sha[:12]}… differs from "
                                 f"the report's {theirs[pid][:12]}…; {hint}")
    for pid in theirs:
        if pid not in mine:
            raise NearDedupError(f"report input package {pid} is not among the mixture "
                                 f"inputs; {hint}")
