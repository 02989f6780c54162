"""Release days: one daily partition per calendar day in the release timezone.

Read when the code location loads (partitions and schedules are part of the definitions, not
of a run), from the environment with the working directory's ``.env`` on top, so an edited
``.env`` counts after "Reload definitions": ``NEAR_DEDUP_START_DATE`` (first release day, ``YYYY-MM-DD``) and
``NEAR_DEDUP_TIMEZONE`` (an IANA name; release days and the schedule's cron are read in it).
The last partition is the last complete day, so the day being delivered today is released
after midnight.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import date
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import dagster as dg

from near_dedup_core.errors import NearDedupError

from near_dedup_assets.resources import current_environment

START_DATE_VAR = "NEAR_DEDUP_START_DATE"
TIMEZONE_VAR = "NEAR_DEDUP_TIMEZONE"
DEFAULT_START_DATE = "2026-11-25"
DEFAULT_TIMEZONE = "UTC"


def release_timezone(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    name = environ.get(TIMEZONE_VAR, DEFAULT_TIMEZONE)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise NearDedupError(f"{TIMEZONE_VAR}={name!r}: expected an IANA timezone name "
                             f"(UTC, Europe/Berlin, …)") from None
    return name


def release_days(environ: Mapping[str, str] | None = None) -> dg.DailyPartitionsDefinition:
    """Daily partitions from ``NEAR_DEDUP_START_DATE`` in ``NEAR_DEDUP_TIMEZONE``."""
    environ = os.environ if environ is None else environ
    start = environ.get(START_DATE_VAR, DEFAULT_START_DATE)
    try:
        date.fromisoformat(start)
    except ValueError:
        raise NearDedupError(f"{START_DATE_VAR}={start!r}: expected a date as YYYY-MM-DD") \
            from None
    return dg.DailyPartitionsDefinition(start_date=start, timezone=release_timezone(environ))


#: The partitions of every release asset, from the environment the code location loaded with.
RELEASE_DAYS = release_days(current_environment())


#: "The release day before": the partition mapping of the index's self-dependency. On the
#: first release day it maps to nothing, so the first day has no predecessor to wait for.
PREVIOUS_DAY = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)
