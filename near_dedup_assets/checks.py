"""Asset checks: the published report and mixture of a day still verify, and the day's
exclusion rates stay within bounds.

Every check is partitioned by release day, like its asset: it runs for one day and its result
is recorded for that day, so the check history has a partition per row. The checks tab's
"Execute all" launches the checks without a day: each then checks the latest released day of
its asset and says so (metadata ``executed``), so the check's latest result is a real one
(before any release: a warning that nothing was checked; it never passes). A day without a
release (no snapshot folder, nothing published) passes, saying so. Partitioned
checks are a preview feature of Dagster 1.13 (it warns so once, here, when they are defined);
the webserver's execute path, the daily runs and backfills record them per partition
(tests/test_webserver.py, tests/test_assets.py).

`report_checksums` and `mixture_verify` are blocking: a failing report check stops the day's
mixture from being built, a failing mixture check fails the run. They are thin wrappers
around the core's `report verify` and `mixture verify` (checksums and consistency, no index
needed); the failure description is the core's one-line message.

`no_taken_down_content` (blocking) compares every record of the day's mixture with the
takedowns in force in the index when the check runs (`takedown check`, docs/takedowns.md):
the day's scan applied those recorded before it without any setting, and a takedown recorded
since fails the check until the mixture is rebuilt from a new scan.

`exclusion_rates` (docs/audit.md) watches the report's exclusion rates by domain and package,
also against the previous release day. It warns; with ``NEAR_DEDUP_RATE_CHECKS_BLOCKING=true``
(read when the code location loads, like the graph itself) it is an error and blocking, and
the UI's badge says which.
"""

import os
import warnings
from collections.abc import Callable, Mapping

import dagster as dg

from near_dedup_core.errors import NearDedupError
from near_dedup_core.mixture import verify_mixture
from near_dedup_core.mixture.takedowns import check_mixture_takedowns
from near_dedup_core.report import verify_report
from near_dedup_core.storage import Location, in_place

from near_dedup_assets import daily
from near_dedup_assets.assets import MIXTURE, SCAN_REPORT
from near_dedup_assets.audit import exclusion_rate_result
from near_dedup_assets.locations import checked, is_folder, location_value
from near_dedup_assets.partitions import RELEASE_DAYS
from near_dedup_assets.resources import ReleaseSettings, current_environment, parse_flag

RATE_CHECKS_BLOCKING_VAR = "NEAR_DEDUP_RATE_CHECKS_BLOCKING"


def for_release_day(context: dg.AssetCheckExecutionContext, release: ReleaseSettings,
                    asset: dg.AssetKey, check_day: Callable[[str], dg.AssetCheckResult]
                    ) -> dg.AssetCheckResult | dg.Output:
    """``check_day`` for the run's release day; executed without one (the checks tab's
    "Execute all" launches the checks without a day), for the latest released day of
    ``asset``, recorded as that day's result, so that the check's latest result is a real one
    for a real day. The run's own row (no day) records which day was checked. Before any
    release nothing is checked: a warning, never a pass.

    The checks that return this have no return annotation: Dagster takes an ``Output`` from a
    check only when its annotation is none or ``Output``."""
    if context.has_partition_key:
        return check_day(context.partition_key)
    day = latest_released_day(context, release, asset)
    if day is None:
        result = dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                     description="no release day chosen and no day released "
                                                 "yet: nothing was checked")
        executed = "without a release day, and no day has been released yet"
    else:
        result = check_day(day)
        executed = f"without a release day: checked the latest released day, {day}"
    [spec] = context.check_specs

    metadata = {**result.metadata, "executed": dg.MetadataValue.text(executed)}

    def record(partition: str | None, description: str | None, entries: dict) -> None:
        # the step logs check evaluations as it does materializations (checks_unrun too)
        context.op_execution_context.log_event(dg.AssetCheckEvaluation(  # type: ignore[arg-type]
            asset_key=spec.asset_key, check_name=spec.name, passed=result.passed,
            severity=result.severity, description=description, partition=partition,
            metadata=entries))

    if day is None:
        record(None, result.description, metadata)
        return dg.Output(None)
    # the run's own row points at the day's; its numbers stay on the day's row only, so the
    # check's plots (one point per evaluation, by time) do not count them twice
    record(None, f"executed {executed}: {result.description}",
           {k: v for k, v in metadata.items()
            if not isinstance(v, dg.FloatMetadataValue | dg.IntMetadataValue)})
    record(day, result.description, metadata)
    return dg.Output(None)


def latest_released_day(context: dg.AssetCheckExecutionContext, release: ReleaseSettings,
                        asset: dg.AssetKey) -> str | None:
    """The latest materialized day of ``asset`` that is not a day without a release."""
    for day in sorted(context.instance.get_materialized_partitions(asset), reverse=True):
        if not daily.is_no_release_day(release, day):
            return day
    return None


def no_release_result(release: ReleaseSettings, day: str,
                      severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
                      ) -> dg.AssetCheckResult | None:
    """The result on a day without a release (no snapshot folder, nothing published): it
    passes, saying so; None on a released day."""
    if not daily.is_no_release_day(release, day):
        return None
    reason = daily.no_release(release, day)
    return dg.AssetCheckResult(passed=True, severity=severity,
                               description=f"{reason}: nothing was published that day",
                               metadata={"day": dg.MetadataValue.text(day),
                                         "no_release": dg.MetadataValue.text(str(reason))})


def near_dedup_off_result(release: ReleaseSettings, day: str, missing: str,
                          severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
                          ) -> dg.AssetCheckResult | None:
    """The result of a check of the report or the index while near-dedup is off: it passes,
    saying what there is not (``missing``); None while near-dedup is on."""
    if release.near_dedup_enabled:
        return None
    return dg.AssetCheckResult(passed=True, severity=severity,
                               description=f"near-dedup is off: {missing}",
                               metadata={"day": dg.MetadataValue.text(day),
                                         "near_dedup": dg.MetadataValue.text("off")})


def release_day_check(**kwargs) -> Callable:
    """``dg.asset_check`` partitioned by release day (its PreviewWarning silenced: known)."""
    def decorate(fn: Callable) -> dg.AssetChecksDefinition:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            return dg.asset_check(partitions_def=RELEASE_DAYS, **kwargs)(fn)
    return decorate


def _verified(day: str, label: str, path: Location,
              verify: Callable[[], str]) -> dg.AssetCheckResult:
    metadata = {"day": dg.MetadataValue.text(day), label: location_value(path)}
    try:
        summary = verify()
    except NearDedupError as exc:
        problem = dg.MetadataValue.text(str(exc))
        return dg.AssetCheckResult(passed=False, description=str(exc),
                                   metadata={**metadata, "problem": problem})
    return dg.AssetCheckResult(passed=True, description=summary,
                               metadata={**metadata, "summary": dg.MetadataValue.text(summary)})


@release_day_check(asset=SCAN_REPORT, blocking=True)
def report_checksums(context: dg.AssetCheckExecutionContext,
                     release: ReleaseSettings):
    """The day's report matches its checksums.sha256 and is internally consistent."""
    def check_day(day: str) -> dg.AssetCheckResult:
        done = no_release_result(release, day) or near_dedup_off_result(release, day,
                                                                        "no report")
        if done is not None:
            return done
        path = release.report_dir(day)
        return _verified(day, "report", path, lambda: checked(
            path, lambda folder: in_place(verify_report(folder).summary(), folder, path)))

    return for_release_day(context, release, SCAN_REPORT, check_day)


@release_day_check(asset=MIXTURE, blocking=True)
def mixture_verify(context: dg.AssetCheckExecutionContext,
                   release: ReleaseSettings):
    """The day's mixture passes `mixture verify`; its release record passes its checksums and
    its release.json reads as a `ReleaseRecord`."""
    def check_day(day: str) -> dg.AssetCheckResult:
        done = no_release_result(release, day)
        if done is not None:
            return done
        path = release.mixture_dir(day)
        record = release.release_dir(day)

        def verify() -> str:
            if not is_folder(path):
                raise NearDedupError(f"mixture {path}: does not exist")
            summary = checked(path, lambda folder: in_place(verify_mixture(folder).summary(),
                                                            folder, path))
            checked(record, daily.verify_release_record)
            return summary

        return _verified(day, "mixture", path, verify)

    return for_release_day(context, release, MIXTURE, check_day)


@release_day_check(asset=MIXTURE, blocking=True,
                   description="No record of the day's mixture is a text, or a near copy of a "
                               "text, that a takedown in force in the index takes down "
                               "(docs/takedowns.md).")
def no_taken_down_content(context: dg.AssetCheckExecutionContext,
                          release: ReleaseSettings):
    """The day's mixture holds nothing the takedowns in force in the index take down."""
    def check_day(day: str) -> dg.AssetCheckResult:
        done = no_release_result(release, day) or near_dedup_off_result(
            release, day, "no index, no takedowns")
        if done is not None:
            return done
        path = release.mixture_dir(day)

        def verify() -> str:
            from near_dedup_core.index_store import open_index

            if not is_folder(path):
                raise NearDedupError(f"mixture {path}: does not exist")
            index = open_index(release.index_path)
            return checked(path, lambda folder: in_place(
                check_mixture_takedowns(folder, index), folder, path))

        return _verified(day, "mixture", path, verify)

    return for_release_day(context, release, MIXTURE, check_day)


def exclusion_rates_check(blocking: bool) -> dg.AssetChecksDefinition:
    """The exclusion-rate check; ``blocking``: an ERROR that stops the day's mixture, else a
    WARN that does not (the definition's badge and the result's severity agree)."""
    severity = dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN

    @release_day_check(
        asset=SCAN_REPORT, name="exclusion_rates", blocking=blocking,
        description="No domain or package lost more than NEAR_DEDUP_MAX_EXCLUSION_RATE of its "
                    "samples, and no domain's exclusion rate rose by more than "
                    "NEAR_DEDUP_MAX_RATE_JUMP since the previous release day. "
                    + ("Blocking: a failure is an error that stops the day's mixture "
                       f"({RATE_CHECKS_BLOCKING_VAR}=true)." if blocking else
                       "A failure warns; the mixture is still built "
                       f"({RATE_CHECKS_BLOCKING_VAR}=true makes it blocking)."))
    def exclusion_rates(context: dg.AssetCheckExecutionContext,
                        release: ReleaseSettings):
        def check_day(day: str) -> dg.AssetCheckResult:
            done = no_release_result(release, day, severity) or near_dedup_off_result(
                release, day, "no report", severity)
            if done is not None:
                return done
            try:
                return exclusion_rate_result(release, day, RELEASE_DAYS.get_partition_keys(),
                                             severity)
            except NearDedupError as exc:
                return dg.AssetCheckResult(passed=False, severity=severity,
                                           description=str(exc),
                                           metadata={"day": dg.MetadataValue.text(day)})

        return for_release_day(context, release, SCAN_REPORT, check_day)

    return exclusion_rates


def rate_checks_blocking(environ: Mapping[str, str] | None = None) -> bool:
    """``NEAR_DEDUP_RATE_CHECKS_BLOCKING`` (default false), read when the code location loads."""
    environ = os.environ if environ is None else environ
    return parse_flag(RATE_CHECKS_BLOCKING_VAR, environ.get(RATE_CHECKS_BLOCKING_VAR, "false"))


def release_checks(rates_blocking: bool = False) -> list[dg.AssetChecksDefinition]:
    return [report_checksums, mixture_verify, no_taken_down_content,
            exclusion_rates_check(rates_blocking)]


#: The checks of the code location, with the blocking setting it loaded with.
RELEASE_CHECKS = release_checks(rate_checks_blocking(current_environment()))
