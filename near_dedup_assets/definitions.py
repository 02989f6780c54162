"""The code location of the daily release: `dagster dev` in the project root loads `defs`.

Runs execute their steps in one process (`in_process_executor`): a day's steps form a chain,
and the heavy work already uses ``NEAR_DEDUP_WORKERS`` processes inside the core, so a
process per step would only add start-up time. Days run in parallel as separate runs.
"""

from __future__ import annotations

import dagster as dg

from near_dedup_assets.assets import RELEASE_ASSETS
from near_dedup_assets.checks import RELEASE_CHECKS
from near_dedup_assets.contamination import contamination_settings_from_env, with_contamination
from near_dedup_assets.jobs import daily_release, schedule_from_env
from near_dedup_assets.resources import ReleaseSettings, settings_from_env


def build_defs(settings: ReleaseSettings,
               schedule: dg.ScheduleDefinition | None = None,
               contamination: tuple[bool, bool] = (False, False)) -> dg.Definitions:
    """The release graph with the given settings (and schedule, if any); ``contamination``
    = (enabled, blocking) adds the contamination step (``NEAR_DEDUP_EVALS``)."""
    assets, checks = list(RELEASE_ASSETS), list(RELEASE_CHECKS)
    if contamination[0]:
        assets, checks = with_contamination(assets, checks, blocking=contamination[1])
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[daily_release],
        schedules=[schedule] if schedule is not None else [],
        resources={"release": settings},
        executor=dg.in_process_executor,
    )


defs = build_defs(settings_from_env(), schedule_from_env(), contamination_settings_from_env())
