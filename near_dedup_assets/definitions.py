"""The code location of the daily release: `dg dev` in the project root loads `defs`.

Runs execute their steps in one process (`in_process_executor`): a day's steps form a chain,
and the heavy work already uses ``NEAR_DEDUP_WORKERS`` processes inside the core, so a
process per step would only add start-up time. Days run in parallel as separate runs.

The ``release`` resource reads the ``NEAR_DEDUP_*`` settings when each run starts (an edited
`.env` counts from the next run on); they are also read and validated here, so a bad value
stops the code location from loading with a one-line message naming the variable.
"""

from __future__ import annotations

import dagster as dg

from near_dedup_assets.resources import one_line_when_validating

with one_line_when_validating():  # the modules below read the settings that shape the graph
    from near_dedup_assets.assets import RELEASE_ASSETS
    from near_dedup_assets.checks import rate_checks_blocking, release_checks
    from near_dedup_assets.contamination import (
        contamination_settings_from_env,
        with_contamination,
    )
    from near_dedup_assets.jobs import daily_release, schedule_from_env
    from near_dedup_assets.maintenance import index_maintenance
    from near_dedup_assets.resources import (
        ReleaseSettings,
        current_environment,
        release_settings_at_run_start,
        settings_from_env,
    )

def build_defs(settings: ReleaseSettings | dg.ResourceDefinition,
               schedule: dg.ScheduleDefinition | None = None,
               contamination: tuple[bool, bool] = (False, False),
               rates_blocking: bool = False) -> dg.Definitions:
    """The release graph with the given settings or settings resource (and schedule, if any);
    ``contamination`` = (enabled, blocking) adds the contamination step
    (``NEAR_DEDUP_EVALS``); ``rates_blocking`` makes the exclusion-rate check blocking."""
    assets, checks = [*RELEASE_ASSETS, index_maintenance], release_checks(rates_blocking)
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


with one_line_when_validating():
    settings_from_env(current_environment())  # validated when the code location loads
    defs = build_defs(release_settings_at_run_start,
                      schedule_from_env(current_environment()),
                      contamination_settings_from_env(current_environment()),
                      rate_checks_blocking(current_environment()))
