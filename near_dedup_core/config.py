"""The near-dedup configuration: one pydantic model, loaded from JSON, unknown keys refused.

An index is bound to the fingerprint of the whole configuration plus the algorithm version
(`fingerprint`), so any change of threshold, shingling, banding, limits or guard rules needs
a new index path.

Banding: with ``bands`` × ``rows`` the probability that a pair with Jaccard ``s`` becomes an
LSH candidate is ``1 - (1 - s**rows) ** bands``. The shipped 16 × 8 over 128 permutations gives
0.99988 at s = 0.9 (≥ 99.9 % recall by the S-curve) and 0.947 at s = 0.8. Fewer rows raise
recall but flood verification with templated pairs at J 0.6–0.8; more rows (e.g. 14 × 9) drop
recall at 0.9 below 99.9 %.

``max_candidates`` bounds the LSH candidate set of one sample (pool and history together).
Real templated text is candidate-heavy: on 20,000 real documents (man pages, copyright
files, docstrings; bench/) the distinct candidates per document had median 10, p99 994,
p99.9 1,211 and maximum 1,404 at 16 × 8, so the shipped limit is 10,000: it stops
pathological pools (one template repeated tens of thousands of times) without refusing real
ones.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import read_json_object


class ExtraUnits(BaseModel):
    """Unit tokens added to the numeric/unit guard, for some domains or (empty list) all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: list[str] = Field(min_length=1)
    domains: list[str] = Field(default_factory=list)


class NearDedupConfig(BaseModel):
    """All parameters of normalization, signatures, LSH, verification, limits and the guard."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(0.9, gt=0.0, le=1.0)
    shingle_size: int = Field(5, ge=1, le=32)
    num_perm: int = Field(128, ge=8, le=1024)
    bands: int = Field(16, ge=1)
    rows: int = Field(8, ge=1)
    seed: int = Field(1, ge=0, lt=2**32)
    min_chars: int = Field(80, ge=0)
    max_chars: int = Field(200_000, ge=1)
    max_candidates: int = Field(10_000, ge=1)
    max_pool_records: int = Field(1_000_000, ge=1)
    retained_splits: list[str] = Field(default_factory=lambda: ["validation"])
    extra_units: list[ExtraUnits] = Field(default_factory=list)

    @model_validator(mode="after")
    def _banding_fits(self) -> "NearDedupConfig":
        if self.bands * self.rows > self.num_perm:
            raise ValueError(
                f"bands × rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}"
            )
        return self

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        """sha256 over the canonical config and the algorithm version."""
        payload = f"{ALGORITHM_VERSION}\n{self.canonical_json()}".encode()
        return hashlib.sha256(payload).hexdigest()


def validate_model(model: type[BaseModel], raw: dict, label: str):
    """``model.model_validate(raw)`` with the first problem as one line naming ``label``."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        raise NearDedupError(f"{label}: {loc + ': ' if loc else ''}{msg}") from None


def load_config(path: str | Path | None) -> NearDedupConfig:
    """Read a JSON config file; None gives the shipped defaults."""
    if path is None:
        return NearDedupConfig()
    path = Path(path)
    return validate_model(NearDedupConfig, read_json_object(path, "config"), f"config {path}")
