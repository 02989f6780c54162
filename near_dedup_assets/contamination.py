"""The contamination step of the daily release, present when ``NEAR_DEDUP_EVALS`` is set.

``validated_snapshot`` → ``contamination_report`` → ``mixture``: the day's input pool is
checked against every eval package in the ``NEAR_DEDUP_EVALS`` folder (each package folder
directly inside it, in name order) with the core's ``contamination`` command; the frozen
report goes to ``<contamination_root>/contamination-<kind>-<day>`` and the day's mixture
drops the pool samples it lists (mixture config ``contamination_report``).

A report that exists is reused if it verifies and was made from the same inputs, eval
packages and config; otherwise the day fails and the folder is left alone (frozen reports
are never replaced). The asset check ``no_new_contamination`` fails when the day's pool
contains any eval item: severity WARN by default (the mixture is still built, without the
contaminated samples), ERROR and blocking with ``NEAR_DEDUP_CONTAMINATION_BLOCKING=true``
(the day's mixture is not built). ``NEAR_DEDUP_CONTAMINATION_LIMITS`` (``ID=N,…``) adds one
check per benchmark, ``no_new_contamination_<ID>``: it fails when more than N items of eval
package ID leaked (the same severity, blocking with the same variable). The variables are
read when the code location loads.
"""

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from near_dedup_core import runtime
from near_dedup_core.contamination import contamination_report as run_contamination
from near_dedup_core.contamination import verify_contamination
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import read_json_object
from near_dedup_core.package import load_package
from near_dedup_core.storage import Location

from near_dedup_assets import daily
from near_dedup_assets.assets import (
    GROUP,
    MIXTURE,
    SCAN_REPORT,
    VALIDATED_SNAPSHOT,
    mixture_for_day,
    partition_failure,
)
from near_dedup_assets.checks import for_release_day, release_day_check
from near_dedup_assets.locations import (
    checked,
    is_folder,
    local,
    location_value,
    naming,
    package_folders,
)
from near_dedup_assets.partitions import RELEASE_DAYS
from near_dedup_assets.resources import ENV_PREFIX, ReleaseSettings, parse_flag
from near_dedup_assets.summaries import no_release_metadata

CONTAMINATION_REPORT = dg.AssetKey("contamination_report")
EVALS_VAR = f"{ENV_PREFIX}EVALS"
BLOCKING_VAR = f"{ENV_PREFIX}CONTAMINATION_BLOCKING"
LIMITS_VAR = f"{ENV_PREFIX}CONTAMINATION_LIMITS"


@dataclass(frozen=True)
class ContaminationOutcome:
    path: Location
    manifest: dict
    summary: dict
    reused: bool


def eval_package_paths(settings: ReleaseSettings) -> list[Location]:
    folder = settings.evals_dir
    if folder is None or not is_folder(folder):
        raise NearDedupError(f"{EVALS_VAR}={settings.evals!r}: not a folder of eval packages")
    paths = package_folders(folder)
    if not paths:
        raise NearDedupError(f"{EVALS_VAR} {folder}: holds no package folders")
    return paths


def _identities(entries: list[dict]) -> list[tuple[str, str]]:
    return [(e["package_id"], e["manifest_sha256"]) for e in entries]


def freeze_contamination(settings: ReleaseSettings, pool: daily.DayPool) -> ContaminationOutcome:
    """The day's frozen contamination report: the existing one if it matches, else a new run
    into a staging folder renamed into place (on object storage: published by the run)."""
    target = settings.contamination_dir(pool.day)
    config = settings.dedup_config()
    evals = [str(p) for p in eval_package_paths(settings)]
    reused = target.exists()
    if reused:
        hint = f"frozen reports are never replaced: move {target} away to recheck day {pool.day}"
        folder = local(target, fresh=True)
        try:
            with naming(target, folder):
                verify_contamination(folder)
        except NearDedupError as exc:
            raise NearDedupError(f"{exc}; {hint}") from None
        manifest = read_json_object(folder / "manifest.json", "contamination report")
        now_evals = [(p.package_id, p.manifest_sha256) for p in map(load_package, evals)]
        if (_identities(manifest["inputs"]) != pool.identities
                or _identities(manifest["evals"]) != now_evals
                or manifest["config"] != config.model_dump(mode="json")):
            raise NearDedupError(f"contamination report {target} was made from other inputs, "
                                 f"eval packages or config than day {pool.day} has now; {hint}")
    elif (path := target.local_path) is None:
        with runtime.command("contamination"):
            run_contamination(config, evals, pool.paths, target.url,
                              workers=settings.worker_count, progress=False)
        folder = local(target)
        manifest = read_json_object(folder / "manifest.json", "contamination report")
    else:
        folder = path
        staging = folder.with_name(f".{folder.name}.staging-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            with runtime.command("contamination"):
                run_contamination(config, evals, pool.paths, staging,
                                  workers=settings.worker_count, progress=False)
            os.rename(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        manifest = read_json_object(folder / "manifest.json", "contamination report")
    summary = read_json_object(folder / "summary.json", "contamination report")
    return ContaminationOutcome(target, manifest, summary, reused)


def contamination_metadata(outcome: ContaminationOutcome) -> dict:
    from near_dedup_assets.summaries import md_table

    counts = outcome.manifest["counts"]
    rows = [[e["package_id"], e["items_checked"], e["items_skipped_short"], e["items_leaked"],
             e["training_samples_affected"]] for e in outcome.summary["evals"]]
    metadata: dict = {
        "report": location_value(outcome.path),
        "reused": outcome.reused,
        "pairs": counts["pairs"],
        "items_leaked": counts["items_leaked"],
        "training_samples_contaminated": counts["training_samples_contaminated"],
        "by_eval_set": dg.MetadataValue.md(md_table(
            ["eval set", "items checked", "skipped (short)", "leaked", "training samples"],
            rows)),
    }
    for e in outcome.summary["evals"]:
        metadata[f"leaked/{e['package_id']}"] = e["items_leaked"]
    return metadata


@dg.asset(partitions_def=RELEASE_DAYS, group_name=GROUP, kinds={"json"},
          deps=[VALIDATED_SNAPSHOT])
def contamination_report(context: dg.AssetExecutionContext,
                         release: ReleaseSettings) -> dg.MaterializeResult:
    """Training samples of the day that contain an item of an eval set (exact containment),
    frozen; counts per eval set in the metadata."""
    with partition_failure():
        reason = daily.no_release(release, context.partition_key)
        if reason is not None:
            return dg.MaterializeResult(metadata=no_release_metadata(reason))
        pool = daily.open_day(release, context.partition_key)
        outcome = freeze_contamination(release, pool)
    return dg.MaterializeResult(metadata=contamination_metadata(outcome))


def build_check(blocking: bool) -> dg.AssetChecksDefinition:
    severity = dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN

    @release_day_check(asset=CONTAMINATION_REPORT, blocking=blocking,
                    description="The day's pool contains no eval item (WARN; ERROR and "
                                "blocking with NEAR_DEDUP_CONTAMINATION_BLOCKING=true).")
    def no_new_contamination(context: dg.AssetCheckExecutionContext,
                             release: ReleaseSettings):
        def check_day(day: str) -> dg.AssetCheckResult:
            path = release.contamination_dir(day)
            meta = {"day": dg.MetadataValue.text(day), "report": location_value(path)}
            if not path.exists() and daily.is_no_release_day(release, day):
                return dg.AssetCheckResult(passed=True, severity=severity, metadata=meta,
                                           description=f"no release on {day} (no snapshot "
                                                       f"folder): no contamination report")
            try:
                counts = checked(path, verify_contamination).counts
            except NearDedupError as exc:
                return dg.AssetCheckResult(passed=False, severity=severity,
                                           description=str(exc), metadata=meta)
            leaked = counts["training_samples_contaminated"]
            return dg.AssetCheckResult(
                passed=leaked == 0, severity=severity,
                description=(f"{leaked:,} training samples of day {day} contain "
                             f"{counts['items_leaked']:,} eval items" if leaked
                             else f"no eval item in the {counts['training_samples']:,} "
                                  f"training samples of day {day}"),
                metadata={**meta, "training_samples_contaminated": leaked,
                          "items_leaked": counts["items_leaked"]})

        return for_release_day(context, release, CONTAMINATION_REPORT, check_day)

    return no_new_contamination


def benchmark_limits_from_env(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """``NEAR_DEDUP_CONTAMINATION_LIMITS``: eval package id → most items it may leak."""
    environ = os.environ if environ is None else environ
    limits: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in environ.get(LIMITS_VAR, "").split(","))):
        pid, _, n = part.partition("=")
        if not pid.strip() or not n.strip().isdigit() or pid.strip() in limits:
            raise NearDedupError(f"{LIMITS_VAR}={environ[LIMITS_VAR]!r}: expected "
                                 f"EVAL_PACKAGE_ID=MAX_ITEMS_LEAKED,… (each id once, a "
                                 f"whole number), found {part!r}")
        limits[pid.strip()] = int(n)
    return limits


def build_benchmark_check(package_id: str, limit: int, blocking: bool
                          ) -> dg.AssetChecksDefinition:
    """``no_new_contamination_<id>``: at most ``limit`` items of one eval package leaked."""
    severity = dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN
    name = "no_new_contamination_" + "".join(c if c.isalnum() else "_" for c in package_id)

    @release_day_check(asset=CONTAMINATION_REPORT, blocking=blocking, name=name,
                       description=f"At most {limit} items of eval package {package_id} "
                                   f"leaked into the day's pool ({LIMITS_VAR}).")
    def check(context: dg.AssetCheckExecutionContext, release: ReleaseSettings):
        def check_day(day: str) -> dg.AssetCheckResult:
            path = release.contamination_dir(day)
            meta: dict[str, dg.MetadataValue] = {"day": dg.MetadataValue.text(day),
                                                  "report": location_value(path),
                                                  "limit": dg.MetadataValue.int(limit)}
            if not path.exists() and daily.is_no_release_day(release, day):
                return dg.AssetCheckResult(passed=True, severity=severity, metadata=meta,
                                           description=f"no release on {day} (no snapshot "
                                                       f"folder): no contamination report")
            try:
                checked(path, verify_contamination)
                summary = read_json_object(local(path) / "summary.json",
                                           "contamination report")
            except NearDedupError as exc:
                return dg.AssetCheckResult(passed=False, severity=severity,
                                           description=str(exc), metadata=meta)
            found = [e for e in summary["evals"] if e["package_id"] == package_id]
            if not found:
                return dg.AssetCheckResult(passed=False, severity=severity, metadata=meta,
                                           description=f"eval package {package_id} is not in "
                                                       f"the day's contamination report")
            leaked = found[0]["items_leaked"]
            return dg.AssetCheckResult(
                passed=leaked <= limit, severity=severity,
                metadata={**meta, "items_leaked": dg.MetadataValue.int(leaked)},
                description=f"{leaked:,} items of {package_id} leaked into day {day} (at "
                            f"most {limit:,})")

        return for_release_day(context, release, CONTAMINATION_REPORT, check_day)

    return check


def contamination_settings_from_env(environ: Mapping[str, str] | None = None
                                    ) -> tuple[bool, bool]:
    """(enabled, blocking) from ``NEAR_DEDUP_EVALS`` and
    ``NEAR_DEDUP_CONTAMINATION_BLOCKING``, read when the code location loads."""
    environ = os.environ if environ is None else environ
    blocking = parse_flag(BLOCKING_VAR, environ.get(BLOCKING_VAR, "false"))
    return bool(environ.get(EVALS_VAR, "").strip()), blocking


@dg.asset(name="mixture", partitions_def=RELEASE_DAYS, group_name=GROUP, kinds={"json"},
          deps=[SCAN_REPORT, CONTAMINATION_REPORT])
def mixture_after_contamination(context: dg.AssetExecutionContext,
                                release: ReleaseSettings) -> dg.MaterializeResult:
    """The day's mixture package built on the frozen near-dedup and contamination reports
    (contaminated pool samples dropped), and the day's release record."""
    return mixture_for_day(context, release)


def with_contamination(assets: list, checks: list, blocking: bool,
                       limits: Mapping[str, int] | None = None) -> tuple[list, list]:
    """The release graph plus ``contamination_report`` and its checks (one per benchmark of
    ``limits``, `benchmark_limits_from_env` by default); ``mixture`` is replaced by its
    variant that runs after the contamination report."""
    limits = benchmark_limits_from_env() if limits is None else limits
    wired = [mixture_after_contamination if MIXTURE in a.keys else a for a in assets]
    per_benchmark = [build_benchmark_check(pid, n, blocking) for pid, n in limits.items()]
    return [*wired, contamination_report], [*checks, build_check(blocking), *per_benchmark]
