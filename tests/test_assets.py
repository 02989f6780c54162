"""The daily release asset graph, through Dagster's own testing APIs.

Every test gets its own temporary Dagster instance (`dg.instance_for_test`) and its own
release folders; the snapshot days are small CPT packages written by `release_days`, with
near duplicates inside a day and across days so that history matters.
"""

import json
import logging
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.backfill import execute_backfill_iteration
from helpers import (
    check_results,
    executed_steps,
    make_package,
    metadata,
    settings_for,
    template,
    tree_bytes,
)

from near_dedup_core.errors import NearDedupError
from near_dedup_core.mixture import verify_mixture
from near_dedup_core.report import load_manifest, verify_report

from near_dedup_assets.assets import (
    INDEX_APPEND,
    MIXTURE,
    RELEASE_ASSETS,
    SCAN_REPORT,
    index_kind,
)
from near_dedup_assets.checks import RELEASE_CHECKS
from near_dedup_assets.definitions import build_defs, defs
from near_dedup_assets.jobs import build_release_schedule, release_day_for_tick
from near_dedup_assets.partitions import release_days
from near_dedup_assets.resources import (
    ReleaseSettings,
    current_environment,
    release_settings_at_run_start,
    settings_from_env,
)

# Materializes the Dagster release graph, day by day.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DAYS = ["2026-11-25", "2026-11-26", "2026-11-27"]
GRAPH = [*RELEASE_ASSETS, *RELEASE_CHECKS]
WORDS = ("river harbor engine column signal garden market winter copper lantern basin "
         "meadow archive ledger canyon orbit pillar valley harvest compass beacon quarry "
         "thunder mirror summit ribbon anchor velvet marble timber falcon glacier saddle "
         "orchard cable furnace meadow prism tunnel island forest station bridge shadow").split()


# --------------------------------------------------------------------------- sample days


def paragraph(rng: random.Random, words: int = 70) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text.capitalize() + "."


def edit_word(text: str, index: int, word: str = "zeppelin") -> str:
    parts = text.split(" ")
    parts[index] = word
    return " ".join(parts)


def release_days_on_disk(root: Path) -> Path:
    """Three cumulative CPT days: verbatim repeats, small edits, a number change (guard),
    exact and near duplicates inside a day, short texts, a validation split."""
    rng = random.Random(20261125)
    base = [paragraph(rng) for _ in range(10)]
    domains = ["web"] * 6 + ["books"] * 4
    fresh2 = [paragraph(rng) for _ in range(4)]
    fresh3 = [paragraph(rng) for _ in range(3)]
    numbered = "The plant shipped 4200 units in 2025 and " + paragraph(rng)

    def rec(sid, text, domain):
        return {"id": sid, "text": text, "domain": domain,
                "source": {"dataset": "test-days", "row": sid}}

    v1 = [rec(f"a{i}", t, d) for i, (t, d) in enumerate(zip(base, domains, strict=False))]
    v1 += [rec("n1", numbered, "news"), rec("s1", "Short note.", "news")]
    val1 = [rec("val0", paragraph(rng), "web"), rec("val1", base[0], "web")]
    make_package(root / DAYS[0], "cpt-v1", {"train": v1, "validation": val1})

    v2 = [rec(f"b{i}", t, d) for i, (t, d) in enumerate(zip(base[:8], domains, strict=False))]
    v2 += [rec("b8", edit_word(base[8], 5), domains[8]),
           rec("n1", numbered.replace("4200", "4300"), "news"),
           rec("c0", fresh2[0], "news"), rec("c1", fresh2[1], "web"),
           rec("c2", fresh2[2], "books"), rec("c3", fresh2[3], "books"),
           rec("c0-copy", fresh2[0], "news"), rec("c1-edit", edit_word(fresh2[1], 9), "web"),
           rec("s1", "Short note.", "news")]
    make_package(root / DAYS[1], "cpt-v2", {"train": v2, "validation": val1},
                 parents=["cpt-v1"], created_at="2026-11-26T00:00:00Z")

    v3 = [rec(f"d{i}", t, d) for i, (t, d) in enumerate(zip(base[:6], domains, strict=False))]
    v3 += [rec("d8", edit_word(base[8], 12, "quartz"), domains[8]),
           rec("e0", fresh2[0], "news"), rec("e1", edit_word(fresh2[2], 3), "books"),
           rec("f0", fresh3[0], "web"), rec("f1", fresh3[1], "web"), rec("f2", fresh3[2], "books"),
           rec("f2-edit", edit_word(fresh3[2], 20, "meteor"), "books")]
    make_package(root / DAYS[2], "cpt-v3", {"train": v3, "validation": val1},
                 parents=["cpt-v2"], created_at="2026-11-27T00:00:00Z")
    return root


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory) -> Path:
    return release_days_on_disk(tmp_path_factory.mktemp("snapshots"))


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def release(day: str, settings: ReleaseSettings, instance, selection=None):
    return dg.materialize(GRAPH, partition_key=day, resources={"release": settings},
                          instance=instance, raise_on_error=False, selection=selection)


def failure_message(result) -> str:
    [event] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    return event.step_failure_data.user_failure_data.description


def assert_reason_shown_once(result, instance) -> None:
    """The run log's error line just before the step failure is the one-line reason, and the
    failure event shows it (type, message, "reason" metadata) without a chained cause."""
    reason = failure_message(result)
    logs = instance.all_logs(result.run_id)
    failed_at = next(i for i, e in enumerate(logs) if e.dagster_event is not None
                     and e.dagster_event.event_type == dg.DagsterEventType.STEP_FAILURE)
    errors = [e.user_message for e in logs[:failed_at]
              if e.dagster_event is None and e.level == logging.ERROR]
    assert errors == [reason]
    failure = logs[failed_at].dagster_event.step_failure_data
    assert failure.error.cls_name == "ReleaseDayFailed"
    assert failure.error.message.strip().endswith(f"ReleaseDayFailed: {reason}")
    assert failure.error.cause is None and failure.error.context is None
    assert failure.user_failure_data.metadata["reason"].value == reason


def outputs(settings: ReleaseSettings, day: str) -> dict[str, dict[str, bytes]]:
    return {name: tree_bytes(path) for name, path in (
        ("report", settings.report_dir(day).local_path),
        ("mixture", settings.mixture_dir(day).local_path),
        ("release", settings.release_dir(day).local_path)) if path.exists()}


# --------------------------------------------------------------------------- definitions


def test_definitions_load_with_five_partitioned_assets_checks_job_and_schedule():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == {
        "validated_snapshot", "index_append", "scan_report", "mixture", "index_maintenance"}
    assert {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys} == {
        ("scan_report", "report_checksums"), ("scan_report", "exclusion_rates"),
        ("mixture", "mixture_verify"), ("mixture", "no_taken_down_content")}
    index_step = graph.get(INDEX_APPEND)
    assert index_step.pools == {"index_writer"}
    assert graph.get(dg.AssetKey("index_maintenance")).pools == {"index_writer"}
    assert all(graph.get(k).partitions_def == release_days() for k in graph.get_all_asset_keys())
    job = defs.resolve_job_def("daily_release")
    assert {"index_and_report", "scan_report_report_checksums",
            "mixture_mixture_verify"} <= set(job.graph.node_dict)
    assert defs.resolve_schedule_def("daily_release_schedule").cron_schedule == "0 2 * * *"


def test_settings_come_from_environment_variables_and_are_validated():
    config = str(REPO / "config" / "near-dedup.json")
    settings = settings_from_env({"NEAR_DEDUP_SNAPSHOT_ROOT": "/x", "NEAR_DEDUP_WORKERS": "3",
                                  "NEAR_DEDUP_CONFIG": config})
    assert (settings.snapshot_root, settings.workers) == ("/x", 3)
    assert settings.kind == "cpt"  # unset: the default
    typed = settings_from_env({"NEAR_DEDUP_CONFIG": config, "NEAR_DEDUP_ENABLED": "off",
                               "NEAR_DEDUP_KIND": "sft", "NEAR_DEDUP_EXECUTOR": "ray",
                               "NEAR_DEDUP_MAX_EXCLUSION_RATE": "0.25",
                               "NEAR_DEDUP_MAX_RATE_JUMP": "1"})
    assert (typed.enabled, typed.kind, typed.executor, typed.max_exclusion_rate,
            typed.max_rate_jump) == (False, "sft", "ray", 0.25, 1.0)
    for name, value, message in [
            ("NEAR_DEDUP_WORKERS", "two", "NEAR_DEDUP_WORKERS='two': expected a whole number, "
                                          "0 or more"),
            ("NEAR_DEDUP_WORKERS", "-1", "NEAR_DEDUP_WORKERS='-1': expected a whole number, "
                                         "0 or more"),
            ("NEAR_DEDUP_KIND", "pretrain", "NEAR_DEDUP_KIND='pretrain': expected one of cpt, "
                                            "sft"),
            ("NEAR_DEDUP_EXECUTOR", "gpu", "NEAR_DEDUP_EXECUTOR='gpu': expected one of local, "
                                           "ray"),
            ("NEAR_DEDUP_ENABLED", "maybe", "NEAR_DEDUP_ENABLED='maybe': expected true or false "
                                            "(also 1/0, yes/no, on/off)"),
            ("NEAR_DEDUP_MAX_EXCLUSION_RATE", "1.5", "NEAR_DEDUP_MAX_EXCLUSION_RATE='1.5': "
                                                     "expected a number from 0 to 1"),
            ("NEAR_DEDUP_MAX_RATE_JUMP", "a lot", "NEAR_DEDUP_MAX_RATE_JUMP='a lot': expected a "
                                                  "number from 0 to 1"),
            ("NEAR_DEDUP_CONFIG", "/nowhere/near-dedup.json", "/nowhere/near-dedup.json")]:
        with pytest.raises(NearDedupError, match=re.escape(message)) as raised:
            settings_from_env({"NEAR_DEDUP_CONFIG": config, name: value})
        assert "\n" not in str(raised.value)


def test_the_executor_choices_are_the_cores():
    from typing import get_args

    from near_dedup_core.workers import EXECUTORS

    assert get_args(ReleaseSettings.model_fields["executor"].annotation) == tuple(EXECUTORS)


def test_a_bad_setting_stops_the_code_location_from_loading(tmp_path):
    (tmp_path / ".env").write_text("NEAR_DEDUP_KIND=pretrain\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEAR_DEDUP_")}
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run([sys.executable, "-c", "import near_dedup_assets.definitions"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == (
        "near_dedup_core.errors.NearDedupError: NEAR_DEDUP_KIND='pretrain': expected one of "
        "cpt, sft")


@pytest.mark.parametrize("line, message", [
    ("NEAR_DEDUP_WORKERS=many", "NEAR_DEDUP_WORKERS='many': expected a whole number, 0 or more"),
    ("NEAR_DEDUP_TIMEZONE=Mars/Base", "NEAR_DEDUP_TIMEZONE='Mars/Base': expected an IANA "
                                      "timezone name (UTC, Europe/Berlin, …)"),
    ("NEAR_DEDUP_SCHEDULE_CRON=every night", "NEAR_DEDUP_SCHEDULE_CRON='every night': expected "
     "a cron expression of 5 fields (minute hour day month weekday, e.g. 0 2 * * *)")])
def test_dg_check_defs_names_a_bad_setting_in_one_line(tmp_path, line, message):
    """`dg check defs` in a project whose .env holds a bad value: one line naming the
    variable, the value and what it accepts, exit 1 (no stack trace)."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "near_dedup_assets").symlink_to(REPO / "near_dedup_assets")
    (tmp_path / ".env").write_text(f"NEAR_DEDUP_CONFIG=\n{line}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NEAR_DEDUP_") and k != "DAGSTER_HOME"}
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run([str(Path(sys.executable).with_name("dg")), "check", "defs"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    errors = [x for x in (run.stdout + run.stderr).splitlines()
              if "error" in x.lower() or "Traceback" in x or "File " in x]
    assert errors == [f"near-dedup: error: {message}"], run.stdout + run.stderr


def test_an_edited_env_file_counts_from_the_next_run(tmp_path, snapshots, instance,
                                                    monkeypatch):
    """The code location's resource reads `.env` when each run starts (no reload needed)."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("NEAR_DEDUP_")]:
        monkeypatch.delenv(name)
    env_file = tmp_path / ".env"

    def write_env(snapshot_root: Path) -> None:
        env_file.write_text(f"NEAR_DEDUP_SNAPSHOT_ROOT={snapshot_root}\n"
                            f"NEAR_DEDUP_CONFIG={REPO / 'config' / 'near-dedup.json'}\n",
                            encoding="utf-8")

    def validate_day():
        return dg.materialize(GRAPH, partition_key=DAYS[0], instance=instance,
                              resources={"release": release_settings_at_run_start},
                              raise_on_error=False,
                              selection=dg.AssetSelection.assets("validated_snapshot"))

    write_env(snapshots)
    first = validate_day()
    assert first.success
    assert metadata(first, dg.AssetKey("validated_snapshot"))["snapshot_folder"] == \
        str(snapshots / DAYS[0])
    write_env(tmp_path / "moved")
    second = validate_day()  # the new root has no folder for the day: no release that day
    assert second.success
    assert metadata(second, dg.AssetKey("validated_snapshot"))["no_release"].startswith(
        f"no release on {DAYS[0]}: no snapshot folder {tmp_path / 'moved' / DAYS[0]};")


# --------------------------------------------------------------------------- one day


def test_materialize_one_day_freezes_report_builds_mixture_and_passes_checks(
        tmp_path, snapshots, instance):
    """One day released: its report, mixture, record, metadata and checks; then the mixture
    check of that day fails on a tampered mixture."""
    settings = settings_for(tmp_path, snapshots)
    result = release(DAYS[0], settings, instance)
    assert result.success
    checks = check_results(result)
    assert checks["report_checksums"].passed and checks["mixture_verify"].passed

    report = settings.report_dir(DAYS[0]).local_path
    assert verify_report(report).counts["samples"] == 14
    assert verify_mixture(settings.mixture_dir(DAYS[0]).local_path).report_decisions == 14
    record = json.loads((settings.release_dir(DAYS[0]).local_path / "release.json").read_text())
    assert record["near_dedup"] is True
    assert record["format_version"] == 2  # paths relative to their roots
    assert record["report"]["path"] == report.name == "near-cpt-2026-11-25"
    assert record["mixture"]["path"] == "cpt-mix-2026-11-25"
    assert [(i["package_id"], i["path"]) for i in record["inputs"]] == \
        [("cpt-v1", "2026-11-25/cpt-v1")]

    snap = metadata(result, dg.AssetKey("validated_snapshot"))
    assert snap["records"] == 14
    index = metadata(result, INDEX_APPEND)
    assert index["batch"] == "1" and index["packages_added"] == "cpt-v1"
    assert (index["band_rows_to"], index["band_rows_folded"]) == ("bands", 0)  # a first batch
    assert index["backend"] == "SQLite" and index["index_bytes"] > 0
    scan = metadata(result, SCAN_REPORT)
    assert (scan["records_in"], scan["history_only_relations"]) == (14, 0)
    assert scan["kept"] + scan["excluded"] == 14
    assert "| web |" in scan["by_domain"] and "| validation |" in scan["by_split"]
    histogram = [r.data for r in scan["similarity_histogram"].records]  # a table of bins
    assert histogram[-1]["jaccard"] == "1.000 (exact)"
    assert sum(r["total"] for r in histogram) == scan["relations"]
    # each domain's exclusion rate, a number under a stable key (plotted over the days)
    rates = {k: v for k, v in scan.items() if k.startswith("exclusion_rate_")}
    assert set(rates) == {"exclusion_rate_web", "exclusion_rate_books", "exclusion_rate_news"}
    assert all(isinstance(v, float) and 0 <= v <= 1 for v in rates.values())
    check = checks["exclusion_rates"]
    assert check.partition == DAYS[0] and check.metadata["day"].value == DAYS[0]
    assert {k: v.value for k, v in check.metadata.items() if k in rates} == rates
    assert check.metadata["max_exclusion_rate"].value == "50%"  # a setting: text, not plotted
    assert scan["report"] == str(report)
    mix = metadata(result, MIXTURE)
    assert mix["selected"] == 8 and mix["near_dedup_report"] == str(report)
    assert "| books |" in mix["plan"]

    # the mixture check fails on a tampered mixture
    shard = settings.mixture_dir(DAYS[0]).local_path / "data" / "train" / "part-00000.jsonl"
    shard.write_bytes(shard.read_bytes() + b"\n")
    # a check alone has no partitions in a run: re-validate the snapshot along with it
    result = release(DAYS[0], settings, instance,
                     selection=dg.AssetSelection.checks_for_assets(MIXTURE)
                     | dg.AssetSelection.assets("validated_snapshot"))
    check = check_results(result)["mixture_verify"]
    assert not check.passed
    assert "data/train/part-00000.jsonl" in check.description


@pytest.fixture(scope="module")
def day_by_day(tmp_path_factory, snapshots):
    """The three days released one after the other, in one instance: (settings, instance)."""
    settings = settings_for(tmp_path_factory.mktemp("day-by-day"), snapshots)
    with dg.instance_for_test() as inst:
        for day in DAYS:
            assert release(day, settings, inst).success, day
        yield settings, inst


def test_days_in_order_see_earlier_days_as_history(day_by_day):
    settings, _ = day_by_day
    day2 = load_manifest(settings.report_dir(DAYS[1]).local_path)
    assert [p["package_id"] for p in day2["index"]["packages"]] == ["cpt-v1", "cpt-v2"]
    counts = day2["counts"]
    assert counts["history_only_relations"] > 0  # cpt-v1 is history on day 2
    assert counts["by_reason"]["exact_duplicate"] >= 1  # c0-copy
    assert counts["by_reason"]["near_duplicate"] >= 1  # c1-edit
    assert counts["blocked_relations"] >= 1  # 4200 → 4300 units
    day3 = load_manifest(settings.report_dir(DAYS[2]).local_path)
    assert day3["index"]["batches"] == 3


def test_rematerialized_day_is_a_no_op_append_with_the_same_outputs(day_by_day):
    settings, instance = day_by_day
    before = outputs(settings, DAYS[1])
    index_before = settings.index_path.read_bytes()
    again = release(DAYS[1], settings, instance)
    assert again.success
    index = metadata(again, INDEX_APPEND)
    assert index["batch"] == "none: already indexed" and index["band_rows_to"] == "none"
    assert index["packages_already_indexed"] == "cpt-v2"
    assert index["report_was_already_frozen"] is True
    assert metadata(again, MIXTURE)["reused_published_mixture"] is True
    assert outputs(settings, DAYS[1]) == before
    assert settings.index_path.read_bytes() == index_before


def test_moved_output_roots_rebuild_byte_identical_outputs(tmp_path, snapshots, instance):
    """Frozen outputs do not depend on where the roots are mounted: after moving the report,
    mixture and release roots (and pointing the settings at them), the day materializes
    again, keeping the published mixture and release record (identical checksums)."""
    first = settings_for(tmp_path / "a", snapshots)
    assert release(DAYS[0], first, instance).success
    before = outputs(first, DAYS[0])
    moved = tmp_path / "mounted-elsewhere"
    moved.mkdir()
    for name in ("reports", "mixtures", "releases"):
        shutil.move(tmp_path / "a" / name, moved / name)
    second = settings_for(tmp_path / "a", snapshots, report_root=str(moved / "reports"),
                          mixture_root=str(moved / "mixtures"),
                          release_root=str(moved / "releases"))
    result = release(DAYS[0], second, instance)
    assert result.success
    assert metadata(result, MIXTURE)["reused_published_mixture"] is True
    assert outputs(second, DAYS[0]) == before
    plan = json.loads((second.mixture_dir(DAYS[0]).local_path / "plan.json").read_text())
    assert plan["near_dedup_report"]["path"] == "near-cpt-2026-11-25"
    record = (second.release_dir(DAYS[0]).local_path / "release.json").read_text()
    assert str(moved) not in record and str(tmp_path / "a" / "reports") not in record


def test_a_lost_report_is_not_rescanned_against_later_days(tmp_path, snapshots, instance):
    settings = settings_for(tmp_path, snapshots)
    for day in DAYS[:2]:
        assert release(day, settings, instance).success
    shutil.rmtree(settings.report_dir(DAYS[0]).local_path)
    result = release(DAYS[0], settings, instance)
    assert not result.success
    assert failure_message(result).startswith(
        f"release day {DAYS[0]}: index {settings.index_path} already holds packages appended "
        f"after this day (cpt-v2)")
    # no staging folder left behind (each day's site of `report html` sits next to its report)
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()
                  if not p.name.endswith("-site")) == [f"near-cpt-{DAYS[1]}"]


def test_a_refused_rerun_after_a_root_change_leaves_the_day_valid(tmp_path, snapshots,
                                                                   instance):
    """The report root changed, a day that later days depend on re-run: the rescan is refused
    (the run fails with the reason), but the day's earlier report still verifies, so the day
    stays materialized with it instead of turning failed."""
    settings = settings_for(tmp_path, snapshots)
    for day in DAYS[:2]:
        assert release(day, settings, instance).success
    moved = settings_for(tmp_path, snapshots, report_root=str(tmp_path / "new-reports"))
    result = release(DAYS[0], moved, instance)
    assert not result.success
    reason = failure_message(result)
    assert reason.startswith(f"release day {DAYS[0]}: index {settings.index_path} already "
                             f"holds packages appended after this day (cpt-v2)")
    assert reason.endswith(f"(the day's earlier report {settings.report_dir(DAYS[0])} stands)")
    assert "mixture" not in executed_steps(result)
    scan = metadata(result, SCAN_REPORT)
    assert scan["report"] == str(settings.report_dir(DAYS[0]))
    assert scan["rerun"].startswith("refused: ")
    for key in (INDEX_APPEND, SCAN_REPORT):  # materialized, not failed
        failed = instance.event_log_storage.\
            get_latest_asset_partition_materialization_attempts_without_materializations(key)
        assert DAYS[0] not in failed, key
    assert not (tmp_path / "new-reports" / f"near-cpt-{DAYS[0]}").exists()
    # every check the refused run planned says it checked nothing, and why; none is left
    # "planned" (shown as skipped), and the day's earlier results stay as they were
    rows = check_rows(instance, DAYS[0])
    refused_run = {check: row for check, row in rows.items() if row.run_id == result.run_id}
    assert sorted(refused_run) == ["exclusion_rates", "mixture_verify", "no_taken_down_content",
                                   "report_checksums"]
    for row in refused_run.values():
        assert row.status == AssetCheckExecutionRecordStatus.FAILED
        evaluation = row.event.dagster_event.asset_check_evaluation_data
        assert evaluation.description == f"not checked: this run was refused: {reason}"
    earlier = [r for check in GRAPH_CHECKS for r in instance.event_log_storage.
               get_asset_check_execution_history(check, limit=10)
               if r.partition == DAYS[0] and r.run_id != result.run_id]
    assert len(earlier) == 4 and all(r.status != AssetCheckExecutionRecordStatus.PLANNED
                                     for r in earlier)

    # without a valid earlier report there is nothing to keep: the day fails
    shutil.rmtree(settings.report_dir(DAYS[0]).local_path)
    result = release(DAYS[0], moved, instance)
    assert not result.success and "stands" not in failure_message(result)


GRAPH_CHECKS = [key for checks in RELEASE_CHECKS for key in checks.check_keys]


def check_rows(instance, day: str) -> dict:
    """The latest check execution record of each check for ``day``, by check name."""
    latest = {}
    for key in GRAPH_CHECKS:
        for row in instance.event_log_storage.get_asset_check_execution_history(key, limit=10):
            if row.partition == day:
                latest[key.name] = row
                break
    return latest


def test_days_out_of_order_are_refused(tmp_path, snapshots, instance):
    settings = settings_for(tmp_path, snapshots)
    result = release(DAYS[1], settings, instance)
    assert not result.success
    assert "earlier day(s) 2026-11-25 have snapshots but are not indexed yet" in \
        failure_message(result)
    assert not settings.index_path.exists()
    assert not settings.report_dir(DAYS[1]).local_path.exists()


# --------------------------------------------------------------------------- bad snapshots


def test_a_day_without_a_snapshot_is_a_day_without_a_release(tmp_path, instance):
    """No snapshot folder: every asset materializes as "no release that day" (nothing read,
    appended, scanned or built) and every check passes saying so; nothing fails."""
    settings = settings_for(tmp_path / "out", tmp_path / "snapshots")
    result = release(DAYS[0], settings, instance)
    assert result.success
    folder = tmp_path / "snapshots" / DAYS[0]
    for key in (dg.AssetKey("validated_snapshot"), INDEX_APPEND, SCAN_REPORT,
                dg.AssetKey("mixture")):
        assert metadata(result, key) == {"no_release": (
            f"no release on {DAYS[0]}: no snapshot folder {folder}; nothing was released. If "
            f"the snapshot arrives later, materialize the day again")}
    checks = check_results(result)
    assert set(checks) == {"report_checksums", "exclusion_rates", "mixture_verify",
                           "no_taken_down_content"}
    for check in checks.values():
        assert check.passed
        assert check.description == (f"no release on {DAYS[0]}: no snapshot folder {folder}: "
                                     f"nothing was published that day")
    assert not (tmp_path / "out" / "index").exists()
    assert not (tmp_path / "out" / "reports").exists()
    assert not (tmp_path / "out" / "mixtures").exists()
    assert not (tmp_path / "out" / "releases").exists()


def test_a_snapshot_that_arrives_after_its_day_is_released_before_later_days(
        tmp_path, snapshots, instance):
    """A day first materialized without its snapshot is not indexed: once the snapshot is
    there, the next day is refused until that day is materialized again, which releases it."""
    days = tmp_path / "snapshots"
    days.mkdir()
    settings = settings_for(tmp_path / "out", days)
    assert release(DAYS[0], settings, instance).success  # no snapshot yet: no release
    shutil.copytree(snapshots / DAYS[0], days / DAYS[0])
    shutil.copytree(snapshots / DAYS[1], days / DAYS[1])
    later = release(DAYS[1], settings, instance)
    assert not later.success
    assert f"earlier day(s) {DAYS[0]} have snapshots but are not indexed yet" in \
        failure_message(later)
    assert release(DAYS[0], settings, instance).success
    assert settings.report_dir(DAYS[0]).local_path.is_dir()
    assert release(DAYS[1], settings, instance).success


def test_a_released_day_whose_snapshot_was_removed_fails_instead_of_no_release(
        tmp_path, snapshots, instance):
    days = tmp_path / "snapshots"
    shutil.copytree(snapshots / DAYS[0], days / DAYS[0])
    settings = settings_for(tmp_path / "out", days)
    assert release(DAYS[0], settings, instance).success
    shutil.rmtree(days / DAYS[0])
    again = release(DAYS[0], settings, instance)
    assert not again.success
    assert failure_message(again) == (
        f"release day {DAYS[0]}: snapshot folder {days / DAYS[0]} does not exist, but the "
        f"day's report {settings.report_dir(DAYS[0])} does; restore the snapshot folder to "
        f"release the day again")
    assert executed_steps(again) == {"validated_snapshot"}


def test_invalid_snapshot_fails_with_the_validator_message(tmp_path, snapshots, instance):
    days = tmp_path / "snapshots"
    shutil.copytree(snapshots / DAYS[0], days / DAYS[0])
    shard = days / DAYS[0] / "cpt-v1" / "data" / "train" / "part-00000.jsonl"
    lines = shard.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"id": "a2", "text": 7}\n'
    shard.write_bytes(b"".join(lines))
    settings = settings_for(tmp_path / "out", days)
    result = release(DAYS[0], settings, instance)
    assert not result.success
    message = failure_message(result)
    assert message.startswith("package cpt-v1, data/train/part-00000.jsonl")
    assert "\n" not in message
    assert executed_steps(result) == {"validated_snapshot"}
    assert_reason_shown_once(result, instance)
    assert not (tmp_path / "out" / "index").exists()


def test_a_configured_limit_fails_the_day_without_writing_anything(tmp_path, snapshots,
                                                                   instance):
    config = json.loads((REPO / "config" / "near-dedup.json").read_text())
    config["max_pool_records"] = 5
    (tmp_path / "small.json").write_text(json.dumps(config))
    settings = settings_for(tmp_path, snapshots, config=str(tmp_path / "small.json"))
    result = release(DAYS[0], settings, instance)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "index_and_report"
    data = failure.step_failure_data.user_failure_data
    assert data.description.startswith("input pool has 14 records, over max_pool_records 5")
    assert data.metadata["exit_code"].value == 2
    assert not settings.index_path.exists()
    assert not (tmp_path / "reports").exists()


def test_a_template_that_sets_per_day_fields_fails_the_mixture(tmp_path, snapshots, instance):
    bad = template(tmp_path / "bad-template.json", inputs=["somewhere"])
    settings = settings_for(tmp_path, snapshots, mixture_template=str(bad))
    result = release(DAYS[0], settings, instance)
    assert not result.success
    assert failure_message(result) == (f"mixture template {bad}: 'inputs' is filled in per "
                                       f"release day; remove it from the template")
    assert not (tmp_path / "mixtures").exists() and not (tmp_path / "releases").exists()


# --------------------------------------------------------------------------- checks


def test_report_check_fails_on_a_tampered_report_and_blocks_the_mixture(
        tmp_path, snapshots, instance):
    settings = settings_for(tmp_path, snapshots)
    first = release(DAYS[0], settings, instance,
                    selection=dg.AssetSelection.assets("validated_snapshot", INDEX_APPEND,
                                                       SCAN_REPORT))
    assert first.success
    decisions = settings.report_dir(DAYS[0]).local_path / "decisions.jsonl"
    decisions.write_bytes(decisions.read_bytes().replace(b'"keep"', b'"exclude"', 1))
    tampered = tree_bytes(settings.report_dir(DAYS[0]).local_path)

    result = release(DAYS[0], settings, instance,
                     selection=dg.AssetSelection.checks_for_assets(SCAN_REPORT)
                     | dg.AssetSelection.assets(MIXTURE))
    assert not result.success
    check = check_results(result)["report_checksums"]
    assert not check.passed
    assert "decisions.jsonl does not match its sha256" in check.description
    assert "mixture" not in executed_steps(result)
    assert not settings.mixture_dir(DAYS[0]).local_path.exists()

    again = release(DAYS[0], settings, instance)  # a frozen report is never replaced
    assert not again.success
    assert "move" in failure_message(again) and "away to rescan" in failure_message(again)
    assert tree_bytes(settings.report_dir(DAYS[0]).local_path) == tampered


def as_format_1(settings: ReleaseSettings, folder: Path) -> None:
    """Rewrite the release record ``folder`` as the release wrote it before format 2 (up to
    9d6d5ea): ``format_version`` 1, every path as the release was given it (absolute), the
    day's mixture.json the mixture config as it was (absolute paths), then sealed again."""
    from near_dedup_core.fsutil import write_checksums, write_json

    raw = json.loads((folder / "release.json").read_text())
    snapshots, reports = Path(settings.snapshot_root), Path(settings.report_root)
    raw["format_version"] = 1
    for item in raw["inputs"]:
        item["path"] = str(snapshots / item["path"])
    raw["mixture"]["path"] = str(Path(settings.mixture_root) / raw["mixture"]["path"])
    if raw["report"] is not None:
        raw["report"]["path"] = str(reports / raw["report"]["path"])
    config = json.loads((folder / "mixture.json").read_text())
    config["inputs"] = [str(snapshots / p) for p in config["inputs"]]
    if config.get("near_dedup_report") is not None:
        config["near_dedup_report"] = str(reports / config["near_dedup_report"])
    (folder / "checksums.sha256").unlink()
    write_json(folder / "release.json", raw)
    write_json(folder / "mixture.json", config)
    write_checksums(folder)


def test_a_release_record_of_format_1_passes_the_mixture_check(tmp_path, snapshots, instance):
    """A day released before format 2 keeps its record: the mixture check reads it through
    the model and passes; a rerun of the day, whose record would be of format 2, leaves it
    as it is and says so (published outputs are never replaced)."""
    settings = settings_for(tmp_path, snapshots)
    assert release(DAYS[0], settings, instance).success
    folder = settings.release_dir(DAYS[0]).local_path
    as_format_1(settings, folder)
    record = json.loads((folder / "release.json").read_text())
    assert record["format_version"] == 1 and Path(record["mixture"]["path"]).is_absolute()
    kept = tree_bytes(folder)
    result = release(DAYS[0], settings, instance,
                     selection=dg.AssetSelection.checks_for_assets(MIXTURE)
                     | dg.AssetSelection.assets("validated_snapshot"))
    check = check_results(result)["mixture_verify"]
    assert check.passed, check.description
    again = release(DAYS[0], settings, instance)
    assert not again.success
    assert "already exists with other content than this build" in failure_message(again)
    assert tree_bytes(folder) == kept


def test_checks_executed_without_a_day_check_the_latest_released_day(tmp_path, snapshots,
                                                                     instance):
    """A run of the checks without a release day (the checks tab's "Execute all") checks the
    latest released day, not a later day without a release, and records the result for that
    day: the check's latest result is a real one, for a real day. Before any release it checks
    nothing and does not pass. (The UI: tests/test_webserver.py.)"""
    settings = settings_for(tmp_path, snapshots)
    names = {"report_checksums", "exclusion_rates", "mixture_verify", "no_taken_down_content"}

    def execute_all():
        return dg.materialize(GRAPH, resources={"release": settings}, instance=instance,
                              raise_on_error=False,
                              selection=dg.AssetSelection.checks(*RELEASE_CHECKS))

    before = execute_all()
    assert before.success
    evaluations = before.get_asset_check_evaluations()
    assert sorted(e.check_name for e in evaluations) == sorted(names)
    for check in evaluations:
        assert (check.partition, check.passed, check.severity) == \
            (None, False, dg.AssetCheckSeverity.WARN)
        assert check.description == ("no release day chosen and no day released yet: nothing "
                                     "was checked")

    assert release(DAYS[0], settings, instance).success
    assert release("2026-11-29", settings, instance).success  # no snapshot: no release
    result = execute_all()
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert sorted((e.check_name, e.partition or "") for e in evaluations) == sorted(
        [(name, "") for name in names] + [(name, DAYS[0]) for name in names])
    executed = f"without a release day: checked the latest released day, {DAYS[0]}"
    for check in evaluations:
        assert check.passed, check.description
        entries = {k: v.value for k, v in check.metadata.items()}
        assert (entries["day"], entries["executed"]) == (DAYS[0], executed)
    by_day = {e.check_name: e for e in evaluations if e.partition == DAYS[0]}
    assert by_day["report_checksums"].description.startswith(
        f"report {settings.report_dir(DAYS[0])}: OK")
    # the check's plots (numbers by evaluation time) get the day's numbers once: the run's
    # own row points at the day's row and carries no numbers
    own = next(e for e in evaluations if e.check_name == "exclusion_rates" and not e.partition)
    assert any(k.startswith("exclusion_rate_") for k in by_day["exclusion_rates"].metadata)
    assert not any(k.startswith("exclusion_rate_") for k in own.metadata)
    for check in RELEASE_CHECKS:  # the latest row: a real result for the day, this run's
        [key] = check.check_keys
        latest, own = instance.event_log_storage.get_asset_check_execution_history(
            key, limit=2)
        assert (latest.partition, latest.status.value, latest.run_id) == \
            (DAYS[0], "SUCCEEDED", result.run_id)
        assert (own.partition, own.status.value, own.run_id) == \
            (None, "SUCCEEDED", result.run_id)
        assert own.event.dagster_event.event_specific_data.description.startswith(
            f"executed {executed}: ")


def test_near_dedup_off_builds_mixtures_without_report_or_index(tmp_path, snapshots, instance):
    settings = settings_for(tmp_path, snapshots, enabled="false")
    result = release(DAYS[1], settings, instance)
    assert result.success
    assert metadata(result, SCAN_REPORT)["near_dedup"] == "off"
    checks = check_results(result)
    for name, missing in (("report_checksums", "no report"), ("exclusion_rates", "no report"),
                          ("no_taken_down_content", "no index, no takedowns")):
        assert checks[name].passed, name
        assert checks[name].description == f"near-dedup is off: {missing}"
        assert checks[name].metadata["near_dedup"].value == "off"
    assert not settings.index_path.exists()
    assert not (tmp_path / "reports").exists()
    mixture = settings.mixture_dir(DAYS[1]).local_path
    assert verify_mixture(mixture).report_decisions is None
    assert json.loads((mixture / "manifest.json").read_text())["near_dedup_report"] is None
    record = json.loads((settings.release_dir(DAYS[1]).local_path / "release.json").read_text())
    assert record["near_dedup"] is False and record["report"] is None
    assert metadata(result, MIXTURE)["near_dedup_report"] == "none: near-dedup is off"


# --------------------------------------------------------------------------- schedule


def test_schedule_requests_the_day_that_just_ended():
    schedule = defs.resolve_schedule_def("daily_release_schedule")
    tick = datetime(2026, 11, 28, 2, 0, tzinfo=timezone.utc)
    with dg.instance_for_test() as inst:
        context = dg.build_schedule_context(instance=inst, scheduled_execution_time=tick,
                                            repository_def=defs.get_repository_def())
        [request] = schedule.evaluate_tick(context).run_requests
    assert request.partition_key == "2026-11-27"
    assert request.run_key == "2026-11-27"
    assert schedule.job_name == "daily_release"


def test_schedule_reads_days_in_the_release_timezone_and_skips_before_the_start():
    shanghai = release_days({"NEAR_DEDUP_START_DATE": "2026-11-25",
                             "NEAR_DEDUP_TIMEZONE": "Asia/Shanghai"})
    schedule = build_release_schedule("30 1 * * *", partitions=shanghai)
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("30 1 * * *", "Asia/Shanghai")
    # 2026-11-27 17:30 UTC is 01:30 on the 28th in Shanghai: the 27th has just ended there.
    tick = datetime(2026, 11, 27, 17, 30, tzinfo=timezone.utc)
    assert release_day_for_tick(tick, "Asia/Shanghai") == "2026-11-27"
    request = schedule(dg.build_schedule_context(scheduled_execution_time=tick))
    assert request.partition_key == "2026-11-27"
    early = datetime(2026, 11, 24, 17, 30, tzinfo=timezone.utc)  # 25th, 01:30 in Shanghai
    skipped = schedule(dg.build_schedule_context(scheduled_execution_time=early))
    assert isinstance(skipped, dg.SkipReason)
    assert "2026-11-24 is before the first release day 2026-11-25" in skipped.skip_message


# --------------------------------------------------------------------------- backfill


def backfill(settings: ReleaseSettings, days: list[str], workdir: Path) -> list[tuple]:
    """Run an asset backfill of ``days`` the way the daemon does, with runs executed in this
    process; returns (partition, sorted asset keys) per run in launch order."""
    module = workdir / "release_defs.py"
    module.write_text(textwrap.dedent(f"""
        from near_dedup_assets.definitions import build_defs
        from near_dedup_assets.resources import ReleaseSettings

        defs = build_defs(ReleaseSettings(**{settings.model_dump()!r}))
    """), encoding="utf-8")
    overrides = {
        "run_coordinator": {"module": "dagster._core.run_coordinator",
                            "class": "DefaultRunCoordinator"},
        "run_launcher": {"module": "dagster._core.launcher.sync_in_memory_run_launcher",
                         "class": "SyncInMemoryRunLauncher"},
    }
    origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(
        python_file=str(module), attribute="defs", working_directory=str(workdir)))
    with dg.instance_for_test(overrides=overrides) as inst, \
            create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget([origin]),
                                                 inst) as workspace:
        graph = build_defs(settings).resolve_asset_graph()
        inst.add_backfill(PartitionBackfill.from_asset_partitions(
            backfill_id="release-backfill", asset_graph=graph, partition_names=days,
            asset_selection=list(graph.get_all_asset_keys()), backfill_timestamp=time.time(),
            tags={}, dynamic_partitions_store=inst, all_partitions=False, title=None,
            description=None, run_config=None))
        for _ in range(40):
            list(execute_backfill_iteration(workspace, logging.getLogger("backfill")))
            status = inst.get_backfill("release-backfill").status
            if status != BulkActionStatus.REQUESTED:
                break
        assert status == BulkActionStatus.COMPLETED_SUCCESS
        runs = list(reversed(inst.get_runs()))
        assert all(r.is_success for r in runs)
        return [(r.tags["dagster/partition"],
                 sorted(k.to_user_string() for k in r.asset_selection)) for r in runs]


def index_rows(path: Path) -> dict[str, list]:
    """The index's packages and contents in first-ingest order (without timestamps)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            "packages": con.execute("SELECT package_id, manifest_sha256, batch FROM packages "
                                    "ORDER BY batch, package_id").fetchall(),
            "contents": con.execute("SELECT content_id, batch FROM contents "
                                    "ORDER BY id").fetchall(),
            "sources": con.execute("SELECT count(*) FROM sources").fetchall(),
        }
    finally:
        con.close()


def test_backfill_of_several_days_equals_running_them_day_by_day(tmp_path, snapshots,
                                                                day_by_day):
    one_by_one, _ = day_by_day
    filled = settings_for(tmp_path / "backfill", snapshots)
    runs = backfill(filled, DAYS, tmp_path)

    # each day's index step ran after the previous day's, and in date order
    index_runs = [day for day, keys in runs if "index_append" in keys]
    assert index_runs == DAYS
    # and each day's batch was appended and its report frozen in the same run
    assert all("scan_report" in keys for _, keys in runs if "index_append" in keys)
    assert index_rows(filled.index_path) == index_rows(one_by_one.index_path)
    for day in DAYS:
        assert tree_bytes(filled.report_dir(day).local_path) == \
            tree_bytes(one_by_one.report_dir(day).local_path), day
        for name in ("manifest.json", "data/train/part-00000.jsonl"):
            assert (filled.mixture_dir(day).local_path / name).read_bytes() == \
                (one_by_one.mixture_dir(day).local_path / name).read_bytes(), (day, name)


# --------------------------------------------------------------------------- every backend

#: The badge of ``index_append`` in the UI (its asset kind) for each index backend.
BADGES = {"sqlite": "sqlite", "postgresql": "postgres", "iceberg": "iceberg"}
BACKEND_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "iceberg": "Iceberg"}


def frozen(settings: ReleaseSettings, day: str) -> dict:
    """A released day's report and mixture files, and its release record but the index it
    names (the record's own location of the index), which must be ``settings``' index."""
    found = outputs(settings, day)
    record = json.loads(found.pop("release")["release.json"])
    assert record.pop("index") == settings.index_label
    return {**found, "release": record}


# SQLite's release is `day_by_day` itself, which the others are compared with.
@pytest.mark.parametrize("backend", ["postgresql", "iceberg"], indirect=True, scope="module")
def test_the_release_on_every_backend_freezes_the_sqlite_reports(backend, index_location,
                                                                tmp_path, snapshots,
                                                                day_by_day):
    """Two days released on a PostgreSQL and an Iceberg index: the reports, mixtures and
    release records are byte-identical to the SQLite release's (`day_by_day`), the index
    asset's metadata names the backend and the index (never a password), and the UI badges
    the index asset with the backend."""
    sqlite_release, _ = day_by_day
    settings = settings_for(tmp_path / backend, snapshots, index=index_location)
    with dg.instance_for_test() as instance:
        for n, day in enumerate(DAYS[:2], start=1):
            result = release(day, settings, instance)
            assert result.success, (day, failure_message(result) if not result.success else "")
            checks = check_results(result)
            assert checks["report_checksums"].passed and checks["mixture_verify"].passed
            index = metadata(result, INDEX_APPEND)
            assert index["backend"] == BACKEND_NAMES[backend]
            assert (index["batch"], index["packages_added"]) == (str(n), f"cpt-v{n}")
            assert index["records_appended"] == verify_report(
                settings.report_dir(day).local_path).counts["samples"]
            assert index["new_contents"] > 0 and index["report"] == str(settings.report_dir(day))
            assert index["index"] == settings.index_label
            assert ("index_bytes" in index) == (backend == "sqlite")
            assert "near-dedup-test" not in json.dumps(index, default=str)
            scan = metadata(result, SCAN_REPORT)
            assert scan["history_only_relations"] == load_manifest(
                settings.report_dir(day).local_path)["counts"]["history_only_relations"]
        for day in DAYS[:2]:
            assert frozen(settings, day) == frozen(sqlite_release, day), day
        assert "near-dedup-test" not in \
            (settings.release_dir(DAYS[1]).local_path / "release.json").read_text()  # no password
    assert index_kind({"NEAR_DEDUP_INDEX": index_location}) == BADGES[backend]
    spec = defs.resolve_asset_graph().get(INDEX_APPEND)
    assert spec.kinds == {index_kind(current_environment())}  # the loaded location's index
