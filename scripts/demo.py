"""`make demo`: the daily release of the bundled sample CPT days, end to end through Dagster.

Starts from a fresh ``data/demo``: a real Dagster instance in ``data/demo/dagster_home``
(SQLite storage, the project's ``dagster_home/dagster.yaml``), release outputs in
``data/demo/release``, and ``data/demo/.env`` with the settings used. Every day folder of
``samples/cpt`` is released in date order with the ``daily_release`` job — the run the
schedule launches each night — so later days see the earlier ones as history. Then it prints
a summary per day, where the outputs are, and how to open the UI on this instance.
"""

import os
import shutil
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # also runs from a checkout that is not pip-installed
    sys.path.insert(0, str(REPO))
DEMO = REPO / "data" / "demo"
SAMPLE_DAYS = REPO / "samples" / "cpt"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def sample_days() -> list[str]:
    days = []
    for path in sorted(SAMPLE_DAYS.iterdir()):
        try:
            date.fromisoformat(path.name)
        except ValueError:
            continue
        if path.is_dir():
            days.append(path.name)
    return days


def demo_settings(days: list[str]) -> dict[str, str]:
    out = DEMO / "release"
    return {
        "DAGSTER_HOME": str(DEMO / "dagster_home"),
        "NEAR_DEDUP_START_DATE": days[0],
        "NEAR_DEDUP_TIMEZONE": "UTC",
        "NEAR_DEDUP_SCHEDULE_CRON": "0 2 * * *",
        "NEAR_DEDUP_SCHEDULE_RUNNING": "false",
        "NEAR_DEDUP_SNAPSHOT_ROOT": str(SAMPLE_DAYS),
        "NEAR_DEDUP_SNAPSHOT_DAY_FORMAT": "%Y-%m-%d",
        "NEAR_DEDUP_KIND": "cpt",
        "NEAR_DEDUP_ENABLED": "true",
        "NEAR_DEDUP_INDEX": str(out / "index" / "cpt-near.sqlite"),
        "NEAR_DEDUP_CONFIG": str(REPO / "config" / "near-dedup.json"),
        "NEAR_DEDUP_WORKERS": "0",
        "NEAR_DEDUP_REPORT_ROOT": str(out / "reports"),
        "NEAR_DEDUP_MIXTURE_ROOT": str(out / "mixtures"),
        "NEAR_DEDUP_RELEASE_ROOT": str(out / "releases"),
        "NEAR_DEDUP_MIXTURE_TEMPLATE": str(REPO / "config" / "mixture-template.json"),
    }


def prepare(settings: dict[str, str]) -> None:
    """A fresh data/demo with its Dagster home and the .env that `dagster dev` reads there."""
    if DEMO.exists():
        shutil.rmtree(DEMO)
    home = Path(settings["DAGSTER_HOME"])
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    lines = [f"{key}={value}" for key, value in settings.items()]
    (DEMO / ".env").write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.environ.update(settings)


def rel(path: object) -> str:
    path = Path(str(path))
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def materialized(result, key: str) -> dict:
    for event in result.get_asset_materialization_events():
        if event.asset_key.to_user_string() == key:
            return {k: v.value for k, v in event.materialization.metadata.items()}
    return {}


def day_summary(day: str, result) -> list[str]:
    snap = materialized(result, "validated_snapshot")
    index = materialized(result, "index_append")
    scan = materialized(result, "scan_report")
    mix = materialized(result, "mixture")
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    packages = ", ".join(line.split("|")[1].strip() for line in snap["packages"].splitlines()[2:])
    lines = [
        (f"day {day}  {packages}: {scan['records_in']} records in, {scan['kept']} kept, "
         f"{scan['excluded']} excluded; {scan['history_only_relations']} history-only "
         f"relations, {scan['guard_blocked_relations']} kept apart by the numeric/unit guard"),
        (f"  index    batch {index['batch']}, {index['new_contents']} new texts "
         f"({rel(index['index'])})"),
        (f"  mixture  {mix['selected']}/{mix['target_records']} selected, "
         f"{mix['excluded_by_report']} excluded by the report before quotas, "
         f"{mix['retained_records']} retained validation records"),
        "  checks   " + ", ".join(f"{name} {'passed' if ok else 'FAILED'}"
                                  for name, ok in sorted(checks.items())),
        f"  report   {rel(scan['report'])}",
        f"  site     {rel(scan['site'])}",
        f"  mixture  {rel(mix['mixture'])}",
        f"  release  {rel(mix['release_record'])}",
    ]
    return lines


def main() -> int:
    days = sample_days()
    if not days:
        print(f"demo: no release day folders in {rel(SAMPLE_DAYS)}", file=sys.stderr)
        return 1
    settings = demo_settings(days)
    prepare(settings)
    # Runs read the settings of the working directory's .env when they start: use the demo's.
    os.chdir(DEMO)

    import dagster as dg

    from near_dedup_assets.definitions import defs

    print(f"near-dedup daily release demo: {len(days)} sample days from {rel(SAMPLE_DAYS)}, "
          f"through Dagster (instance {rel(settings['DAGSTER_HOME'])})\n")
    job = defs.resolve_job_def("daily_release")
    with dg.DagsterInstance.get() as instance:
        for day in days:
            result = job.execute_in_process(partition_key=day, instance=instance,
                                            run_config=QUIET, raise_on_error=False)
            if not result.success:
                failures = [e.step_failure_data.user_failure_data.description
                            if e.step_failure_data.user_failure_data else
                            e.step_failure_data.error.message.strip()
                            for e in result.all_events if e.is_step_failure]
                failed_checks = [e.description for e in result.get_asset_check_evaluations()
                                 if not e.passed]
                print(f"day {day}: release failed: {'; '.join(failures + failed_checks)}",
                      file=sys.stderr)
                return 1
            print("\n".join(day_summary(day, result)) + "\n")

    bin_dir = Path(sys.executable).parent  # the venv the demo runs in: .venv under make
    report = Path(settings["NEAR_DEDUP_REPORT_ROOT"]) / f"near-cpt-{days[-1]}"
    mixture = Path(settings["NEAR_DEDUP_MIXTURE_ROOT"]) / f"cpt-mix-{days[-1]}"
    print("Verify without the index (the CLI is the fallback), from the project root:\n"
          f"  {rel(bin_dir / 'near-dedup')} report verify {rel(report)}\n"
          f"  {rel(bin_dir / 'near-dedup')} mixture verify {rel(mixture)}\n")
    site = Path(settings["NEAR_DEDUP_REPORT_ROOT"]) / f"near-cpt-{days[-1]}-site" / "index.html"
    print("Open the reviewers' site of the last day's report in a browser (a static folder, no "
          "server;\n`near-dedup report html` writes one for any report):\n"
          f"  {site.as_uri()}\n")
    print("Open the UI on this demo instance (runs, materializations, metadata, checks):\n"
          f"  cd {rel(DEMO)} && {bin_dir / 'dagster'} dev "
          f"-m near_dedup_assets.definitions\n"
          f"  then http://127.0.0.1:3000 → Lineage; {rel(DEMO / '.env')} holds the settings.\n"
          "For the real daily release: cp .env.example .env, edit it, then `.venv/bin/dagster "
          "dev` in the project root;\nmaterialize or backfill days from the asset graph, or turn "
          "on daily_release_schedule.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
