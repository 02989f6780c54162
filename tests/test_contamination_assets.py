"""The contamination step of the daily release (``NEAR_DEDUP_EVALS``): the asset freezes the
report, the mixture drops contaminated samples, the check warns or blocks."""

from __future__ import annotations

import dagster as dg
import orjson
import pytest
from helpers import (
    check_results,
    executed_steps,
    make_package,
    metadata,
    settings_for,
    stdlib_paragraphs,
)

from near_dedup_core.contamination import verify_contamination
from near_dedup_core.errors import NearDedupError
from near_dedup_core.mixture import verify_mixture

from near_dedup_assets.assets import MIXTURE, RELEASE_ASSETS
from near_dedup_assets.checks import RELEASE_CHECKS
from near_dedup_assets.contamination import (
    CONTAMINATION_REPORT,
    benchmark_limits_from_env,
    contamination_settings_from_env,
    with_contamination,
)
from near_dedup_assets.definitions import build_defs

# Materializes the Dagster release graph with its contamination step.
pytestmark = pytest.mark.slow

DAY = "2026-11-25"


@pytest.fixture
def release_setup(tmp_path):
    paras = stdlib_paragraphs()
    docs = [{"id": f"a{i}", "text": p, "domain": "web" if i % 2 else "books"}
            for i, p in enumerate(paras[:12])]
    make_package(tmp_path / "snap" / DAY, "cpt-v1", {"train": docs[:10],
                                                      "validation": docs[10:]})
    make_package(tmp_path / "evals", "bench-qa",
                 {"test": [{"id": "leak", "text": paras[3][:200].upper()},
                           {"id": "clean", "text": paras[100][:200]}]})
    settings = settings_for(tmp_path / "out", tmp_path / "snap",
                            evals=str(tmp_path / "evals"),
                            contamination_root=str(tmp_path / "out" / "contamination"))
    return settings


def _run(settings, blocking: bool, limits: dict[str, int] | None = None):
    assets, checks = with_contamination(list(RELEASE_ASSETS), list(RELEASE_CHECKS), blocking,
                                        limits or {})
    with dg.instance_for_test() as instance:
        return dg.materialize([*assets, *checks], partition_key=DAY, instance=instance,
                              resources={"release": settings}, raise_on_error=False)


def test_graph_has_the_step_only_when_evals_are_set():
    assert contamination_settings_from_env({}) == (False, False)
    assert contamination_settings_from_env({"NEAR_DEDUP_EVALS": "evals",
                                            "NEAR_DEDUP_CONTAMINATION_BLOCKING": "true"}) \
        == (True, True)
    on = build_defs(settings_for_defaults(), contamination=(True, False))
    dg.Definitions.validate_loadable(on)
    graph = on.resolve_asset_graph()
    assert CONTAMINATION_REPORT in graph.get(MIXTURE).parent_keys
    assert graph.get(CONTAMINATION_REPORT).partitions_def is not None
    off = build_defs(settings_for_defaults()).resolve_asset_graph()
    assert CONTAMINATION_REPORT not in off.get_all_asset_keys()


def settings_for_defaults():
    from near_dedup_assets.resources import ReleaseSettings

    return ReleaseSettings()


def test_warning_check_and_a_mixture_without_the_contaminated_sample(release_setup):
    settings = release_setup
    result = _run(settings, blocking=False)
    assert result.success
    check = check_results(result)["no_new_contamination"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    meta = metadata(result, CONTAMINATION_REPORT)
    assert meta["leaked/bench-qa"] == 1 and meta["training_samples_contaminated"] == 1
    report = settings.contamination_dir(DAY).local_path
    assert verify_contamination(report).counts["pairs"] == 1
    mixture = settings.mixture_dir(DAY).local_path
    assert "none of its 1 contaminated" in verify_mixture(mixture).summary()
    ids = {orjson.loads(x)["origin"]["sample_id"]
           for x in (mixture / "data/train/part-00000.jsonl").read_bytes().splitlines()}
    assert ids and "a3" not in ids
    record = orjson.loads((settings.release_dir(DAY).local_path / "release.json").read_bytes())
    assert record["contamination"]["path"] == report.name  # relative to its root
    assert record["contamination"]["counts"]["pairs"] == 1
    again = _run(settings, blocking=False)  # frozen report reused, same mixture
    assert again.success and metadata(again, CONTAMINATION_REPORT)["reused"] is True


def test_blocking_check_stops_the_mixture(release_setup):
    settings = release_setup
    result = _run(settings, blocking=True)
    assert not result.success
    check = check_results(result)["no_new_contamination"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert "mixture" not in executed_steps(result)
    assert not settings.mixture_dir(DAY).local_path.exists()


def test_one_check_per_benchmark_with_its_limit(release_setup, tmp_path):
    assert benchmark_limits_from_env({"NEAR_DEDUP_CONTAMINATION_LIMITS": "bench-qa=1, mmlu=0"}) \
        == {"bench-qa": 1, "mmlu": 0}
    with pytest.raises(NearDedupError, match="NEAR_DEDUP_CONTAMINATION_LIMITS"):
        benchmark_limits_from_env({"NEAR_DEDUP_CONTAMINATION_LIMITS": "bench-qa=many"})
    result = _run(release_setup, blocking=True, limits={"bench-qa": 1, "other": 0})
    checks = check_results(result)
    assert checks["no_new_contamination_bench_qa"].passed  # 1 item leaked, at most 1
    other = checks["no_new_contamination_other"]
    assert not other.passed and other.severity == dg.AssetCheckSeverity.ERROR
    assert "not in the day's contamination report" in other.description
    assert not checks["no_new_contamination"].passed
