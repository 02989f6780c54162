"""The Iceberg backend of the index (`--index iceberg:///absolute/folder`, docs/iceberg.md):
the index's tables as Apache Iceberg tables written and read with pyiceberg, in one folder:
``catalog.db`` (pyiceberg's SQL catalog, a SQLite file: its commits are atomic) and
``warehouse/`` (the tables' Parquet data files and Iceberg metadata).

- `tables`: the tables (the SQLite index's columns; band rows partitioned by band-key bucket),
  the catalog, the commit rule's published state, the writer's and the readers' locks;
- `snapshot`: a scan's reads from one published state (`IcebergSnapshot`), the per-bucket
  history join, the workers' readers;
- `batch`: one appended batch (`IcebergBatch`) and its commit;
- `maintain`: `index check`, `index compact`, `index expire`.

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
    except failures as exc:
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise NearDedupError(f"index {location}: cannot use the Iceberg tables "
                             f"({type(exc).__name__}: {detail}); run `near-dedup --index "
                             f"{location} index check`") from None
