"""The records passed between the scan's stages.

A pool of a million samples is held as columns (numpy arrays and plain lists), never as one
Python object per sample or content: ``Samples`` and ``Pool`` come out of stage 1 (pool),
``Nodes`` groups a pool's samples, ``Candidates`` is what stages 2–3 (candidates, filters)
hand to stage 4 (verify), ``Matches`` are its verified relations and ``Decisions`` the
outcome of stage 5 (decide); ``ReportColumns`` is what stage 6 (write) prepares while the
workers verify. ``Verified`` travels back from the verify workers (picklable; what they
need of the config is `params.WorkerParams`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.package import Package


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array: ``np.unique`` by sorting (numpy 2's
    ``np.unique`` without options hashes instead, about ten times slower on a million
    values)."""
    flat = np.sort(np.asarray(values).reshape(-1))
    if len(flat) < 2:
        return flat
    return flat[np.concatenate(([True], flat[1:] != flat[:-1]))]


#: ``Matches.blocked`` codes: the guard rule that keeps a pair apart (0: none).
BLOCKED_BY: tuple[str | None, ...] = (None, "numbers", "units")


@dataclass
class Samples:
    """The pool's samples as columns, one entry per sample in report order: input package,
    then position within the package. ``content`` indexes `Pool.contents` (not the row id);
    ``split`` and ``domain`` index their label lists (few distinct values). ``domain`` is
    read only when the config has domain-specific units."""

    input_pos: np.ndarray  # int64
    sample_id: list[str]
    split: np.ndarray  # int64, index into split_labels
    split_labels: list[str]
    content: np.ndarray  # int64
    domain: np.ndarray | None = None  # int64, index into domain_labels
    domain_labels: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.sample_id)


@dataclass
class Pool:
    """The input packages, their samples and contents, and the index state they were read in.
    ``indexed[i]`` is input ``i`` as the index holds it; its samples start at
    ``sample_start[i]``."""

    packages: list[Package]
    indexed: list[db.IndexedPackage]
    sample_start: np.ndarray  # int64, len(packages) + 1
    package_batch: dict[str, int]
    samples: Samples
    contents: db.ContentColumns
    scope_labels: dict[int, str]
    index_packages: list[dict]
    index_batches: int
    index_contents: int

    def has_history(self) -> bool:
        """Whether the index holds any package outside the pool."""
        pool_ids = {p.package_id for p in self.packages}
        return any(p["package_id"] not in pool_ids for p in self.index_packages)


@dataclass
class Nodes:
    """The pool's nodes (one content within one split; all samples of a node are exact
    duplicates of each other) in decision order, as columns. Node ``i``'s samples, in decision
    order, are ``samples[start[i]:start[i + 1]]`` (sample indexes)."""

    content: np.ndarray  # int64, index into Pool.contents
    split: np.ndarray  # int64, index into split_labels (those of `Samples`)
    split_labels: list[str]
    start: np.ndarray  # int64, len(nodes) + 1
    samples: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.content)

    @property
    def first(self) -> np.ndarray:
        """Each node's first sample in decision order."""
        return self.samples[self.start[:-1]]

    def members(self, i: int) -> list[int]:
        return self.samples[self.start[i]:self.start[i + 1]].tolist()


@dataclass
class Candidates:
    """Filtered candidate pairs: pool pairs as node indexes (a < b), sorted; history pairs as
    (node index, history content row id); ``history`` the rows of the history contents."""

    pool_pairs: np.ndarray  # (n, 2) int64
    history_pairs: np.ndarray  # (n, 2) int64
    history: db.ContentColumns
    lsh_pairs: int = 0  # distinct candidate pairs before the filters


@dataclass
class Matches:
    """Verified relations at or above the threshold, one per row: ``later`` is a node, and
    ``other`` the earlier node (pool matches) or the history content's row id (history
    matches); ``blocked`` codes the guard rule that keeps the two apart (`BLOCKED_BY`)."""

    later: np.ndarray  # int64
    other: np.ndarray  # int64
    jaccard: np.ndarray  # float64
    blocked: np.ndarray  # int8

    def __len__(self) -> int:
        return len(self.later)


class Verified(NamedTuple):
    """A verify worker's answer for one pair at or above the threshold: its index in the
    worker's list of pairs, the exact Jaccard and the guard block."""

    pair: int
    jaccard: float
    blocked_by: str | None


#: ``Decisions.reason`` codes, and the decision each one stands for.
REASONS: tuple[str, ...] = ("retained_split", "unique", "guard_blocked", "match_not_kept",
                            "near_duplicate", "takedown")
RETAINED_SPLIT, UNIQUE, GUARD_BLOCKED, MATCH_NOT_KEPT, NEAR_DUPLICATE, TAKEDOWN = range(6)


@dataclass
class Decisions:
    """The greedy outcome per node: ``reason`` codes `REASONS` (``near_duplicate`` and
    ``takedown`` nodes are excluded, all others kept); a ``near_duplicate`` node's ``kept_by``
    is the earlier kept node it duplicates (-1 otherwise) with that match's ``jaccard``; a
    ``takedown`` node's ``jaccard`` is its first takedown match's. A kept node's further samples
    are exact duplicates of its first sample, unless its split is retained."""

    reason: np.ndarray  # int8
    kept_by: np.ndarray  # int64
    jaccard: np.ndarray  # float64


@dataclass(frozen=True)
class ByteStrings:
    """Byte strings as one array: string ``i`` is ``data[start[i]:start[i + 1]]``, a form a
    compiled kernel reads (a list of a million ``bytes`` objects it cannot)."""

    data: np.ndarray  # uint8
    start: np.ndarray  # int64, strings + 1

    @classmethod
    def of(cls, values: Sequence[bytes]) -> ByteStrings:
        start = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=len(values)),
                  out=start[1:])
        return cls(np.frombuffer(b"".join(values), dtype=np.uint8), start)

    def longest(self) -> int:
        """The length of the longest string (0 if none)."""
        return int(np.diff(self.start).max()) if len(self.start) > 1 else 0


@dataclass(frozen=True)
class ReportColumns:
    """What the report needs of each sample and content besides the decisions, prepared by
    stage 6 before the decisions exist: the samples' ids as JSON strings (as ``orjson``
    renders them) and the contents' ids while the workers verify, the samples' text digests
    earlier, by the worker that writes ``origins.jsonl`` (content ids and digests as raw bytes,
    written as hex)."""

    sample_id_json: ByteStrings
    content_id: ByteStrings
    text_sha256: ByteStrings
