"""The persistent near-dedup index, behind one contract (`protocols`) that three backends
implement: one dedicated SQLite file (`sqlite`), a PostgreSQL database (`postgres`) or Apache
Iceberg tables in a folder or on S3 (`iceberg`). The SQL backends keep the tables below as
SQLAlchemy 2 Core tables; Iceberg keeps the same tables as Iceberg tables (docs/iceberg.md).

Tables
- ``meta``: format marker, schema version, algorithm version, config fingerprint and config,
  the kind of package the index holds (bound by its first batch).
- ``batches``: one row per appended batch; ``seq`` orders first ingest.
- ``packages``: every indexed package with its manifest sha256 (packages are immutable).
- ``scopes``: isolation scopes by canonical key.
- ``contents``: one row per distinct content_id: the batch that first indexed it, the
  normalized length, the hashed-shingle-set size, the MinHash signature and the zstd-compressed
  normalized text (from which scan recomputes the exact shingle set against history, without
  the original packages). Texts under ``min_chars`` carry no signature: they match exactly only.
- ``dictionaries``: zstd dictionaries trained on a batch's new texts (a fresh one every 100,000
  new contents, following the batch as it drifts): templated text repeats across documents,
  and on 20,000 real documents a dictionary cut the compressed texts by about a third. A
  batch with too few new texts to train one compresses them with the index's newest.
- ``bands`` and ``bands_recent``: (LSH band key, content) pairs, the primary key doubling as
  the lookup index; a lookup reads both. ``bands`` holds the band rows of contents up to row
  id ``meta.bands_merged_through``, ``bands_recent`` those of later contents: see
  `batch.BatchTransaction.write_bands` for why a day's rows go to the small table and when they
  are folded into the large one.
- ``sources``: one row per indexed sample: package, sample id, split, file, line, position,
  text_sha256, domain and the original ``source`` object.

First-ingest order of a content is (contents.batch, contents.content_id).

Modules (plain imports: a reader, mypy and a code walker follow every name)
- `protocols`: the contract (`IndexBackend`, `Snapshot`, `Batch`, `TextReader`,
  `RawTextLookup`, `BandChunks`, `WorkFiles`) and `records`, the named records it passes;
- `backends`: ``--index`` parsed once (`open_index`) into `SqliteIndex`, `PostgresIndex` or
  `IcebergIndex`, which a command asks for its snapshot, batch, workers' readers, check and
  maintenance;
- `common`: the format's constants and the checks every backend makes of an index's location
  and binding;
- `texts`: the texts' codec (zstd, batch dictionaries) and the SQL readers a worker opens on
  its own (`KnownTexts`, `IndexTexts`), on plain ``sqlite3`` or psycopg connections;
- `sqlite.snapshot`: every read of a scan from one state of a SQLite index
  (`IndexSnapshot`), the one-line SQLite errors;
- `schema`: the SQL tables (SQLAlchemy Core) and the binding rows;
- `batch`: `BatchTransaction`, every write of one appended batch on SQL;
- `sqlite.write`: the writer's lock, a batch's connections, a new index's staged file;
- `check`: `index check` on SQL;
- `postgres_url` and `postgres`: a PostgreSQL index's URL, and everything that differs on
  PostgreSQL (connections, locks, bulk copies, its snapshot, batch and check);
- `iceberg`: the index as Apache Iceberg tables in a folder (docs/iceberg.md): its tables,
  commit rule, snapshot, batch, check, compaction and expiry.

This package imports `backends`, `protocols`, `records`, `common`, `texts` and
`sqlite.snapshot` only, which need neither SQLAlchemy
nor the config's pydantic models: a worker process (an `index` worker forked from the pool's
forkserver, a scan's verify worker) and a scan of a SQLite index never load them. The other
modules are imported by name where they are used (``from near_dedup_core.index_store.batch
import BatchTransaction``); the backends import them inside the methods that need them.
"""

from __future__ import annotations

from near_dedup_core.index_store.backends import (
    IcebergIndex,
    Index,
    PostgresIndex,
    SqliteIndex,
    database_errors,
    open_index,
    open_known_texts,
    open_snapshot,
    open_texts,
)
from near_dedup_core.index_store.common import (
    BAND_TABLES,
    FORMAT,
    SCHEMA_VERSION,
    LostCommit,
    longest_run,
)
from near_dedup_core.index_store.invariants import BANDS_MERGED_THROUGH
from near_dedup_core.index_store.protocols import (
    BandChunks,
    Batch,
    IndexBackend,
    RawTextLookup,
    Snapshot,
    TextReader,
    WorkFiles,
)
from near_dedup_core.index_store.records import (
    BandHits,
    BandWrite,
    ContentColumns,
    ContentSource,
    IndexedPackage,
    OutsideSource,
    RefTarget,
)
from near_dedup_core.index_store.sqlite.snapshot import connect_reader
from near_dedup_core.index_store.texts import (
    IndexTexts,
    KnownTexts,
    ShippedTexts,
    TextDecoder,
    compress_texts,
    damaged,
    train_text_dictionary,
)

__all__ = [
    "BANDS_MERGED_THROUGH", "BAND_TABLES", "FORMAT", "SCHEMA_VERSION", "BandChunks",
    "BandHits", "BandWrite", "Batch", "ContentColumns", "ContentSource", "IcebergIndex", "Index",
    "IndexBackend", "IndexTexts", "IndexedPackage", "KnownTexts", "LostCommit", "OutsideSource",
    "PostgresIndex", "RawTextLookup", "RefTarget", "ShippedTexts", "Snapshot", "SqliteIndex",
    "TextDecoder", "TextReader", "WorkFiles", "compress_texts", "connect_reader", "damaged",
    "database_errors", "longest_run", "open_index", "open_known_texts", "open_snapshot",
    "open_texts", "train_text_dictionary",
]
