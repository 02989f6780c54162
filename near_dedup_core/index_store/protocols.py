"""The contract every index backend implements (SQLite `sqlite`, PostgreSQL `postgres`,
Apache Iceberg `iceberg`), written as `typing.Protocol`s that mypy checks each backend
against (the assignments at the end of `backends`):

- `IndexBackend`: the index behind ``--index``, parsed once (`backends.open_index`): its
  label and kind, the checks of its location, its snapshot, its batch, the readers a worker
  opens on its own, `index check` and the maintenance it takes, and the modules its workers
  preload;
- `Snapshot`: every read of a scan and of a contamination run, from ONE state of the index;
- `Batch`: every write of one appended batch (what `index` asks for);
- `TextReader`: the normalized texts of contents and the samples' columns, which a verify
  worker reads on its own (a `Snapshot` is one too);
- `RawTextLookup`: the contents of raw texts that committed batches indexed (an `index`
  worker's lookups);
- `BandChunks`: where `index` hands a batch's band rows while it runs, on a backend whose
  tasks write them (`Batch.band_writer`).

The methods take and return plain values and the named records of `records`, never SQL,
connections or Arrow tables. A hook that only one backend needs is a member of every backend
with a neutral meaning on the others (`Snapshot.join_executor`, `Batch.band_writer`,
`Batch.served`, `IndexBackend.maintain`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Self

import numpy as np

from near_dedup_core.index_store.records import (
    BandHits,
    BandWrite,
    ContentColumns,
    ContentSource,
    ContentSplit,
    IndexCheck,
    IndexCounts,
    IndexedPackage,
    OutsideSource,
    RefTarget,
)

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig
    from near_dedup_core.index_store.texts import ShippedTexts


class TextReader(Protocol):
    """Normalized texts of contents by row id and the columns of indexed packages' samples.

    Content and source rows are insert-only and never change once committed, so a reader of
    a newer state than a scan's snapshot returns the same rows for every id the scan knows:
    verify workers open their own (`IndexBackend.texts`)."""

    #: The index in messages.
    @property
    def path(self) -> Path | str: ...

    #: Where a worker opens its own reader (`backends.open_texts`).
    @property
    def location(self) -> str: ...

    def close(self) -> None: ...

    def package_origins(self, package_rowid: int) -> Iterator[tuple]:
        """(sample_id, split, file, line, source JSON) of one package's samples, in package
        order."""
        ...

    def package_column(self, package_rowid: int, column: str) -> list:
        """One column (`records.SAMPLE_COLUMNS`) of one package's samples, in package order."""
        ...

    def shipped(self, ids: list[int]) -> ShippedTexts:
        """The compressed texts of these contents with their dictionaries, picklable: what a
        task on another machine gets instead of a reader."""
        ...

    def texts(self, ids: list[int]) -> dict[int, str]:
        """The texts of these content ids (a missing or undecodable one: the damage line)."""
        ...

    def utf8_texts(self, ids: list[int]) -> list[bytes]:
        """The texts of these distinct content ids, in the order given, as UTF-8 bytes."""
        ...


class RawTextLookup(Protocol):
    """Contents of raw compared texts that committed batches indexed."""

    def contents(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        """(text_sha256, scope key) -> content row id, for the given sha256s."""
        ...

    def close(self) -> None: ...


class Snapshot(TextReader, Protocol):
    """Every read of a scan (and of `contamination` over an indexed pool) from ONE state of
    the index: batches committed while it is open stay invisible to it."""

    #: Where a backend whose history join runs as tasks submits them: the scan's running
    #: executor, or None for this process. A backend that joins in its database ignores it.
    join_executor: Executor | None

    def verify_pages(self) -> None:
        """Wait for the check of the index's storage that runs beside the scan (the damage
        line if it failed); called before anything read from the snapshot is published."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    # -- what the index holds
    def meta(self) -> dict[str, str]: ...

    def indexed_packages(self) -> list[IndexedPackage]:
        """Every indexed package in (batch, package_id) order."""
        ...

    def counts(self) -> IndexCounts: ...

    def scope_labels(self) -> dict[int, str]: ...

    # -- the pool
    def pool_samples(self, package: IndexedPackage, batch: int = 1 << 16
                     ) -> Iterator[list[tuple]]:
        """(sample_id, split, content) of one package's samples in package order, in lists
        of up to ``batch``."""
        ...

    def sample_rows(self, package: IndexedPackage, batch: int = 1 << 16
                    ) -> Iterator[list[tuple]]:
        """(position, sample_id, split, file, line, domain, content) of one package's
        samples in package order, in lists of up to ``batch``."""
        ...

    def sample_location(self, package: IndexedPackage, nth: int) -> tuple[str, int]:
        """(file, line) of the ``nth`` sample (0-based, package order) of one package."""
        ...

    def content_columns(self, ids: np.ndarray) -> ContentColumns:
        """Content rows of these ids as columns, by ascending row id."""
        ...

    def content_splits(self, ids: list[int]) -> list[ContentSplit]:
        """The distinct (content, split) pairs the index holds sources of, for these ids."""
        ...

    # -- history
    def history_band_hits(self, keys: np.ndarray, pool_contents: list[int],
                          pool_nodes: set[tuple[int, str]]) -> BandHits:
        """Band rows with one of ``keys`` whose content is outside the pool."""
        ...

    # -- the report
    def outside_sources(self, contents_: list[int],
                        pool_package_ids: set[str]) -> list[OutsideSource]:
        """Sources of these contents in packages other than ``pool_package_ids``."""
        ...

    # -- provenance (`index find`)
    def scope_keys(self) -> dict[int, str]:
        """Scope row id -> its key (`compare.Scope.key`)."""
        ...

    def batch_dates(self) -> dict[int, str]:
        """Batch sequence number -> when it was committed (``created_at``)."""
        ...

    def content_rows(self, content_ids: list[bytes]) -> dict[bytes, int]:
        """Row ids of the given content ids that the snapshot holds."""
        ...

    def content_sources(self, ids: list[int]) -> list[ContentSource]:
        """Every source of these contents, sorted by (content, package, sample_id)."""
        ...


class BandChunks(Protocol):
    """Takes a batch's band rows as `index` goes (`Batch.band_writer`): ``add`` once
    ``chunk_rows`` of them are gathered (in content order), ``finish`` at the end."""

    chunk_rows: int

    def add(self, keys: np.ndarray, contents: np.ndarray) -> None: ...

    def finish(self) -> BandWrite: ...


class WorkFiles(Protocol):
    """The results of a batch's worker tasks, kept by the index beside its tables
    (`Batch.work_files`) under names that say which job made them, so that a run of the
    same batch killed before its commit is resumed from them. Never read by a scan."""

    def names(self) -> set[str]:
        """The names kept (by a killed earlier try of this batch)."""
        ...

    def get(self, name: str) -> bytes | None:
        """A kept result (None: not kept, or it does not read back whole)."""
        ...

    def put(self, name: str, data: bytes) -> None: ...

    def checkpoint(self, position: int, state: bytes) -> None:
        """Close the batch's data files written so far and keep them, with the writer's
        ``state`` after its first ``position`` blocks, for a rerun (`restore`)."""
        ...

    def restore(self) -> tuple[int, bytes] | None:
        """The newest checkpoint a killed earlier try kept whose data files are all there:
        its files taken over by the batch, and (position, the writer's state); or None."""
        ...


class Batch(Protocol):
    """The write side of one open batch: every write `index` makes. Nothing is visible to
    readers until the backend commits it, whole, when the batch's block ends without an
    error."""

    #: Where worker processes can read the index as its last committed batch left it
    #: (`IndexBackend.known_texts` of that location); None when they cannot (a new index).
    reader_location: str | None
    #: Whether workers on any machine can reach ``reader_location`` (a server), not only
    #: processes on this one.
    served: bool
    #: The sequence number of the batch row this transaction added (`add_batch`), if any.
    seq: int | None

    # -- the index as a whole
    def meta(self) -> dict[str, str]: ...

    def set_kind(self, kind: str) -> None: ...

    def indexed_packages(self) -> dict[str, IndexedPackage]: ...

    def add_batch(self, created_at: str, tool_version: str, package_ids: list[str]) -> int:
        """A new batch row; its sequence number (one more than the last)."""
        ...

    def add_package(self, package_id: str, kind: str, manifest_sha256: str, batch: int,
                    records: int, manifest_json: str) -> int: ...

    def add_takedown(self, key: str, act_json: str) -> None:
        """One recorded takedown act (`formats.takedown`) as a new ``meta`` row: published
        with the transaction, even without a batch row; an existing key is an error."""
        ...

    def upgrade_schema(self, values: dict[str, str]) -> None:
        """An index of the upgradable schema becomes one of the current schema, inside the
        batch (nothing to do where there is no older schema)."""
        ...

    # -- scopes, contents, sources
    def scope_ids(self) -> dict[str, int]: ...

    def add_scope(self, scope_key: str, label: str) -> int: ...

    def max_content_rowid(self) -> int: ...

    def ref_targets(self, package_rowid: int) -> dict[str, RefTarget]:
        """sample_id -> what a ref to that sample of an indexed package resolves to."""
        ...

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        """Row ids of the given content ids that the index already holds."""
        ...

    def known_raw_texts(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        """`RawTextLookup.contents` inside the batch (for workers that cannot read the
        index)."""
        ...

    def add_sources(self, rows: list[tuple]) -> None: ...

    def add_dictionary(self, batch: int, data: bytes) -> int: ...

    def newest_dictionary(self) -> tuple[int, bytes] | None: ...

    def add_contents(self, rows: list[tuple]) -> None: ...

    def add_raw_texts(self, rows: list[tuple[bytes, int, int]]) -> None: ...

    # -- band rows
    def band_writer(self, executor: Executor, parallelism: int) -> BandChunks | None:
        """Where `index` hands the band rows while it runs, for tasks of ``executor`` to
        write; None: all of them at the end, through `write_bands`."""
        ...

    # -- resuming
    def work_files(self, inputs: str) -> WorkFiles | None:
        """Where the batch keeps its workers' results for a run of the same batch (same
        ``inputs`` digest: packages, config, tool version) on the same published state, if
        this one is killed; None: the backend keeps none (a killed SQL batch is rolled back
        whole by its database)."""
        ...

    def write_bands(self, ranges: Iterable[tuple[np.ndarray, np.ndarray]],
                    announce: Callable[[str], None] = ...) -> BandWrite:
        """The batch's band rows at the end, as (keys, content row ids) arrays in (key,
        content) order; ``announce`` hears of long work before it starts."""
        ...


class IndexBackend(Protocol):
    """The index a command names with ``--index``: callers ask it for what they need and
    never which backend it is."""

    #: The backend's name, as the release's UI badges it (``sqlite``, ``postgres``,
    #: ``iceberg``).
    @property
    def kind(self) -> str: ...

    #: Whether a reader in the writer's own process must close after each use.
    @property
    def inline_readers_close(self) -> bool: ...

    #: The modules a worker process that reads this index preloads (its forkserver's).
    @property
    def worker_modules(self) -> tuple[str, ...]: ...

    @property
    def label(self) -> str:
        """The index in messages (no password)."""
        ...

    @property
    def file(self) -> Path | None:
        """The one file that holds the index, if one does."""
        ...

    @property
    def location(self) -> str:
        """What a worker process opens its own readers on (picklable, credentials kept)."""
        ...

    def check_target(self, inputs: list[Path]) -> None:
        """Refuse a location inside an input package, a report or a mixture."""
        ...

    def errors(self) -> AbstractContextManager[None]:
        """The backend's errors inside the block as one line naming the index."""
        ...

    def snapshot(self, config: NearDedupConfig | None = None) -> Snapshot:
        """A scan's one snapshot of the index (checked to be bound to ``config`` if given)."""
        ...

    def batch(self, config: NearDedupConfig, created_at: str
              ) -> AbstractContextManager[Batch]:
        """The open batch: published whole when the block ends, nothing changed on an
        error."""
        ...

    def texts(self) -> TextReader:
        """A worker's own reader of content texts."""
        ...

    def known_texts(self, cached: bool = False) -> RawTextLookup:
        """A worker's own raw-text lookups; ``cached``: one kept for many lookups."""
        ...

    def check(self) -> IndexCheck:
        """`index check`."""
        ...

    def maintain(self, action: str, older_than: float | None = None, *,
                 full: bool = False, progress: bool = False) -> str:
        """`index compact` (``full``: every file of a bucket into one, not by size tiers) or
        `index expire` (``older_than`` seconds); ``progress``: its stages on stderr. The
        summary line; a backend that needs neither refuses it in one line."""
        ...

    def read_ahead(self) -> bool:
        """Ask the operating system to read the index into its cache; whether it asked."""
        ...

    def raise_if_damaged(self, exc: BaseException) -> None:
        """After an unexpected value read from the index: the damage line if the index is
        damaged; otherwise return (the caller re-raises ``exc``)."""
        ...
