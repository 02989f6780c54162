"""The four release assets, partitioned by release day.

``validated_snapshot`` → ``index_and_report`` (``index_append`` and ``scan_report``) → ``mixture``.

A day's report must be frozen against the index exactly as it stands after the day's own
batch: a later day's batch would otherwise show up in it as history, and a backfill would
give other reports than releasing day by day. ``index_append`` and ``scan_report`` are
therefore one step, the multi-asset ``index_and_report``: it appends the day's batch, freezes
the report right after it and materializes both assets. Each depends on the day's
``validated_snapshot`` and on its own previous day (the index the batch is appended to; the
report the new one is compared with), so Dagster runs a backfill's days one after the other,
each day's append and report in one run.
The step runs in the ``index_writer`` pool (limit 1 in ``dagster_home/dagster.yaml``),
so runs launched by hand never write the index at the same time, and it refuses a day while
an earlier day with a snapshot is not indexed yet. It is not subsettable: a report that is
published alone would not be tied to its day's append.

Near-dedup switched off (``NEAR_DEDUP_ENABLED=false``): the graph stays the same, but
``index_and_report`` materializes both assets with a "skipped" record without touching the
index, and ``mixture`` is built from the snapshot alone, without a report.

Any `NearDedupError` of the core fails the partition with its one-line message; nothing
downstream runs for that day. A re-run of a released day that is refused (e.g. its report is
not found under a changed report root, and later days are already in the index) fails the
run the same way, but first re-asserts the day's earlier report if it still verifies: a valid
day stays materialized with it instead of turning failed. The checks that run planned then
record that they checked nothing, and why (`checks_unrun`), rather than a skipped row.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store import open_index
from near_dedup_core.site import build_site, site_of
from near_dedup_core.storage import Location, parse_location

from near_dedup_assets import audit, daily, summaries
from near_dedup_assets.checks_unrun import record_unrun_checks
from near_dedup_assets.locations import (
    checked,
    is_folder,
    local,
    location_value,
    naming,
    publish_folder,
    sibling,
    staged,
)
from near_dedup_assets.partitions import PREVIOUS_DAY, RELEASE_DAYS
from near_dedup_assets.resources import (
    ReleaseSettings,
    current_environment,
    env_name,
)

GROUP = "release"


def index_kind(environment: dict[str, str]) -> str:
    """The backend of the index that ``environment`` sets (``NEAR_DEDUP_INDEX``, else the
    default), as the UI badges ``index_append``: sqlite, postgres or iceberg."""
    return open_index(environment.get(env_name("index"),
                                      ReleaseSettings.model_fields["index"].default)).kind


#: The badge of ``index_append``, fixed when the code location loads (like the partitions).
INDEX_KIND = index_kind(current_environment())
INDEX_WRITER_POOL = "index_writer"
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
        reason = daily.no_release(release, context.partition_key)
        if reason is not None:
            context.log.info(reason)
            return dg.MaterializeResult(metadata=summaries.no_release_metadata(reason))
        pool = daily.validate_day(release, context.partition_key)
    return dg.MaterializeResult(metadata=summaries.snapshot_metadata(pool))


@dg.multi_asset(
    partitions_def=RELEASE_DAYS, group_name=GROUP, pool=INDEX_WRITER_POOL,
    specs=[
        dg.AssetSpec(INDEX_APPEND, kinds={INDEX_KIND},
                     deps=[VALIDATED_SNAPSHOT,
                           dg.AssetDep(INDEX_APPEND, partition_mapping=PREVIOUS_DAY)],
                     description="The day's packages appended to the persistent index as one "
                                 "batch (a day that is already indexed: no-op append)."),
        dg.AssetSpec(SCAN_REPORT, kinds={"json"},
                     deps=[VALIDATED_SNAPSHOT,
                           dg.AssetDep(SCAN_REPORT, partition_mapping=PREVIOUS_DAY)],
                     description="The day's near-dedup report (decisions, relations, origins), "
                                 "frozen right after the day's batch: records kept and excluded "
                                 "by split, reason and domain, history-only relations, "
                                 "similarity histogram, comparison with the previous day."),
    ],
)
def index_and_report(context: dg.AssetExecutionContext,
                     release: ReleaseSettings) -> Iterator[dg.MaterializeResult]:
    """Append the day's batch to the index, then freeze the day's report against it.

    One step, because the report must see the index exactly as it stands after the day's own
    batch. ``scan_report`` declares no same-day edge from ``index_append``: the two are
    produced together anyway, and Dagster's asset backfill refuses an inner same-day edge
    under a self-dependency ("parent index_append is requesting a different set of partitions
    from scan_report"); an edge from the previous day's ``index_append`` would pull the day
    after a backfill's range into it; and a subsettable step would let the backfill put a
    day's report into a later run than its append. As declared, a backfill runs one day's
    append and report per run, in date order.
    """
    day = context.partition_key
    with partition_failure():
        reason = daily.no_release(release, day)
        if reason is not None:
            for key in (INDEX_APPEND, SCAN_REPORT):
                yield dg.MaterializeResult(asset_key=key,
                                           metadata=summaries.no_release_metadata(reason))
            return
        if not release.near_dedup_enabled:
            yield dg.MaterializeResult(asset_key=INDEX_APPEND,
                                       metadata=summaries.disabled_metadata("index append"))
            yield dg.MaterializeResult(asset_key=SCAN_REPORT,
                                       metadata=summaries.disabled_metadata("scan"))
            return
        earlier = daily.unindexed_earlier_days(
            release, day, RELEASE_DAYS.get_partition_keys(), indexed_days(context.instance))
        if earlier:
            raise NearDedupError(
                f"release day {day}: earlier day(s) {', '.join(earlier)} have snapshots but "
                f"are not indexed yet; index appends run in day order: materialize them first "
                f"(a backfill over the range does)")
        pool = daily.open_day(release, day)
        index = daily.index_day(release, pool)
        context.log.info(index.summary())
        refused: str | None = None
        try:
            report = daily.freeze_report(release, pool)
        except NearDedupError as exc:
            kept = _earlier_valid_report(context, release, pool)
            if kept is None:
                raise
            report, refused = kept, str(exc)
        context.log.info(f"report {'already frozen' if report.reused else 'frozen'}: "
                         f"{report.path}")
        report_metadata = summaries.report_metadata(report, pool)
        previous = audit.previous_report(release, day, RELEASE_DAYS.get_partition_keys())
        report_metadata.update(audit.comparison_metadata(report.folder, previous))
        compared = "vs_previous_config_changed" in report_metadata
        site = report_site(report, previous if compared else None)
        report_metadata["site"] = location_value(site.child("index.html"))
    index_metadata = summaries.index_metadata(index, report)
    if refused is not None:
        stands = dg.MetadataValue.text(f"refused: {refused}; the day's earlier report "
                                       f"{report.path} stands (verified again)")
        index_metadata["rerun"] = report_metadata["rerun"] = stands
    yield dg.MaterializeResult(asset_key=INDEX_APPEND, metadata=index_metadata)
    yield dg.MaterializeResult(asset_key=SCAN_REPORT, metadata=report_metadata)
    if refused is not None:
        reason = f"{refused} (the day's earlier report {report.path} stands)"
        record_unrun_checks(context, f"this run was refused: {reason}")
        with partition_failure():
            raise NearDedupError(reason)


def indexed_days(instance: dg.DagsterInstance) -> set[str]:
    """Release days whose latest ``index_append`` materialization is not "no release": their
    batch is in the index (or near-dedup was off that day). A day materialized without a
    snapshot whose snapshot arrived later is therefore not indexed yet."""
    latest: dict[str, bool] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(INDEX_APPEND, limit=1000, cursor=cursor)
        for record in page.records:  # newest first: the first of a day is its latest
            materialization = record.asset_materialization
            if materialization is not None and materialization.partition is not None:
                latest.setdefault(materialization.partition,
                                  summaries.NO_RELEASE not in materialization.metadata)
        if not page.has_more:
            return {day for day, indexed in latest.items() if indexed}
        cursor = page.cursor


def report_site(report: daily.ReportOutcome, against: Location | None) -> Location:
    """The reviewers' static site of the report (`report html`), next to it as
    ``<report>-site``: built once (on object storage: built locally, then published), and
    an existing site must be the one of this report."""
    site = sibling(report.path, f"{report.path.name}-site")

    def build(out: Path) -> None:
        build_site(report.folder, out, against=None if against is None else local(against))

    path = site.local_path
    if path is not None:
        if not path.exists():
            build(path)
        elif not site_of(path, report.folder):
            raise NearDedupError(f"site {site} was built from another report than "
                                 f"{report.path}; move it away to rebuild it")
        return site
    if not site.exists():
        with staged(site, lambda s: s) as folder, naming(report.path, report.folder):
            build(folder)
            publish_folder(folder, site)
    elif not checked(site, lambda folder: site_of(folder, report.folder)):
        raise NearDedupError(f"site {site} was built from another report than "
                             f"{report.path}; move it away to rebuild it")
    return site


def _earlier_valid_report(context: dg.AssetExecutionContext, release: ReleaseSettings,
                          pool: daily.DayPool) -> daily.ReportOutcome | None:
    """The report of the day's latest materialization, if it still verifies and still fits
    the day's inputs and config; None otherwise.

    A re-run that is refused (e.g. after the report root was changed, a rescan of a day that
    later days were appended after) then re-asserts that report before failing: the day
    stays materialized with its valid report, and the run still fails with the refusal."""
    [record] = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=SCAN_REPORT, asset_partitions=[pool.day]),
        limit=1).records or [None]
    if record is None or record.asset_materialization is None:
        return None
    entry = record.asset_materialization.metadata.get("report")
    if entry is None:
        return None
    path = parse_location(str(entry.value))
    try:
        return daily.reuse_report(path, pool, release.dedup_config())
    except NearDedupError:
        return None


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
        reason = daily.no_release(release, day)
        if reason is not None:
            context.log.info(reason)
            return dg.MaterializeResult(metadata=summaries.no_release_metadata(reason))
        pool = daily.open_day(release, day)
        report = release.report_dir(day) if release.near_dedup_enabled else None
        if report is not None and not is_folder(report):
            raise NearDedupError(f"release day {day}: no frozen report at {report}; "
                                 f"materialize scan_report for this day first")
        outcome = daily.build_day_mixture(release, pool, report)
        record, record_reused = daily.write_release_record(release, pool, report, outcome)
    context.log.info(f"mixture {'kept' if outcome.reused else 'built'}: {outcome.path}; "
                     f"release record {record}")
    return dg.MaterializeResult(metadata=summaries.mixture_metadata(outcome, record,
                                                                    record_reused))


RELEASE_ASSETS = [validated_snapshot, index_and_report, mixture]
