"""The Iceberg backend of the index (docs/iceberg.md): the index's tables as Apache Iceberg
tables written and read with pyiceberg. ``iceberg:///absolute/folder`` keeps them in one
folder: ``catalog.db`` (pyiceberg's SQL catalog, a SQLite file: its commits are atomic) and
``warehouse/`` (the tables' Parquet data files and Iceberg metadata). With
``?catalog=postgresql://…`` the catalog is a shared PostgreSQL database, and
``iceberg+s3://bucket/prefix?catalog=postgresql://…`` puts the warehouse on S3: writers and
readers on several machines, the catalog's optimistic commit their only coordination.

- `tables`: the location (`where`), the tables (the SQLite index's columns; band rows
  partitioned by band-key bucket), the catalog, the file system of the data files
  (`filesystem`, `output`), the commit rule's published state, the writer's and the
  readers' locks;
- `snapshot`: a scan's reads from one published state (`IcebergSnapshot`), the per-bucket
  history join, the workers' readers;
- `bands`: the band files' layout and the join's task on one bucket; `bloom`: the Bloom
  filters of their keys, read and probed by that task;
- `keyed`: the lookups of an `index` laid out by hash (``content_keys``, ``raw_texts``):
  files sorted by the hash, bucketed by its prefix, read by the row groups a key falls into;
- `batch`: one appended batch (`IcebergBatch`) and its commit;
- `resume`: the work files a batch keeps for its rerun after a kill (`IcebergWorkFiles`);
- `maintain`: `index check`, `index expire`, and the writer's lock they take (`writing`);
- `compact`: `index compact`, which merges data files by size tiers.

Imported only when an ``iceberg://`` index is used (the ``[iceberg]`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from near_dedup_core.errors import NearDedupError


@contextmanager
def errors(location: str) -> Iterator[None]:
    """pyiceberg's errors and those of the files under the folder as one line naming the
    index."""
    from pyarrow import ArrowException
    from pyiceberg import exceptions as ice
    from sqlalchemy.exc import SQLAlchemyError

    failures = (ice.NoSuchTableError, ice.NoSuchNamespaceError, ice.ValidationError,
                ice.CommitFailedException, ice.ResolveError, ice.NoSuchPropertyException,
                ArrowException, SQLAlchemyError, OSError, ValueError)

    try:
        yield
    except NearDedupError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the storage client's errors have no common base
        remote = _remote_error(location, exc)
        if remote is not None:
            raise remote from None
        if not isinstance(exc, failures):
            raise

        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        if isinstance(exc, OSError) and it_checksum_failed(detail):
            raise NearDedupError(f"index {location}: damaged (a data file fails its page "
                                 f"checksum: {detail}); restore it from a backup or run "
                                 f"`near-dedup --index {location} index check`") from None
        if isinstance(exc, ice.CommitFailedException):
            raise lost_commit(location) from None
        raise NearDedupError(f"index {location}: cannot use the Iceberg tables "
                             f"({type(exc).__name__}: {detail}); run `near-dedup --index "
                             f"{location} index check`") from None


def lost_commit(location: str) -> NearDedupError:
    """The line of a commit that another writer's commit beat (`common.LostCommit`)."""
    from near_dedup_core.index_store.common import LostCommit

    return LostCommit(f"index {location}: another writer committed meanwhile; nothing of "
                      f"this run was published; run it again")


def it_checksum_failed(detail: str) -> bool:
    """Whether pyarrow's message says a Parquet page does not match its CRC32."""
    from near_dedup_core.index_store.iceberg import datafiles

    return datafiles.CHECKSUM_FAILED in detail


def _remote_error(location: str, exc: Exception) -> NearDedupError | None:
    """The one line of a shared catalog's server or an S3 warehouse's storage error (None:
    not one of theirs)."""
    from sqlalchemy.exc import SQLAlchemyError

    from near_dedup_core.index_store.iceberg import tables as it

    try:
        place = it.where(location)
    except NearDedupError:
        return None
    if isinstance(exc, SQLAlchemyError):
        return it.catalog_error(place, exc) if place.shared else None
    if not place.on_s3:
        return None
    from near_dedup_core.storage_errors import describe

    names = {c.__module__.split(".")[0] for e in _chain(exc) for c in type(e).__mro__}
    if isinstance(exc, OSError) or names & {"botocore", "aiobotocore", "s3fs", "aiohttp"}:
        return NearDedupError(f"index {location}: {place.warehouse}: {describe(exc)}")
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out
