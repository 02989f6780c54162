"""The named records the index's backends pass to their callers (`protocols`): plain values,
not SQL rows or Arrow tables, so that every backend answers with the same types."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from near_dedup_core.wording import count


class IndexedPackage(NamedTuple):
    """A package of the index: ``rowid`` is its key in the snapshot's other answers."""

    rowid: int
    package_id: str
    kind: str
    manifest_sha256: str
    batch: int
    records: int  # its samples, each one ``sources`` row


class ContentColumns(NamedTuple):
    """Content rows as columns, by ascending row id: what a scan needs of a million contents
    without one record per row. Where a content has no signature (a text under
    ``min_chars``), ``has_signature`` is False, ``shingles`` is -1 and its ``signatures`` row
    is zero. ``norm_chars``: the length of each normalized text in code points."""

    rowid: np.ndarray  # int64
    content_id: list[bytes]
    scope: np.ndarray  # int64
    batch: np.ndarray  # int64
    shingles: np.ndarray  # int64
    signatures: np.ndarray  # (contents, num_perm) uint16
    has_signature: np.ndarray  # bool
    norm_chars: np.ndarray  # int64


class IndexCounts(NamedTuple):
    batches: int
    contents: int  # the highest content row id


class BandHits(NamedTuple):
    """(band key, content) rows: ``keys[i]`` is a band key of ``contents[i]``."""

    keys: np.ndarray
    contents: np.ndarray


class ContentSplit(NamedTuple):
    content: int
    split: str


class OutsideSource(NamedTuple):
    """A source of a content in a package that is not one of the given pool packages."""

    content: int
    package_id: str
    sample_id: str
    split: str


class ContentSource(NamedTuple):
    """A source of a content: one indexed sample that holds it (``package`` is the
    package's row id, `IndexedPackage.rowid`), with its raw text's sha256 and its domain."""

    content: int
    package: int
    sample_id: str
    split: str
    text_sha256: bytes
    domain: str | None


class RefTarget(NamedTuple):
    """What a ``ref`` to an indexed sample resolves to."""

    content: int
    text_sha256: bytes
    domain: str | None


class BandWrite(NamedTuple):
    """Where a batch's band rows went: ``table``; ``folded``: rows of earlier batches moved
    from ``bands_recent`` into ``bands`` with them."""

    table: str
    folded: int


#: The columns of a package's samples that `TextReader.package_column` reads.
SAMPLE_COLUMNS = ("text_sha256", "domain", "file", "line")


class IndexCheck(NamedTuple):
    """What `index check` found: the index's counts, every invariant held."""

    path: Path | str
    batches: int
    packages: int
    contents: int
    sources: int
    note: str = ""

    def summary(self) -> str:
        return (f"index {self.path}: OK ({count(self.batches, 'batch')}, "
                f"{count(self.packages, 'package')}, {count(self.contents, 'distinct text')}, "
                f"{count(self.sources, 'record')}){self.note}")
