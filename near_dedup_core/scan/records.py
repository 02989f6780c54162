"""The named records passed between the scan's stages.

``Sample`` and ``Pool`` come out of stage 1 (pool), ``Node`` groups a pool's samples,
``Candidates`` is what stages 2–3 (candidates, filters) hand to stage 4 (verify),
``Match`` is one verified relation and ``Decision`` one sample's outcome of stage 5 (decide).
``VerifyParams`` and ``Verified`` travel to and from the verify workers (both picklable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.package import Package


@dataclass(slots=True)
class Sample:
    """One sample of an input package, with its content's row id in the index."""

    input_pos: int
    package_id: str
    package_batch: int
    sample_id: str
    split: str
    file: str
    line: int
    position: int
    text_sha256: bytes
    domain: str | None
    source: str | None
    content: int  # contents.id


@dataclass
class Pool:
    """The input packages, their samples and contents, and the index state they were read in."""

    packages: list[Package]
    package_batch: dict[str, int]
    samples: list[Sample]
    content: dict[int, db.ContentRow]  # per content row id
    scope_labels: dict[int, str]
    index_packages: list[dict]
    index_batches: int
    index_contents: int


@dataclass
class Node:
    """One content within one split of the pool; samples in decision order."""

    content: int
    split: str
    samples: list[Sample] = field(default_factory=list)


@dataclass
class Candidates:
    """Filtered candidate pairs: pool pairs as node indexes (a < b), history pairs as
    (node index, history content rowid)."""

    pool_pairs: np.ndarray
    history_pairs: list[tuple[int, int]]
    history: dict[int, db.ContentRow]
    lsh_pairs: int = 0  # distinct candidate pairs before the filters


class Match(NamedTuple):
    """A verified relation of a later node: ``other`` is the earlier node's index (pool
    matches) or the history content's row id (history matches); ``blocked_by`` names the
    guard rule that keeps the two apart, None if none does."""

    other: int
    jaccard: float
    blocked_by: str | None


class Verified(NamedTuple):
    """A verify worker's answer for one pair at or above the threshold: its index in the
    worker's list of pairs, the exact Jaccard and the guard block."""

    pair: int
    jaccard: float
    blocked_by: str | None


@dataclass(frozen=True)
class VerifyParams:
    """What a verify worker needs of the config; the config travels as canonical JSON."""

    num_perm: int
    seed: int
    shingle_size: int
    threshold: float
    config_json: str

    @classmethod
    def of(cls, config: NearDedupConfig) -> VerifyParams:
        return cls(config.num_perm, config.seed, config.shingle_size, config.threshold,
                   config.canonical_json())


@dataclass(slots=True)
class Decision:
    """One sample's decision; ``kept`` is the kept sample an excluded one duplicates."""

    decision: str
    reason: str
    kept: Sample | None = None
    jaccard: float | None = None
