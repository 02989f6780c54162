"""Asset checks: the published report and mixture of a day still verify.

Both are blocking: a failing report check stops the day's mixture from being built, a
failing mixture check fails the run. They are thin wrappers around the core's `report
verify` and `mixture verify` (checksums and consistency, no SQLite index needed); the failure
description is the core's one-line message.

The day comes from the run's partition. A check executed on its own (the "Execute" button of
the UI launches a run without a partition) verifies the latest materialized day of its asset,
and passes with "nothing to verify" while no day is materialized.

`exclusion_rates` (docs/audit.md) watches the report's exclusion rates by domain and package,
also against the previous release day; it warns, and blocks only when configured to.
"""

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import verify_checksums
from near_dedup_core.mixture import verify_mixture
from near_dedup_core.report import verify_report

from near_dedup_assets.assets import MIXTURE, SCAN_REPORT
from near_dedup_assets.audit import exclusion_rate_result
from near_dedup_assets.partitions import RELEASE_DAYS
from near_dedup_assets.resources import ReleaseSettings


def _check_day(context: dg.AssetCheckExecutionContext, asset: dg.AssetKey) -> str | None:
    """The run's release day; without a partition, the latest materialized day (or None)."""
    if context.has_partition_key:
        return context.partition_key
    return max(context.instance.get_materialized_partitions(asset), default=None)


def _nothing_to_verify(asset: dg.AssetKey) -> dg.AssetCheckResult:
    what = asset.to_user_string()
    return dg.AssetCheckResult(
        passed=True, description=f"no day of {what} is materialized yet: nothing to verify",
        metadata={"day": dg.MetadataValue.text("none")})


def _verified(day: str, label: str, path: Path,
              verify: Callable[[], str]) -> dg.AssetCheckResult:
    metadata = {"day": dg.MetadataValue.text(day), label: dg.MetadataValue.path(str(path))}
    try:
        summary = verify()
    except NearDedupError as exc:
        problem = dg.MetadataValue.text(str(exc))
        return dg.AssetCheckResult(passed=False, description=str(exc),
                                   metadata={**metadata, "problem": problem})
    return dg.AssetCheckResult(passed=True, description=summary,
                               metadata={**metadata, "summary": dg.MetadataValue.text(summary)})


@dg.asset_check(asset=SCAN_REPORT, blocking=True)
def report_checksums(context: dg.AssetCheckExecutionContext,
                     release: ReleaseSettings) -> dg.AssetCheckResult:
    """The day's report matches its checksums.sha256 and is internally consistent."""
    day = _check_day(context, SCAN_REPORT)
    if day is None:
        return _nothing_to_verify(SCAN_REPORT)
    if not release.near_dedup_enabled:
        return dg.AssetCheckResult(passed=True, description="near-dedup is off: no report",
                                   metadata={"day": dg.MetadataValue.text(day),
                                             "near_dedup": dg.MetadataValue.text("off")})
    path = release.report_dir(day)
    return _verified(day, "report", path, lambda: verify_report(path).summary())


@dg.asset_check(asset=MIXTURE, blocking=True)
def mixture_verify(context: dg.AssetCheckExecutionContext,
                   release: ReleaseSettings) -> dg.AssetCheckResult:
    """The day's mixture passes `mixture verify` and its release record its checksums."""
    day = _check_day(context, MIXTURE)
    if day is None:
        return _nothing_to_verify(MIXTURE)
    path = release.mixture_dir(day)
    record = release.release_dir(day)

    def verify() -> str:
        if not path.is_dir():
            raise NearDedupError(f"mixture {path}: does not exist")
        summary = verify_mixture(path).summary()
        verify_checksums(record, "release record")
        return summary

    return _verified(day, "mixture", path, verify)


@dg.asset_check(asset=SCAN_REPORT, blocking=True)
def exclusion_rates(context: dg.AssetCheckExecutionContext,
                    release: ReleaseSettings) -> dg.AssetCheckResult:
    """No domain or package lost more than NEAR_DEDUP_MAX_EXCLUSION_RATE of its samples, and
    no domain's exclusion rate rose by more than NEAR_DEDUP_MAX_RATE_JUMP since the previous
    release day. A failure warns; with NEAR_DEDUP_RATE_CHECKS_BLOCKING=true it is an error
    that stops the day's mixture."""
    if not context.has_partition_key:
        return dg.AssetCheckResult(passed=True, description="no release day: run it with a "
                                   "day's scan_report", severity=dg.AssetCheckSeverity.WARN)
    day = context.partition_key
    if not release.near_dedup_enabled:
        return dg.AssetCheckResult(passed=True, description="near-dedup is off: no report",
                                   metadata={"day": dg.MetadataValue.text(day)})
    try:
        return exclusion_rate_result(release, day, RELEASE_DAYS.get_partition_keys())
    except NearDedupError as exc:
        return dg.AssetCheckResult(passed=False, description=str(exc),
                                   metadata={"day": dg.MetadataValue.text(day)})


RELEASE_CHECKS = [report_checksums, mixture_verify, exclusion_rates]
