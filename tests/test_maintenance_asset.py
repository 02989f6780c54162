"""The index's maintenance in the daily release (`near_dedup_assets.maintenance`): the step
``index_maintenance`` is in the release job after the day's mixture, in the index writers'
pool; on an Iceberg index it compacts the index's files (by size tiers) and expires old snapshots, its
summaries shown as metadata; an expiry that meets a running scan is put off; SQLite needs
none.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from helpers import check_results, metadata, run_cli, settings_for
from test_assets import DAYS, release_days_on_disk

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

from near_dedup_assets.assets import MIXTURE, RELEASE_ASSETS  # noqa: E402
from near_dedup_assets.checks import RELEASE_CHECKS  # noqa: E402
from near_dedup_assets.definitions import build_defs  # noqa: E402
from near_dedup_assets.jobs import daily_release  # noqa: E402
from near_dedup_assets.maintenance import index_maintenance, maintain  # noqa: E402

MAINTENANCE = dg.AssetKey("index_maintenance")


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory) -> Path:
    return release_days_on_disk(tmp_path_factory.mktemp("snapshots"))


def test_the_step_is_in_the_release_after_the_mixture_in_the_writers_pool(tmp_path,
                                                                          snapshots):
    defs = build_defs(settings_for(tmp_path, snapshots))
    graph = defs.resolve_asset_graph()
    node = graph.get(MAINTENANCE)
    assert MIXTURE in node.parent_keys and node.partitions_def is not None
    assert index_maintenance.op.pool == "index_writer"
    job = defs.resolve_job_def(daily_release.name)
    assert MAINTENANCE in job.asset_layer.selected_asset_keys


def test_an_iceberg_release_compacts_and_expires_after_each_day(tmp_path, snapshots,
                                                                monkeypatch):
    from near_dedup_core.index_store.iceberg import compact

    # two files of a size tier merged (four in the product), so that the second day merges
    monkeypatch.setattr(compact, "FANOUT", 2)
    index = f"iceberg://{tmp_path / 'ice'}"
    settings = settings_for(tmp_path, snapshots, index=index)
    with dg.instance_for_test() as instance:
        done = []
        for day in DAYS[:2]:
            result = dg.materialize([*RELEASE_ASSETS, index_maintenance, *RELEASE_CHECKS],
                                    partition_key=day, resources={"release": settings},
                                    instance=instance, raise_on_error=False)
            assert result.success, day
            assert check_results(result)["report_checksums"].passed
            done.append(metadata(result, MAINTENANCE))
    assert "nothing to compact" in done[0]["compact"], done[0]
    assert "compacted" in done[1]["compact"] and "into" in done[1]["compact"], done[1]
    assert all(d["expire"].startswith(f"index {index}: ") for d in done), done
    code, out, err = run_cli("--quiet", "--index", index, "index", "check")
    assert (code, err) == (0, "") and "OK (2 batches" in out and "orphan" not in out, out


def test_an_expiry_under_a_running_scan_is_put_off(tmp_path, snapshots):
    from near_dedup_core.index_store.iceberg import tables as it

    folder = tmp_path / "ice"
    index = f"iceberg://{folder}"
    for day, pkg in zip(DAYS[:2], ("cpt-v1", "cpt-v2"), strict=True):
        code, _, err = run_cli("--quiet", "--index", index, "index", "--inputs",
                               snapshots / day / pkg)
        assert (code, err) == (0, ""), err
    with it.readers_lock(folder, False, index):  # what a scan holds from pinning to its end
        done = maintain(index)
    assert done["compact"].startswith(f"index {index}: nothing to compact (16 band buckets, "
                                      f"at most 2 files each; "), done  # two small days
    assert done["expire"] == (f"put off: index {index}: a scan is reading it; expire old "
                              f"snapshots when no scan runs")
    assert "expired" in maintain(index)["expire"]


def test_a_sqlite_index_needs_no_maintenance(tmp_path):
    assert maintain(str(tmp_path / "x.sqlite")) == {
        "maintenance": "none: a sqlite index keeps no snapshots or data files to compact or "
                       "expire"}
