"""The validating pass over packages' records (`stream_records`), the cheap sampling of a
shard's first records (`head_records`), and `validate_packages`."""

from __future__ import annotations

import collections
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.package.blocks import (
    BLOCK_BYTES,
    BLOCK_LINES,
    ShardEnd,
    parse_block,
    shard_blocks,
)
from near_dedup_core.package.manifest import FileEntry, Package, dependency_order, open_packages
from near_dedup_core.package.records import LineProblem, Record, parse_line

if TYPE_CHECKING:
    from near_dedup_core.storage import Location


def stream_package(pkg: Package, ids: set[str],
                    targets: dict[str, set[str]] | None) -> Iterator[Record]:
    """Yield ``pkg``'s records, checking lines, refs and each shard against the manifest.

    ``targets`` maps each depends_on package id to its sample ids; None checks only that a
    ref names a package in depends_on (at creation, when those packages are not at hand).
    """
    position = 0
    for entry in pkg.files:
        for event in shard_blocks(pkg, entry, position, BLOCK_LINES, BLOCK_BYTES):
            if isinstance(event, ShardEnd):
                if event.problem is not None:
                    raise event.problem
                continue
            parsed = parse_block(event)
            for k, (sample_id, data, ref) in enumerate(parsed.records):
                line = event.first_line + k
                if sample_id in ids:
                    raise NearDedupError(f"{where(pkg.package_id, entry.path, line)}: "
                                         f"duplicate id {sample_id!r} in the package")
                ids.add(sample_id)
                if ref is not None and targets is not None and ref[1] not in targets[ref[0]]:
                    raise NearDedupError(f"{where(pkg.package_id, entry.path, line)}: ref to "
                                         f"sample {ref[1]!r} of package {ref[0]}, which has no "
                                         f"such sample")
                yield Record(pkg.package_id, entry.split, entry.path, line,
                             event.first_position + k, sample_id, data, ref)
            if parsed.problem is not None:
                raise parsed.problem
            position += len(parsed.records)


class SampleIsRef(NearDedupError):
    """A sample asked for by id (`read_samples`) is stored as a ref to another package's
    sample (``ref``: that package's id and sample id)."""

    def __init__(self, package_id: str, sample_id: str, ref: tuple[str, str]) -> None:
        super().__init__(f"package {package_id}: sample {sample_id} is a ref to sample "
                         f"{ref[1]} of package {ref[0]}")
        self.sample_id = sample_id
        self.ref = ref


class NoSuchSample(NearDedupError):
    """A sample asked for by id (`read_samples`) is not in the package."""

    def __init__(self, package_id: str, sample_id: str) -> None:
        super().__init__(f"package {package_id}: no sample {sample_id}")
        self.sample_id = sample_id


def read_samples(pkg: Package, sample_ids: Sequence[str]) -> dict[str, dict]:
    """The records of the samples ``sample_ids`` of ``pkg`` (each once, in the order given),
    read in one validating pass over its records (`stream_package`). A sample stored as a
    ref raises `SampleIsRef`; the first one the package lacks, `NoSuchSample`: the caller
    words them."""
    found: dict[str, dict | None] = dict.fromkeys(sample_ids)
    seen = 0
    for record in stream_package(pkg, set(), None):
        if record.sample_id not in found:
            continue
        if record.ref is not None:
            raise SampleIsRef(pkg.package_id, record.sample_id, record.ref)
        found[record.sample_id] = record.data
        seen += 1
    if seen < len(found):
        raise NoSuchSample(pkg.package_id, next(s for s, d in found.items() if d is None))
    return {s: d for s, d in found.items() if d is not None}


def stream_records(packages: Sequence[Package]) -> Iterator[Record]:
    """One validating pass over every record of ``packages`` (as returned by open_packages).

    Packages come in dependency order (depends_on first, otherwise input order), shards in
    manifest order. A ref is checked against the sample ids of the already streamed target.
    """
    order = dependency_order(packages)
    referenced = {dep for pkg in order for dep in pkg.depends_on}
    known: dict[str, set[str]] = {}
    for pkg in order:
        ids: set[str] = set()
        yield from stream_package(pkg, ids, {dep: known[dep] for dep in pkg.depends_on})
        if pkg.package_id in referenced:
            known[pkg.package_id] = ids


def head_records(pkg: Package, entry: FileEntry, limit: int) -> Iterator[dict]:
    """The data of the first ``limit`` records of one shard that carry their own content
    (refs are skipped), for sampling a pool cheaply. Nothing is checked beyond the line
    itself: reading stops quietly at the first line that is no record of the package's kind
    (or at a file that cannot be read), and the command's full pass over the pool reports
    it with its place."""
    taken = 0
    try:
        with pkg.open_file(entry.path) as fh:
            for raw in fh:
                if taken == limit:
                    return
                try:
                    data, _sample_id, ref = parse_line(raw, pkg.kind)
                except LineProblem:
                    return
                if ref is None:
                    taken += 1
                    yield data
    except (OSError, EOFError, zlib.error, NearDedupError):  # unreadable, or damaged gzip
        return


def validate_packages(paths: Iterable[str | Path | Location]) -> list[Package]:
    """Fully validate packages given together as one command's inputs (`snapshot validate`)."""
    packages = open_packages(paths)
    collections.deque(stream_records(packages), maxlen=0)
    return packages
