"""The verified pairs of a run, from the workers' hits to report order: a `Pair` is an (item,
training sample, method) match; a run's pairs are held as columns (`PairTable`, a `Pair`
made only when one is read), since a text common in the pool matches in hundreds of
thousands of samples; `in_report_order` sorts them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from near_dedup_core.contamination.items import EvalItem, SampleRef
from near_dedup_core.contamination.probe import Hits


@dataclass(slots=True)
class Pair:
    item: int
    sample: SampleRef
    common: int
    start: int
    end: int
    compare_numbers: bool  # `Hits.compare_numbers`
    method: str
    text: str


@dataclass(frozen=True)
class PairColumns:
    """What the report order and the set-aside rule read of each pair, as arrays: its item,
    its training sample's package and position, whether it is an exact match, and its
    common shingles (or words)."""

    item: np.ndarray
    package: np.ndarray
    position: np.ndarray
    exact: np.ndarray
    common: np.ndarray

    def take(self, order: np.ndarray) -> PairColumns:
        return PairColumns(self.item[order], self.package[order], self.position[order],
                           self.exact[order], self.common[order])


class PairTable(Sequence[Pair]):
    """Pairs as columns: pair ``j`` is hit ``hit[j]`` of ``hits`` in training sample
    ``sample[j]``, whose package and position are ``package[j]`` and ``position[j]`` and whose
    `SampleRef` ``sample_ref`` makes when the pair is read."""

    def __init__(self, hits: Hits, hit: np.ndarray, sample: np.ndarray, package: np.ndarray,
                 position: np.ndarray, sample_ref: Callable[[int], SampleRef]) -> None:
        self.hits = hits
        self.hit = hit
        self.sample = sample
        self.package = package
        self.position = position
        self._sample_ref = sample_ref

    @classmethod
    def join(cls, of_sample: np.ndarray, hits: Hits, content: np.ndarray,
             package: np.ndarray, position: Callable[[np.ndarray], np.ndarray],
             sample_ref: Callable[[int], SampleRef]) -> PairTable:
        """A pair for each training sample ``k`` and each hit of its content
        (``of_sample[k]``; ``content[h]`` that of hit ``h``), by sample, then in hit order;
        ``package[k]`` is sample k's package, ``position(ks)`` the positions of samples
        ``ks`` (in increasing order)."""
        order = np.argsort(content, kind="stable")
        by_content = content[order]
        first = np.searchsorted(by_content, of_sample, side="left")
        n = np.searchsorted(by_content, of_sample, side="right") - first
        sample = np.repeat(np.arange(len(of_sample), dtype=np.int64), n)
        held = np.flatnonzero(n)
        hit = order[np.repeat(first - (np.cumsum(n) - n), n) + np.arange(len(sample))]
        return cls(hits, hit, sample, package[sample],
                   np.repeat(position(held), n[held]), sample_ref)

    def __len__(self) -> int:
        return len(self.hit)

    @overload
    def __getitem__(self, j: int) -> Pair: ...

    @overload
    def __getitem__(self, j: slice) -> list[Pair]: ...

    def __getitem__(self, j: int | slice) -> Pair | list[Pair]:
        if isinstance(j, slice):
            return [self[k] for k in range(len(self))[j]]
        h, hits = int(self.hit[j]), self.hits
        return Pair(int(hits.item[h]), self._sample_ref(int(self.sample[j])),
                    int(hits.common[h]), int(hits.start[h]), int(hits.end[h]),
                    bool(hits.compare_numbers[h]), "exact" if hits.exact[h] else "containment",
                    hits.text[h])

    def __iter__(self) -> Iterator[Pair]:
        return (self[j] for j in range(len(self)))

    def columns(self) -> PairColumns:
        return PairColumns(self.hits.item[self.hit], self.package, self.position,
                           self.hits.exact[self.hit], self.hits.common[self.hit])

    def take(self, order: np.ndarray) -> PairTable:
        return PairTable(self.hits, self.hit[order], self.sample[order], self.package[order],
                         self.position[order], self._sample_ref)


def in_report_order(pairs: PairTable, items: list[EvalItem]) -> tuple[PairTable, PairColumns]:
    """The pairs by eval record (its package and position, then the item), training sample
    (its package and position), an exact match before a containment match (a sort of
    arrays, stable as Python's), and their columns in that order."""
    rank = np.empty(len(items), dtype=np.int64)  # an item's place among the eval records
    rank[sorted(range(len(items)), key=lambda i: (items[i].ref.key(), i))] = \
        np.arange(len(items))
    c = pairs.columns()
    order = np.lexsort((~c.exact, c.position, c.package, rank[c.item]))
    return pairs.take(order), c.take(order)
