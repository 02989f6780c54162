"""Release settings: one Dagster resource whose fields come from ``NEAR_DEDUP_*`` variables.

Every field ``x`` is read from ``NEAR_DEDUP_<X>`` when a run starts: the process environment
with the ``.env`` file of the working directory on top (the file wins, as with Dagster's CLI,
which reads it only once, when it starts). So an edited `.env` takes effect in the next run,
without reloading the code location. Unset variables fall back to the defaults below, which
release the bundled sample days into ``data/release/``. Relative paths are relative to the
working directory of the Dagster process (the project root under `dg dev`). The
settings are also read and validated when the code location loads, so a bad value stops the
load with its message instead of failing every run.

The snapshot, report, mixture, release and contamination roots and the eval folder may be
URLs of object storage (``s3://bucket/prefix``, see ``docs/storage.md``): a location below a
URL root is then on object storage, below a local root an absolute local folder (either way a
`near_dedup_core.storage.Location`).

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
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import dagster as dg
from dotenv import dotenv_values
from pydantic import Field, ValidationError

from near_dedup_core.config import NearDedupConfig, load_config
from near_dedup_core.errors import NearDedupError
from near_dedup_core.storage import Location, is_url, parse_location

ENV_PREFIX = "NEAR_DEDUP_"
#: The settings file read at the start of every run, relative to the working directory.
ENV_FILE = ".env"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
FLAG_VALUES = "true or false (also 1/0, yes/no, on/off)"


class ReleaseSettings(dg.ConfigurableResource):
    """Where the daily release reads snapshots and writes index, reports, mixtures, records.

    Typed fields: a value of the environment (a string) is parsed by pydantic as the field's
    type, and a bad one is a `NearDedupError` naming its variable (`settings_from_env`).
    """

    snapshot_root: str = "samples/cpt"
    snapshot_day_format: str = "%Y-%m-%d"
    kind: Literal["cpt", "sft"] = "cpt"
    index: str = "data/release/index/cpt-near.sqlite"
    config: str = "config/near-dedup.json"
    report_root: str = "data/release/reports"
    mixture_root: str = "data/release/mixtures"
    release_root: str = "data/release/releases"
    mixture_template: str = "config/mixture-template.json"
    #: true/false (also 1/0, yes/no, on/off).
    enabled: bool = True
    #: Worker processes for index and scan; 0: one per CPU core.
    workers: int = Field(default=0, ge=0)
    executor: Literal["local", "ray"] = "local"
    #: Largest share (0–1) of a domain's or package's samples a day may exclude.
    max_exclusion_rate: float = Field(default=0.5, ge=0.0, le=1.0)
    #: Largest rise (0–1, absolute) of a domain's exclusion rate over the previous day.
    max_rate_jump: float = Field(default=0.2, ge=0.0, le=1.0)
    evals: str = ""
    contamination_root: str = "data/release/contamination"

    # ----------------------------------------------------------------- parsed values

    def validate_values(self) -> None:
        """Every value parses, the near-dedup config file included."""
        self.dedup_config()

    @property
    def near_dedup_enabled(self) -> bool:
        """The near-dedup switch: off → no index append, no scan, mixtures without a report."""
        return self.enabled

    @property
    def release_kind(self) -> str:
        return self.kind

    @property
    def executor_kind(self) -> str:
        """Where index and scan run their parallel work: local processes or a Ray cluster
        (``RAY_ADDRESS``, read by Ray itself)."""
        return self.executor

    @property
    def worker_count(self) -> int:
        """Worker processes for index and scan; 0 means one per CPU core."""
        return self.workers or os.cpu_count() or 1

    @property
    def exclusion_rate_limit(self) -> float:
        return self.max_exclusion_rate

    @property
    def rate_jump_limit(self) -> float:
        return self.max_rate_jump

    def dedup_config(self) -> NearDedupConfig:
        """The near-dedup config file (empty setting: the shipped defaults)."""
        return load_config(resolve_path(self.config) if self.config.strip() else None)

    # ----------------------------------------------------------------- locations

    @property
    def index_path(self) -> Path | str:
        """The index: an absolute SQLite path, or a ``postgresql://`` or ``iceberg://``
        location as given."""
        from near_dedup_core.index_store import open_index

        index = open_index(self.index.strip())
        return resolve_path(self.index) if index.file is not None else index.location

    @property
    def index_label(self) -> str:
        """The index for messages and release records: a PostgreSQL URL without password."""
        from near_dedup_core.index_store import open_index

        return open_index(self.index_path).label

    @property
    def template_path(self) -> Path:
        return resolve_path(self.mixture_template)

    def snapshot_dir(self, day: str) -> Location:
        """The folder whose package subfolders form the input pool of ``day``."""
        try:
            name = date.fromisoformat(day).strftime(self.snapshot_day_format)
        except ValueError as exc:
            raise NearDedupError(f"release day {day!r}: {exc}") from None
        return resolve_location(self.snapshot_root).child(name)

    def report_dir(self, day: str) -> Location:
        return resolve_location(self.report_root).child(f"near-{self.release_kind}-{day}")

    def mixture_dir(self, day: str) -> Location:
        return resolve_location(self.mixture_root).child(f"{self.release_kind}-mix-{day}")

    def release_dir(self, day: str) -> Location:
        return resolve_location(self.release_root).child(f"{self.release_kind}-{day}")

    @property
    def evals_dir(self) -> Location | None:
        """The folder of eval packages (``NEAR_DEDUP_EVALS``); None: no contamination step."""
        return resolve_location(self.evals) if self.evals.strip() else None

    def contamination_dir(self, day: str) -> Location:
        return resolve_location(self.contamination_root).child(
            f"contamination-{self.release_kind}-{day}")

    def mixture_name(self, day: str) -> str:
        return self.mixture_dir(day).name


def resolve_path(value: str) -> Path:
    """An absolute path: relative settings are taken from the current working directory."""
    return Path(os.path.abspath(Path(value).expanduser()))


def resolve_location(value: str) -> Location:
    """A root setting: a URL as given (without a trailing ``/``), else `resolve_path`."""
    url = value.strip()
    return parse_location(url.rstrip("/") if is_url(url) else resolve_path(value))



def parse_flag(variable: str, value: str) -> bool:
    """A true/false setting (1/0, yes/no, on/off too); anything else names ``variable``."""
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise NearDedupError(f"{variable}={value!r}: expected {FLAG_VALUES}")


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def current_environment(env_file: str | Path = ENV_FILE) -> dict[str, str]:
    """The process environment with ``env_file``'s values on top (no file: unchanged).

    A variable deleted from the file keeps the value the process started with.
    """
    values = dict(os.environ)
    path = Path(env_file)
    if path.is_file():
        values.update({k: v for k, v in dotenv_values(path).items() if v is not None})
    return values


def settings_from_env(environ: Mapping[str, str] | None = None) -> ReleaseSettings:
    """Settings from ``NEAR_DEDUP_<FIELD>`` variables (unset: the field default), validated.

    Any bad value (a non-integer worker count, an unknown kind, an unreadable near-dedup
    config, ...) is a `NearDedupError` naming the variable.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {field: environ[env_name(field)]
                              for field in ReleaseSettings.model_fields
                              if env_name(field) in environ}
    try:
        settings = ReleaseSettings(**values)
    except ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0])
        raise NearDedupError(f"{env_name(field)}={values.get(field)!r}: expected "
                             f"{allowed_values(field)}") from None
    settings.validate_values()
    return settings


def allowed_values(field: str) -> str:
    """What the setting of ``field`` accepts, in words: its choices, or its type and range."""
    info = ReleaseSettings.model_fields[field]
    if get_origin(info.annotation) is Literal:
        return "one of " + ", ".join(str(choice) for choice in get_args(info.annotation))
    if info.annotation is bool:
        return FLAG_VALUES
    low = next((m.ge for m in info.metadata if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in info.metadata if getattr(m, "le", None) is not None), None)
    if info.annotation is int:
        return "a whole number" + ("" if low is None else f", {low} or more")
    if info.annotation is float and low is not None and high is not None:
        return f"a number from {low:g} to {high:g}"
    return f"a {getattr(info.annotation, '__name__', 'value')}"


#: Set by Dagster while `dg check defs` (`dagster definitions validate`) loads the code
#: location: "can be used to control the behavior of your code in validation mode".
VALIDATION_MODE_VAR = "DAGSTER_IS_DEFS_VALIDATION_CLI"


@contextmanager
def one_line_when_validating() -> Iterator[None]:
    """A bad setting met while the code location loads under `dg check defs`: one line
    ``near-dedup: error: <VARIABLE>='<value>': expected …`` on stderr and exit 1, instead of
    Dagster's report of a failed import with its stack trace. Elsewhere (the webserver, a
    test's import) the error propagates unchanged: the UI shows it as the location's error."""
    try:
        yield
    except NearDedupError as exc:
        if not os.environ.get(VALIDATION_MODE_VAR):
            raise
        print(f"near-dedup: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(exc.exit_code) from None


@dg.resource(
    config_schema={"env_file": dg.Field(str, default_value=ENV_FILE, description=(
        "settings file read when each run starts, on top of the environment"))},
    description="Release settings from NEAR_DEDUP_* variables, read when each run starts "
                "(environment, then the .env file of the working directory).",
)
def release_settings_at_run_start(context: dg.InitResourceContext) -> ReleaseSettings:
    """The ``release`` resource of the code location: `settings_from_env` over
    `current_environment`, evaluated anew for every run."""
    return settings_from_env(current_environment(context.resource_config["env_file"]))
