"""Release settings: one Dagster resource whose fields come from ``NEAR_DEDUP_*`` variables.

Every field ``x`` is read from ``NEAR_DEDUP_<X>`` when the run starts (`dg.EnvVar`), so the
`.env` that `dagster dev` loads drives the whole release; unset variables fall back to the
defaults below, which release the bundled sample days into ``data/release/``. Relative
paths are relative to the working directory of the Dagster process (the project root under
`dagster dev`).

Per day (partition key ``YYYY-MM-DD``) the settings name every location of the release:

========================  ==================================================
snapshot folder           ``<snapshot_root>/<day formatted by snapshot_day_format>``
report                    ``<report_root>/near-<kind>-<day>``
mixture                   ``<mixture_root>/<kind>-mix-<day>``
release record            ``<release_root>/<kind>-<day>``
contamination report      ``<contamination_root>/contamination-<kind>-<day>``
========================  ==================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import date
from pathlib import Path

import dagster as dg

from near_dedup_core.config import NearDedupConfig, load_config
from near_dedup_core.errors import NearDedupError

ENV_PREFIX = "NEAR_DEDUP_"
KINDS = ("cpt", "sft")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ReleaseSettings(dg.ConfigurableResource):
    """Where the daily release reads snapshots and writes index, reports, mixtures, records."""

    snapshot_root: str = "samples/cpt"
    snapshot_day_format: str = "%Y-%m-%d"
    kind: str = "cpt"
    index: str = "data/release/index/cpt-near.sqlite"
    config: str = "config/near-dedup.json"
    report_root: str = "data/release/reports"
    mixture_root: str = "data/release/mixtures"
    release_root: str = "data/release/releases"
    mixture_template: str = "config/mixture-template.json"
    enabled: str = "true"
    workers: int = 0
    evals: str = ""
    contamination_root: str = "data/release/contamination"

    # ----------------------------------------------------------------- parsed values

    @property
    def near_dedup_enabled(self) -> bool:
        """The near-dedup switch: off → no index append, no scan, mixtures without a report."""
        value = self.enabled.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise NearDedupError(f"{ENV_PREFIX}ENABLED={self.enabled!r}: expected true or false")

    @property
    def release_kind(self) -> str:
        if self.kind not in KINDS:
            raise NearDedupError(f"{ENV_PREFIX}KIND={self.kind!r}: expected cpt or sft")
        return self.kind

    @property
    def worker_count(self) -> int:
        """Worker processes for index and scan; 0 means one per CPU core."""
        if self.workers < 0:
            raise NearDedupError(f"{ENV_PREFIX}WORKERS={self.workers}: must be 0 (all cores) "
                                 f"or more")
        return self.workers or os.cpu_count() or 1

    def dedup_config(self) -> NearDedupConfig:
        """The near-dedup config file (empty setting: the shipped defaults)."""
        return load_config(_path(self.config) if self.config.strip() else None)

    # ----------------------------------------------------------------- locations

    @property
    def index_path(self) -> Path:
        return _path(self.index)

    @property
    def template_path(self) -> Path:
        return _path(self.mixture_template)

    def snapshot_dir(self, day: str) -> Path:
        """The folder whose package subfolders form the input pool of ``day``."""
        try:
            name = date.fromisoformat(day).strftime(self.snapshot_day_format)
        except ValueError as exc:
            raise NearDedupError(f"release day {day!r}: {exc}") from None
        return _path(self.snapshot_root) / name

    def report_dir(self, day: str) -> Path:
        return _path(self.report_root) / f"near-{self.release_kind}-{day}"

    def mixture_dir(self, day: str) -> Path:
        return _path(self.mixture_root) / f"{self.release_kind}-mix-{day}"

    def release_dir(self, day: str) -> Path:
        return _path(self.release_root) / f"{self.release_kind}-{day}"

    @property
    def evals_dir(self) -> Path | None:
        """The folder of eval packages (``NEAR_DEDUP_EVALS``); None: no contamination step."""
        return _path(self.evals) if self.evals.strip() else None

    def contamination_dir(self, day: str) -> Path:
        return _path(self.contamination_root) / f"contamination-{self.release_kind}-{day}"

    def mixture_name(self, day: str) -> str:
        return self.mixture_dir(day).name


def _path(value: str) -> Path:
    """An absolute path: relative settings are taken from the current working directory."""
    return Path(os.path.abspath(Path(value).expanduser()))


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def settings_from_env(environ: Mapping[str, str] | None = None) -> ReleaseSettings:
    """Settings whose fields are bound to ``NEAR_DEDUP_<FIELD>`` where that variable is set.

    Bound fields are resolved by Dagster when a run starts, so editing `.env` and reloading
    the code location is enough; unset variables keep the field default.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for field, info in ReleaseSettings.model_fields.items():
        name = env_name(field)
        if name in environ:
            values[field] = dg.EnvVar.int(name) if info.annotation is int else dg.EnvVar(name)
    return ReleaseSettings(**values)
