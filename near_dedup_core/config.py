"""The near-dedup configuration: one pydantic model, loaded from JSON, unknown keys refused.

An index is bound to the fingerprint of the whole configuration plus the algorithm version
(`fingerprint`), so any change of threshold, shingling, banding, limits or guard rules needs
a new index path.

Banding: ``bands`` × ``rows`` must equal ``num_perm`` (every permutation in exactly one band).
With ``bands`` × ``rows`` the probability that a pair with Jaccard ``s`` becomes an
LSH candidate is ``1 - (1 - s**rows) ** bands``. The shipped 16 × 8 over 128 permutations gives
0.99988 at s = 0.9 (≥ 99.9 % recall by the S-curve) and 0.947 at s = 0.8. Fewer rows raise
recall but flood verification with templated pairs at J 0.6–0.8; more rows (e.g. 14 × 9) drop
recall at 0.9 below 99.9 %.

``max_candidates`` bounds the LSH candidate set of one sample (pool and history together).
Real templated text is candidate-heavy (man pages, generated CLI pages), so the shipped limit
sits several times above the largest candidate set measured on real documents
(docs/benchmarks.md, "Recall and precision"): it stops pathological pools (one template
repeated tens of thousands of times) without refusing real ones.

Contamination (``near-dedup contamination``, see contamination.py): ``contamination_threshold``
is the containment at or above which an evaluation item counts as leaked into a training
sample, ``contamination_min_chars`` the normalized length below which an item is found by
its words as one exact run instead, ``contamination_common_samples`` the number of training
samples from which a matched item is common text of the pool (set aside, not contamination),
``contamination_template_samples`` the number of training samples from which an item's
matches with a word changed are a template of the pool (those set aside),
``contamination_allowlist`` a file of public text expected in the pool. None changes a row of
the index, so all are left out of the index fingerprint: an index built before these keys
existed, or with other values of them, stays usable.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core.errors import LimitExceeded
from near_dedup_core.fsutil import read_json_object, validate_model

__all__ = ["ExtraUnits", "NearDedupConfig", "load_config", "validate_model"]


#: Config keys that change no index row (contamination only): outside the fingerprint.
NOT_FINGERPRINTED = ("contamination_threshold", "contamination_min_chars",
                     "contamination_common_samples", "contamination_template_samples",
                     "contamination_allowlist")


class ExtraUnits(BaseModel):
    """Unit tokens added to the numeric/unit guard, for some domains or (empty list) all."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tokens: list[str] = Field(min_length=1)
    domains: list[str] = Field(default_factory=list)


class NearDedupConfig(BaseModel):
    """All parameters of normalization, signatures, LSH, verification, limits and the guard.

    Strict types: a JSON string, boolean or fraction where a number or an integer belongs is
    refused, never coerced (``"threshold": "0.9"``, ``"num_perm": "128"``, ``true``); an
    integer is accepted for a float (``"threshold": 1``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

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
    contamination_threshold: float = Field(0.8, gt=0.0, le=1.0)
    contamination_min_chars: int = Field(50, ge=1)
    contamination_common_samples: int = Field(10, ge=2)
    contamination_template_samples: int = Field(3, ge=2)
    contamination_allowlist: str | None = None

    @model_validator(mode="after")
    def _banding_fits(self) -> "NearDedupConfig":
        # LSH bands use every permutation exactly once: fewer leave signature values that no
        # band reads (a silent misconfiguration), more cannot be built.
        if self.bands * self.rows != self.num_perm:
            relation = "exceeds" if self.bands * self.rows > self.num_perm else "is less than"
            raise ValueError(
                f"bands × rows = {self.bands} × {self.rows} = {self.bands * self.rows} "
                f"{relation} num_perm = {self.num_perm}; they must be equal"
            )
        return self

    def check_pool_records(self, total: int, advice: str = "") -> None:
        """An input pool over ``max_pool_records`` is a limit (exit 2), never truncated."""
        if total > self.max_pool_records:
            raise LimitExceeded(f"input pool has {total:,} records, over max_pool_records "
                                f"{self.max_pool_records:,}{advice}")

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def fingerprint(self, algorithm_version: str = ALGORITHM_VERSION) -> str:
        """sha256 over the algorithm version and the canonical config without the keys that
        do not affect index rows (`NOT_FINGERPRINTED`). The default version is this tool's; a
        report verifier passes the version the report was frozen with."""
        fields = self.model_dump(mode="json", exclude=set(NOT_FINGERPRINTED))
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        payload = f"{algorithm_version}\n{canonical}".encode()
        return hashlib.sha256(payload).hexdigest()


def load_config(path: str | Path | None) -> NearDedupConfig:
    """Read a JSON config file; None gives the shipped defaults."""
    if path is None:
        return NearDedupConfig()
    path = Path(path)
    return validate_model(NearDedupConfig, read_json_object(path, "config"), f"config {path}")
