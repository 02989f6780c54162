"""The daily release and takedowns (docs/takedowns.md): the day's scan applies every takedown
recorded in the index with no setting, the mixture leaves the samples out, and the blocking
check ``no_taken_down_content`` fails a released mixture that holds a text taken down since."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from helpers import check_results, cli_ok, settings_for

from near_dedup_assets.assets import MIXTURE, RELEASE_ASSETS
from near_dedup_assets.checks import RELEASE_CHECKS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
GRAPH = [*RELEASE_ASSETS, *RELEASE_CHECKS]
DAYS = ["2026-11-25", "2026-11-26"]


def release(day, settings, instance, selection=None):
    return dg.materialize(GRAPH, partition_key=day, resources={"release": settings},
                          instance=instance, raise_on_error=False, selection=selection)


def mixture_ids(folder: Path) -> set[str]:
    return {json.loads(line)["origin"]["sample_id"]
            for p in folder.glob("data/*/part-00000.jsonl") for line in p.read_text().splitlines()}


def test_the_release_applies_recorded_takedowns_and_blocks_a_mixture_holding_one(tmp_path):
    settings = settings_for(tmp_path, REPO / "samples" / "cpt")
    with dg.instance_for_test() as instance:
        first = release(DAYS[0], settings, instance)
        assert first.success
        assert check_results(first)["no_taken_down_content"].passed
        assert "web-0010" in mixture_ids(settings.mixture_dir(DAYS[0]).local_path)  # validation: whole

        # a takedown recorded after the day's release: its mixture now fails the check
        day1 = REPO / "samples" / "cpt" / DAYS[0] / "cpt-v1"
        cli_ok("--index", settings.index_path, "takedown", "add", "--request", "DSR-12",
               "--reason", "personal data", "--package", day1, "--sample", "web-0010")
        rechecked = release(DAYS[0], settings, instance,
                            selection=dg.AssetSelection.checks_for_assets(MIXTURE)
                            | dg.AssetSelection.assets("validated_snapshot"))
        check = check_results(rechecked)["no_taken_down_content"]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
        assert "web-0010 is taken down by request DSR-12" in check.description
        assert check_results(rechecked)["mixture_verify"].passed  # its own report holds up

        # the next day applies it without any setting: its copy in cpt-v2's validation split
        # is taken down, left out of the mixture, and the check passes
        second = release(DAYS[1], settings, instance)
        assert second.success
        report = json.loads((settings.report_dir(DAYS[1]).local_path / "manifest.json").read_text())
        assert [t["request_id"] for t in report["takedowns"]] == ["DSR-12"]
        assert report["takedowns"][0]["samples"] == 1
        assert "web-0010" not in mixture_ids(settings.mixture_dir(DAYS[1]).local_path)
        checks = check_results(second)
        assert checks["no_taken_down_content"].passed and checks["mixture_verify"].passed
        assert "no taken-down content" in checks["no_taken_down_content"].description
