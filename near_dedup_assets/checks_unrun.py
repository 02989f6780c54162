"""The checks a run planned and will not execute, recorded as failed with the reason.

Dagster records every check a run plans (one row per check and day, "planned"); a row whose
check never ran stays so, and the UI shows it as skipped (or, in a failed run, as an
execution failure) without a word on why: beside a day that a refused re-run left
materialized with its earlier, valid report, that reads like a check that ran and found
nothing to do. A step that stops the run records, for each check still planned, a failed
evaluation whose description says that nothing was checked and why; the check's history
then shows that row, red, with the reason, and never green.
"""

from collections.abc import Iterator

import dagster as dg


def _planned(context: dg.AssetExecutionContext) -> Iterator[tuple[dg.AssetCheckKey, str | None]]:
    """(check, day) of every check evaluation this run planned and has not recorded yet."""
    logs = context.instance.all_logs(
        context.run.run_id, of_type={dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
                                 dg.DagsterEventType.ASSET_CHECK_EVALUATION})
    done = set()
    for entry in logs:
        event = entry.dagster_event
        if event is not None and event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            data = event.asset_check_evaluation_data
            done.add((data.asset_check_key, data.partition))
    for entry in logs:
        event = entry.dagster_event
        if event is None or event.event_type != dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED:
            continue
        planned = event.asset_check_planned_data
        subset = planned.partitions_subset
        for day in subset.get_partition_keys() if subset is not None else [None]:
            if (planned.asset_check_key, day) not in done:
                yield planned.asset_check_key, day


def record_unrun_checks(context: dg.AssetExecutionContext, reason: str) -> int:
    """Record every check this run planned and has not run as failed: "not checked:
    ``reason``". Returns how many were recorded."""
    count = 0
    for key, day in list(_planned(context)):
        context.log_event(dg.AssetCheckEvaluation(
            asset_key=key.asset_key, check_name=key.name, passed=False, partition=day,
            description=f"not checked: {reason}",
            metadata={"day": dg.MetadataValue.text(day or ""),
                      "not_checked": dg.MetadataValue.text(reason)}))
        count += 1
    return count
