"""The daily release job and its schedule.

``NEAR_DEDUP_SCHEDULE_CRON`` (default ``0 2 * * *``) is read in the release timezone; each
tick releases the last complete day before it (a tick at 02:00 on the 28th releases the 27th).
The schedule is created stopped unless ``NEAR_DEDUP_SCHEDULE_RUNNING=true``; either way it
only fires while the Dagster daemon runs (`dg dev` starts one).

The schedule is written out rather than made by ``dg.build_schedule_from_partitioned_job``:
that helper refuses a free cron for a time-partitioned job (it takes only minute, hour and
day parameters), and its skip reason before the first day is the generic "has no
partitions" instead of naming the day and the first release day.
"""

import os
from collections.abc import Mapping
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import dagster as dg

from near_dedup_core.errors import NearDedupError

from near_dedup_assets.assets import GROUP
from near_dedup_assets.partitions import RELEASE_DAYS
from near_dedup_assets.resources import parse_flag

CRON_VAR = "NEAR_DEDUP_SCHEDULE_CRON"
RUNNING_VAR = "NEAR_DEDUP_SCHEDULE_RUNNING"
DEFAULT_CRON = "0 2 * * *"
SCHEDULE_NAME = "daily_release_schedule"

daily_release = dg.define_asset_job(
    "daily_release",
    selection=dg.AssetSelection.groups(GROUP),
    description="One release day: validate the snapshot, append it to the index, freeze the "
                "report, build the mixture; with the report and mixture checks.",
)


def release_day_for_tick(scheduled: datetime, timezone: str) -> str:
    """The last complete release day before a tick, in the release timezone."""
    local = scheduled.astimezone(ZoneInfo(timezone))
    return (local.date() - timedelta(days=1)).isoformat()


def build_release_schedule(cron: str = DEFAULT_CRON, running: bool = False,
                           partitions: dg.DailyPartitionsDefinition = RELEASE_DAYS
                           ) -> dg.ScheduleDefinition:
    """A schedule for `daily_release` whose ticks request the day that just ended."""
    timezone = partitions.timezone
    first_day = partitions.start.date().isoformat()

    @dg.schedule(
        name=SCHEDULE_NAME, cron_schedule=cron, job=daily_release, execution_timezone=timezone,
        default_status=(dg.DefaultScheduleStatus.RUNNING if running
                        else dg.DefaultScheduleStatus.STOPPED),
        description=f"Releases the previous day ({timezone}) at '{cron}'.",
    )
    def daily_release_schedule(context: dg.ScheduleEvaluationContext):
        day = release_day_for_tick(context.scheduled_execution_time, timezone)
        if day < first_day:
            return dg.SkipReason(f"{day} is before the first release day {first_day}")
        return dg.RunRequest(run_key=day, partition_key=day)

    return daily_release_schedule


def schedule_from_env(environ: Mapping[str, str] | None = None) -> dg.ScheduleDefinition:
    environ = os.environ if environ is None else environ
    running = parse_flag(RUNNING_VAR, environ.get(RUNNING_VAR, "false"))
    cron = environ.get(CRON_VAR, DEFAULT_CRON)
    try:
        return build_release_schedule(cron, running)
    except dg.DagsterInvalidDefinitionError:
        raise NearDedupError(f"{CRON_VAR}={cron!r}: expected a cron expression of 5 fields "
                             f"(minute hour day month weekday, e.g. {DEFAULT_CRON})") from None
