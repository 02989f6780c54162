"""The reports `report html` shows beside the main one: ``--against`` (the previous report,
for the Changes pages) and ``--contamination`` (the Contamination pages). Each is verified as
`report verify` verifies it (`verify_against`, `verify_contamination_of`): a resealed edit
that `report verify` refuses is refused here too, in the same line. A contamination report
must be of the report's own pool: its training packages are inputs of the report, with the
manifest sha256 the report recorded (its pages read their texts through the report)."""

from __future__ import annotations

from pathlib import Path

from near_dedup_core.contamination import ContaminationSummary
from near_dedup_core.errors import NearDedupError
from near_dedup_core.report import ReportManifest, ReportSummary, verify_report


def verify_against(against: str | Path) -> ReportSummary:
    """The previous report of ``--against``, verified as `report verify` does."""
    from near_dedup_core.contamination import is_contamination_report

    if is_contamination_report(Path(against)):
        raise NearDedupError(f"--against {against}: a contamination report; --against takes "
                             f"a near-dedup report (a contamination report is shown with "
                             f"--contamination)")
    return verify_report(Path(against))


def verify_contamination_of(contamination: str | Path, report: Path,
                            manifest: ReportManifest) -> ContaminationSummary:
    """The contamination report of ``--contamination``, verified as `report verify` does
    (its pairs re-derived from its packages when they are at the paths it records), and of
    the pool of ``report`` (whose ``manifest`` names its inputs)."""
    from near_dedup_core.contamination import is_contamination_report, verify_contamination

    path = Path(contamination)
    if not is_contamination_report(path):
        raise NearDedupError(f"contamination report {contamination}: manifest.json is not "
                             f"a contamination report's")
    contam = verify_contamination(path, recorded=True)
    ours = {i.package_id: i.manifest_sha256 for i in manifest.inputs}
    for item in contam.model.inputs:
        recorded = ours.get(item.package_id)
        if recorded == item.manifest_sha256:
            continue
        why = (f"is not an input of the report (inputs: {', '.join(sorted(ours))})"
               if recorded is None else f"has manifest sha256 {item.manifest_sha256[:12]}…, "
               f"the report recorded {recorded[:12]}…")
        raise NearDedupError(f"contamination report {path} is of another pool than report "
                             f"{report}: its package {item.package_id} {why}")
    return contam
