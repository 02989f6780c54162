"""The four release assets, partitioned by release day.

``validated_snapshot`` → ``index_append`` → ``scan_report`` → ``mixture``.

A day's report must be frozen against the index exactly as it stands after the day's own
batch: a later day's batch would otherwise show up in it as history, and a backfill would
give other reports than releasing day by day. Dagster runs a backfill's appends one after
the other (``index_append`` depends on its own previous day) but schedules the downstream
assets of a day freely, so the append step also freezes the day's report before it
finishes. ``scan_report`` then publishes that frozen report: it checks that it belongs to the
day's inputs and config and attaches what it found; if the folder is missing it scans again,
refusing when the index already holds later days. The append step runs in the
``sqlite_index_writer`` pool (limit 1 in ``dagster_home/dagster.yaml``), so runs launched by
hand never write the index at the same time, and it refuses a day while an earlier day with
a snapshot is not indexed yet.

Near-dedup switched off (``NEAR_DEDUP_ENABLED=false``): the graph stays the same, but
``index_append`` and ``scan_report`` materialize a "skipped" record without touching the
index, and ``mixture`` is built from the snapshot alone, without a report.

Any `NearDedupError` of the core fails the partition with its one-line message; nothing
downstream runs for that day.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from near_dedup_core.errors import NearDedupError

from near_dedup_assets import audit, daily, summaries
from near_dedup_assets.partitions import PREVIOUS_DAY, RELEASE_DAYS
from near_dedup_assets.resources import ReleaseSettings

GROUP = "release"
INDEX_WRITER_POOL = "sqlite_index_writer"
VALIDATED_SNAPSHOT = dg.AssetKey("validated_snapshot")
INDEX_APPEND = dg.AssetKey("index_append")
SCAN_REPORT = dg.AssetKey("scan_report")
MIXTURE = dg.AssetKey("mixture")


class ReleaseDayFailed(dg.Failure):
    """A release day stopped on bad input or state; the description is the core's one line.

    Dagster shows a step failure as the exception's type and message, then its stack trace.
    The one-line reason is therefore also logged as an error just before the failure (the
    first red line of the run's log) and attached as ``reason`` metadata, which the UI shows
    above the stack trace; the stack of an expected failure is Dagster's, not the problem.
    """


@contextmanager
def partition_failure() -> Iterator[None]:
    """Turn a core error into a Dagster failure that carries the one-line message."""
    try:
        yield
    except NearDedupError as exc:
        reason = str(exc)
        dg.get_dagster_logger().error(reason)
        raise ReleaseDayFailed(description=reason, allow_retries=False,
                               metadata={"reason": dg.MetadataValue.text(reason),
                                         "exit_code": exc.exit_code}) from None


@dg.asset(partitions_def=RELEASE_DAYS, group_name=GROUP, kinds={"json"})
def validated_snapshot(context: dg.AssetExecutionContext,
                       release: ReleaseSettings) -> dg.MaterializeResult:
    """The day's snapshot packages, fully validated (manifests, checksums, every line, refs).

    The input pool of a day is every package folder in the day's snapshot folder. A missing
    folder or an invalid package fails the day with the validator's message.
    """
    with partition_failure():
        pool = daily.validate_day(release, context.partition_key)
    return dg.MaterializeResult(metadata=summaries.snapshot_metadata(pool))


@dg.asset(
    partitions_def=RELEASE_DAYS, group_name=GROUP, kinds={"sqlite"}, pool=INDEX_WRITER_POOL,
    deps=[VALIDATED_SNAPSHOT, dg.AssetDep(INDEX_APPEND, partition_mapping=PREVIOUS_DAY)],
)
def index_append(context: dg.AssetExecutionContext,
                 release: ReleaseSettings) -> dg.MaterializeResult:
    """The day's packages appended to the persistent index as one batch, and the day's report
    frozen right after it (a day that is already indexed: no-op append, same report)."""
    day = context.partition_key
    with partition_failure():
        if not release.near_dedup_enabled:
            return dg.MaterializeResult(metadata=summaries.disabled_metadata("index append"))
        earlier = daily.unindexed_earlier_days(
            release, day, RELEASE_DAYS.get_partition_keys(),
            context.instance.get_materialized_partitions(INDEX_APPEND))
        if earlier:
            raise NearDedupError(
                f"release day {day}: earlier day(s) {', '.join(earlier)} have snapshots but "
                f"are not indexed yet; index appends run in day order: materialize them first "
                f"(a backfill over the range does)")
        pool = daily.open_day(release, day)
        result = daily.index_day(release, pool)
        context.log.info(result.summary())
        report = daily.freeze_report(release, pool)
    context.log.info(f"report {'already frozen' if report.reused else 'frozen'}: {report.path}")
    return dg.MaterializeResult(metadata=summaries.index_metadata(result, report))


@dg.asset(partitions_def=RELEASE_DAYS, group_name=GROUP, kinds={"json"}, deps=[INDEX_APPEND])
def scan_report(context: dg.AssetExecutionContext,
                release: ReleaseSettings) -> dg.MaterializeResult:
    """The day's frozen near-dedup report (decisions, relations, origins): records kept and
    excluded by split, reason and domain, history-only relations, similarity histogram."""
    day = context.partition_key
    with partition_failure():
        if not release.near_dedup_enabled:
            return dg.MaterializeResult(metadata=summaries.disabled_metadata("scan"))
        pool = daily.open_day(release, day)
        report = daily.freeze_report(release, pool)
        metadata = summaries.report_metadata(report, pool)
        metadata.update(audit.comparison_metadata(report.path, audit.previous_report(
            release, day, RELEASE_DAYS.get_partition_keys())))
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(partitions_def=RELEASE_DAYS, group_name=GROUP, kinds={"json"}, deps=[SCAN_REPORT])
def mixture(context: dg.AssetExecutionContext, release: ReleaseSettings) -> dg.MaterializeResult:
    """The day's mixture package built on the frozen report (near-dedup off: without one),
    and the day's release record pointing at inputs, report and mixture."""
    return mixture_for_day(context, release)


def mixture_for_day(context: dg.AssetExecutionContext,
                    release: ReleaseSettings) -> dg.MaterializeResult:
    """The work of ``mixture`` (also run by its variant after ``contamination_report``)."""
    day = context.partition_key
    with partition_failure():
        pool = daily.open_day(release, day)
        report = release.report_dir(day) if release.near_dedup_enabled else None
        if report is not None and not report.is_dir():
            raise NearDedupError(f"release day {day}: no frozen report at {report}; "
                                 f"materialize scan_report for this day first")
        outcome = daily.build_day_mixture(release, pool, report)
        record, record_reused = daily.write_release_record(release, pool, report, outcome)
    context.log.info(f"mixture {'kept' if outcome.reused else 'built'}: {outcome.path}; "
                     f"release record {record}")
    return dg.MaterializeResult(metadata=summaries.mixture_metadata(outcome, record,
                                                                    record_reused))


RELEASE_ASSETS = [validated_snapshot, index_append, scan_report, mixture]
