"""What a worker needs of the config: `WorkerParams`, the one record that travels to the
worker processes and Ray tasks of `index` (signing) and `scan` (verification), made of plain
values so that a worker neither imports the config's models (pydantic) nor validates the
config again for every chunk."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig


class UnitRule(NamedTuple):
    """Extra unit tokens of the numeric/unit guard, for these domains (none: all)."""

    tokens: tuple[str, ...]
    domains: tuple[str, ...]


class WorkerParams(NamedTuple):
    num_perm: int
    seed: int
    shingle_size: int
    bands: int
    rows: int
    min_chars: int
    max_chars: int
    threshold: float
    extra_units: tuple[UnitRule, ...]

    @classmethod
    def of(cls, config: NearDedupConfig) -> WorkerParams:
        return cls(config.num_perm, config.seed, config.shingle_size, config.bands,
                   config.rows, config.min_chars, config.max_chars, config.threshold,
                   tuple(UnitRule(tuple(rule.tokens), tuple(rule.domains))
                         for rule in config.extra_units))
