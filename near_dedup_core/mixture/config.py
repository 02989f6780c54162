"""Mixture stage 0, the config: `MixtureConfig` with its weighting strategies and quality
filter, read and validated by `load_mixture_config` (docs/contract.md §5)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from near_dedup_core.config import validate_model
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import read_json_object
from near_dedup_core.package import ID_PATTERN

DEFAULT_RETAINED_SPLITS = ("validation",)

Weight = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class _Weights(BaseModel):
    """Explicit per-domain weights; normalized by their sum, which must be positive."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    weights: dict[str, Weight] = Field(min_length=1)

    @model_validator(mode="after")
    def _positive_sum(self) -> "_Weights":
        if sum(self.weights.values()) <= 0:
            raise ValueError("weights must not all be 0")
        return self


class FixedStrategy(_Weights):
    """Weights given by the config."""

    type: Literal["fixed"]


class LearnedStrategy(_Weights):
    """Weights learned elsewhere (DoReMi, RegMix) on a given pool; used like fixed weights."""

    type: Literal["doremi", "regmix"]


class TemperatureStrategy(BaseModel):
    """w_i ∝ n_i^(1/T): T = 1 is proportional to size, larger T flattens towards uniform."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["temperature"]
    temperature: float = Field(gt=0.0, allow_inf_nan=False)


Strategy = Annotated[Union[FixedStrategy, TemperatureStrategy, LearnedStrategy],
                     Field(discriminator="type")]


class QualityFilter(BaseModel):
    """Per-sample quality filters applied after dedup, before selection."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    min_chars: int = Field(0, ge=0)


class MixtureConfig(BaseModel):
    """A mixture config file (docs/contract.md §5)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(pattern=f"^{ID_PATTERN}$")
    kind: Literal["cpt", "sft"]
    inputs: list[str] = Field(min_length=1)
    target_records: int = Field(ge=1)
    group_by: str = Field("domain", min_length=1)
    strategy: Strategy
    quality: QualityFilter = Field(default_factory=QualityFilter)
    allow_shortfall: bool = False
    redistribute: bool = False
    seed: int = Field(0, ge=0)
    near_dedup_report: str | None = None
    contamination_report: str | None = None
    retained_splits: list[str] | None = None

    @model_validator(mode="after")
    def _learned_weights_need_the_undeduplicated_pool(self) -> "MixtureConfig":
        if self.near_dedup_report is not None and self.strategy.type in ("doremi", "regmix"):
            raise ValueError(
                f"strategy {self.strategy.type} cannot be combined with near_dedup_report: its "
                f"weights were learned on the undeduplicated pool and would be applied to a "
                f"different, deduplicated one; use fixed or temperature, or drop the report")
        return self

    def strategy_label(self) -> str:
        if isinstance(self.strategy, TemperatureStrategy):
            return f"temperature T={self.strategy.temperature:g}"
        return self.strategy.type


def load_mixture_config(path: str | Path) -> MixtureConfig:
    """Read and validate a mixture config; every error is one line naming the file."""
    path = Path(path)
    raw = read_json_object(path, "mixture config")
    if "name" not in raw and "inputs" not in raw:
        raise NearDedupError(f"mixture config {path}: no name and no inputs: a daily-release "
                             f"template (NEAR_DEDUP_MIXTURE_TEMPLATE), completed per day by the "
                             f"release; give the CLI a full config such as "
                             f"config/mixture-example.json")
    return validate_model(MixtureConfig, raw, f"mixture config {path}")
