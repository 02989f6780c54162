"""The work of one release day, in plain Python on top of `near_dedup_core`.

The assets call these functions; they decide which packages form the day's input pool,
where its outputs go and what happens when a day is materialized again:

* The input pool of a day is every package folder directly inside the day's snapshot folder
  (hidden folders, e.g. transfers in progress, and plain files are ignored), in name order.
  A day whose snapshot folder does not exist is a day without a release (`no_release`).
* Index append is the core's batch append; a day that is already indexed is a no-op.
* Reports are frozen. A day whose report folder exists gets that report back if it was made
  from the same inputs and config and still verifies; otherwise the step fails and the folder
  is left alone (move it away to rescan). A new report is scanned into a hidden staging
  folder and renamed into place only after checking that the index held nothing appended
  after the day's own batch, so a report never sees a later day as history.
* Mixtures and release records are deterministic. A day whose mixture or record exists is
  rebuilt into a staging folder: identical checksums → the published one stays (same
  package); different → the step fails and nothing is replaced.
* Any root may be a URL of object storage (a `Location`, `locations`): the staging folder is then a local
  temporary folder, published by the storage layer's rule instead of renamed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from near_dedup_core import runtime
from near_dedup_core.config import NearDedupConfig, validate_model
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.formats.release import FILE as RELEASE_FILE
from near_dedup_core.formats.release import FORMAT as RELEASE_FORMAT
from near_dedup_core.formats.release import FORMAT_VERSION as RELEASE_FORMAT_VERSION
from near_dedup_core.formats.release import (
    ReleasedContamination,
    ReleasedInput,
    ReleasedMixture,
    ReleasedReport,
    ReleaseRecord,
    read_release,
)
from near_dedup_core.fsutil import (
    CHECKSUMS,
    atomic_dir,
    read_json_object,
    sha256_file,
    verify_checksums,
    write_checksums,
    write_json,
)
from near_dedup_core.ingest.run import IndexResult, index_packages
from near_dedup_core.mixture import MixtureConfig, build_mixture, verify_mixture
from near_dedup_core.package import Package, open_packages, validate_packages
from near_dedup_core.report import load_manifest, report_manifest, verify_report
from near_dedup_core.scan import scan_pool
from near_dedup_core.storage import Location, parse_location

from near_dedup_assets.locations import (
    checked,
    is_folder,
    local,
    naming,
    package_folders,
    publish_folder,
    staged,
)
from near_dedup_assets.resources import ENV_PREFIX, ReleaseSettings, resolve_location

#: Mixture fields that the release fills in per day; a template must not set them.
PER_DAY_MIXTURE_FIELDS = ("name", "inputs", "near_dedup_report", "contamination_report")


@dataclass(frozen=True)
class DayPool:
    """The input pool of one release day: its packages in name order."""

    day: str
    folder: Location
    packages: list[Package]

    @property
    def paths(self) -> list[Path | str]:
        return [p.path for p in self.packages]

    @property
    def identities(self) -> list[tuple[str, str]]:
        return [(p.package_id, p.manifest_sha256) for p in self.packages]

    @property
    def records(self) -> int:
        return sum(p.record_count for p in self.packages)


def day_package_paths(settings: ReleaseSettings, day: str) -> list[Location]:
    """Package folders of ``day``; a missing or empty snapshot folder is an error."""
    folder = settings.snapshot_dir(day)
    if not is_folder(folder):
        raise NearDedupError(f"release day {day}: snapshot folder {folder} does not exist")
    paths = package_folders(folder)
    if not paths:
        raise NearDedupError(f"release day {day}: snapshot folder {folder} holds no package "
                             f"folders")
    return paths


def no_release(settings: ReleaseSettings, day: str) -> str | None:
    """Why there is no release on ``day`` (its snapshot folder does not exist), or None when
    it has a snapshot folder. A day whose report, mixture or release record exists without
    its snapshot folder (the folder was removed after the release) is an error, not a day
    without a release."""
    folder = settings.snapshot_dir(day)
    if is_folder(folder):
        return None
    for label, output in (("report", settings.report_dir(day)),
                          ("mixture", settings.mixture_dir(day)),
                          ("release record", settings.release_dir(day))):
        if output.exists():
            raise NearDedupError(f"release day {day}: snapshot folder {folder} does not exist, "
                                 f"but the day's {label} {output} does; restore the snapshot "
                                 f"folder to release the day again")
    return f"no release on {day}: no snapshot folder {folder}"


def is_no_release_day(settings: ReleaseSettings, day: str) -> bool:
    """`no_release` as a question: no snapshot folder and nothing released that day."""
    try:
        return no_release(settings, day) is not None
    except NearDedupError:
        return False


def _check_kind(settings: ReleaseSettings, packages: Iterable[Package]) -> None:
    kind = settings.release_kind
    for pkg in packages:
        if pkg.kind != kind:
            raise NearDedupError(f"{where(pkg.package_id, 'manifest.json')}: kind {pkg.kind}, "
                                 f"but this release is {kind} ({ENV_PREFIX}KIND)")


def validate_day(settings: ReleaseSettings, day: str) -> DayPool:
    """Full validation of the day's packages (every line), as `snapshot validate` does."""
    paths = day_package_paths(settings, day)
    packages = validate_packages(paths)
    _check_kind(settings, packages)
    return DayPool(day, settings.snapshot_dir(day), packages)


def open_day(settings: ReleaseSettings, day: str) -> DayPool:
    """The day's packages after the cheap manifest checks (the core re-validates lines)."""
    paths = day_package_paths(settings, day)
    packages = open_packages(paths)
    _check_kind(settings, packages)
    return DayPool(day, settings.snapshot_dir(day), packages)


def unindexed_earlier_days(settings: ReleaseSettings, day: str, days: Sequence[str],
                           indexed: set[str]) -> list[str]:
    """Release days before ``day`` that have a snapshot folder but no index append yet.

    Appends run in day order; a day whose snapshot never arrived does not block later days.
    """
    return [d for d in days if d < day and d not in indexed
            and is_folder(settings.snapshot_dir(d))]


def index_day(settings: ReleaseSettings, pool: DayPool) -> IndexResult:
    with runtime.command("index", inputs=pool.paths, workers=settings.worker_count,
                         executor=settings.executor_kind, index=settings.index_path):
        return index_packages(settings.index_path, settings.dedup_config(), pool.paths,
                              workers=settings.worker_count,
                              executor=settings.executor_kind, progress=False)


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class ReportOutcome:
    path: Location
    manifest: dict
    reused: bool

    @property
    def folder(self) -> Path:
        """The report as a local folder (on object storage: fetched once)."""
        return local(self.path)


def _staging(target: Path) -> Path:
    return target.with_name(f".{target.name}.staging-{os.getpid()}")


def _label(identities: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{pid} ({sha[:12]}…)" for pid, sha in identities) or "none"


def later_batch_packages(manifest: dict, pool: DayPool) -> list[str]:
    """Packages the index had appended after the batch that holds the day's packages."""
    batches = {p["package_id"]: p["batch"] for p in manifest["index"]["packages"]}
    day_batch = max(batches[p.package_id] for p in pool.packages)
    return sorted(pid for pid, batch in batches.items() if batch > day_batch)


def _reuse_report(target: Location, pool: DayPool, config: NearDedupConfig) -> dict:
    folder = local(target, fresh=True)
    with naming(target, folder):
        return _reuse_folder(target, folder, pool, config)


def _reuse_folder(target: Location, folder: Path, pool: DayPool, config: NearDedupConfig) -> dict:
    manifest = load_manifest(folder)
    frozen = [(i["package_id"], i["manifest_sha256"]) for i in manifest["inputs"]]
    hint = f"frozen reports are never replaced: move {target} away to rescan day {pool.day}"
    if frozen != pool.identities:
        raise NearDedupError(f"report {target} was frozen for inputs {_label(frozen)}, but day "
                             f"{pool.day} has {_label(pool.identities)}; {hint}")
    if manifest.get("config_fingerprint") != config.fingerprint():
        raise NearDedupError(f"report {target} was frozen with another near-dedup config "
                             f"(fingerprint {str(manifest.get('config_fingerprint'))[:12]}…, "
                             f"now {config.fingerprint()[:12]}…); {hint}")
    try:
        verify_report(folder)
    except NearDedupError as exc:
        raise NearDedupError(f"{exc}; {hint}") from None
    return manifest


def reuse_report(target: Location, pool: DayPool, config: NearDedupConfig) -> ReportOutcome:
    """The frozen report at ``target`` if it was made from the day's inputs and config and
    still verifies (an error otherwise)."""
    return ReportOutcome(target, _reuse_report(target, pool, config), reused=True)


def freeze_report(settings: ReleaseSettings, pool: DayPool) -> ReportOutcome:
    """The day's frozen report: the existing one if it matches, else a new scan."""
    target = settings.report_dir(pool.day)
    config = settings.dedup_config()
    if target.exists():
        return reuse_report(target, pool, config)
    with staged(target, _staging) as staging:
        with runtime.command("scan", inputs=pool.paths, workers=settings.worker_count,
                             executor=settings.executor_kind, index=settings.index_path):
            scan_pool(settings.index_path, config, pool.paths, staging,
                      workers=settings.worker_count, executor=settings.executor_kind,
                      progress=False)
        manifest = load_manifest(staging)
        later = later_batch_packages(manifest, pool)
        if later:
            raise NearDedupError(
                f"release day {pool.day}: index {settings.index_label} already holds packages "
                f"appended after this day ({', '.join(later)}); its report would count them as "
                f"history. Release days in order (a backfill does), or rebuild the index")
        _put(staging, target)
    return ReportOutcome(target, manifest, reused=False)


def _put(staging: Path, target: Location) -> None:
    """Publish the complete ``staging`` folder at ``target``: a rename on this machine, the
    storage layer's publication on object storage."""
    if target.local_path is not None:
        os.rename(staging, target.local_path)
    else:
        publish_folder(staging, target)


# --------------------------------------------------------------------------- mixture


def mixture_config(settings: ReleaseSettings, pool: DayPool,
                   report: Location | None) -> MixtureConfig:
    """The day's mixture: the template's fields plus name, inputs and (near-dedup on) report."""
    path = settings.template_path
    raw = read_json_object(path, "mixture template")
    for key in PER_DAY_MIXTURE_FIELDS:
        if key in raw:
            raise NearDedupError(f"mixture template {path}: {key!r} is filled in per release "
                                 f"day; remove it from the template")
    kind = settings.release_kind
    if raw.setdefault("kind", kind) != kind:
        raise NearDedupError(f"mixture template {path}: kind {raw['kind']!r}, but this release "
                             f"is {kind} ({ENV_PREFIX}KIND)")
    raw["name"] = settings.mixture_name(pool.day)
    raw["inputs"] = [str(p) for p in pool.paths]
    raw["near_dedup_report"] = None if report is None else str(report)
    if settings.evals_dir is not None:  # the contamination step runs: its report filters
        contamination = settings.contamination_dir(pool.day)
        if not is_folder(contamination):
            raise NearDedupError(f"release day {pool.day}: no contamination report at "
                                 f"{contamination}; materialize contamination_report first")
        raw["contamination_report"] = str(contamination)
    return validate_model(MixtureConfig, raw, f"mixture template {path}")


def publish(target: Location, build: Callable[[Path], object], verify: Callable[[Path], object],
            label: str) -> bool:
    """Build into a staging folder and publish it at ``target`` (`_put`); True if ``target``
    existed with identical content (checksums) and was kept, an error if it differs."""
    with staged(target, _staging) as staging:
        build(staging)
        if not target.exists():
            _put(staging, target)
            return False
        def published_checksums(folder: Path) -> bytes:
            verify(folder)
            return (folder / CHECKSUMS).read_bytes()

        if (staging / CHECKSUMS).read_bytes() != checked(target, published_checksums):
            raise NearDedupError(f"{label} {target} already exists with other content than "
                                 f"this build (checksums differ); published outputs are never "
                                 f"replaced: move it away to rebuild")
        return True


@dataclass(frozen=True)
class MixtureOutcome:
    path: Location
    config: MixtureConfig
    manifest: dict
    plan: dict
    reused: bool
    manifest_sha256: str


def build_day_mixture(settings: ReleaseSettings, pool: DayPool,
                      report: Location | None) -> MixtureOutcome:
    """Build (or keep the identical published) mixture of the day. Its manifest and plan are
    read from the build (the published mixture holds the same bytes: same checksums)."""
    cfg = mixture_config(settings, pool, report)
    target = settings.mixture_dir(pool.day)
    built: dict = {}

    def build(out: Path) -> None:
        with runtime.command("mixture"):
            build_mixture(cfg, out, progress=False)
        built["manifest"] = read_json_object(out / "manifest.json", "mixture")
        built["plan"] = read_json_object(out / "plan.json", "mixture")
        built["sha256"] = sha256_file(out / "manifest.json")

    reused = publish(target, build, verify_mixture, "mixture")
    return MixtureOutcome(target, cfg, built["manifest"], built["plan"], reused,
                          built["sha256"])


# --------------------------------------------------------------------------- release record


def release_record(settings: ReleaseSettings, pool: DayPool, report: Location | None,
                   mixture: MixtureOutcome) -> ReleaseRecord:
    """What was released on the day: inputs, report, contamination report (when the mixture
    used one) and mixture, with their manifest hashes."""
    inputs = [ReleasedInput(package_id=p.package_id, manifest_sha256=p.manifest_sha256,
                            records=p.record_count,
                            path=_relative(p.location, settings.snapshot_root))
              for p in pool.packages]
    released = ReleasedMixture(name=mixture.config.name,
                               path=_relative(mixture.path, settings.mixture_root),
                               manifest_sha256=mixture.manifest_sha256,
                               counts=mixture.manifest["counts"])
    index, frozen = None, None
    if report is not None:
        folder = local(report)
        manifest = report_manifest(folder)[0]
        index = settings.index_label
        frozen = ReleasedReport(path=_relative(report, settings.report_root),
                                manifest_sha256=sha256_file(folder / "manifest.json"),
                                config_fingerprint=manifest.config_fingerprint,
                                counts=manifest.counts)
    contamination = None
    if mixture.config.contamination_report is not None:  # only then: older records unchanged
        where = parse_location(mixture.config.contamination_report)
        folder = local(where)
        raw = read_json_object(folder / "manifest.json", "contamination report")
        contamination = ReleasedContamination(
            path=_relative(where, settings.contamination_root),
            manifest_sha256=sha256_file(folder / "manifest.json"), counts=raw.get("counts"))
    return ReleaseRecord(format=RELEASE_FORMAT, format_version=RELEASE_FORMAT_VERSION,
                         day=pool.day, kind=settings.kind, near_dedup=report is not None,
                         inputs=inputs, index=index, report=frozen, mixture=released,
                         contamination=contamination)


def portable_mixture_config(settings: ReleaseSettings, cfg: MixtureConfig) -> dict:
    """The day's mixture config as the release record keeps it: its paths relative to their
    roots, as in release.json."""
    raw = cfg.model_dump(mode="json")
    raw["inputs"] = [_relative(parse_location(p), settings.snapshot_root) for p in cfg.inputs]
    for key, root in (("near_dedup_report", settings.report_root),
                      ("contamination_report", settings.contamination_root)):
        if raw.get(key) is not None:
            raw[key] = _relative(parse_location(raw[key]), root)
    return raw


def _relative(where: Location, root: str) -> str:
    """``where`` relative to the release root ``root`` (as a POSIX path), on this machine or
    below a URL root alike; a URL outside its root as it is."""
    base = resolve_location(root)
    if where.local_path is not None and base.local_path is not None:
        return Path(os.path.relpath(where.local_path, base.local_path)).as_posix()
    if where.local_path is None and base.local_path is None \
            and where.url.startswith(base.url + "/"):
        return where.url[len(base.url) + 1:]
    return where.url


def write_release_record(settings: ReleaseSettings, pool: DayPool, report: Location | None,
                         mixture: MixtureOutcome) -> tuple[Location, bool]:
    """``<release_root>/<kind>-<day>/``: release.json, the day's mixture.json (paths relative to
    their roots), checksums."""
    record = release_record(settings, pool, report, mixture)

    def build(out: Path) -> None:
        with atomic_dir(out) as tmp:
            write_json(tmp / RELEASE_FILE, record.to_json())
            write_json(tmp / "mixture.json", portable_mixture_config(settings, mixture.config))
            write_checksums(tmp)

    target = settings.release_dir(pool.day)
    reused = publish(target, build, verify_release_record, "release record")
    return target, reused


def verify_release_record(folder: Path) -> ReleaseRecord:
    """A published release record: its checksums pass and its ``release.json`` is a
    `ReleaseRecord`."""
    verify_checksums(folder, "release record")
    return read_release(folder)
