"""The persistent near-dedup index: SQLAlchemy 2 Core tables over one dedicated SQLite file
(or a PostgreSQL database, `postgres`).

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
  `BatchTransaction.write_bands` for why a day's rows go to the small table and when they
  are folded into the large one.
- ``sources``: one row per indexed sample: package, sample id, split, file, line, position,
  text_sha256, domain and the original ``source`` object.

First-ingest order of a content is (contents.batch, contents.content_id).

Modules
- `texts`: the texts' codec (zstd, batch dictionaries) and the readers a worker opens on its
  own (`KnownTexts`, `IndexTexts`), on plain ``sqlite3`` or psycopg connections;
- `snapshot`: every read of a scan from one state of the index (`IndexSnapshot`), the
  format's constants and checks, the one-line database errors;
- `store`: the tables, `BatchTransaction`, `check_index`, the PostgreSQL snapshot and batch;
- `postgres`: connections, locks and bulk copies of the PostgreSQL backend.

Every name of `texts`, `snapshot` and `store` is read here (``index_store.IndexSnapshot``).
Importing this package loads `texts` only; `snapshot`, with the config's pydantic models
(about 0.1 s of CPU), and `store`, with SQLAlchemy (about 0.2 s more), load at the first use
of one of their names. So a worker process that only reads or compresses texts (an `index`
worker forked from the pool's forkserver) imports neither, and a scan never imports
SQLAlchemy for a SQLite index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from near_dedup_core.index_store.texts import (
    CACHE_SIZE,
    DICT_DMER,
    DICT_MAX_BYTES,
    DICT_MIN_BYTES,
    DICT_MIN_SAMPLES,
    DICT_SEGMENT,
    SCHEMES,
    SQL_IN,
    ZSTD_LEVEL,
    IndexTexts,
    KnownTexts,
    ShippedTexts,
    TextReader,
    compress_texts,
    damaged,
    is_url,
    open_known_texts,
    open_texts,
    postgres_url,
    rows_in,
    train_text_dictionary,
)
from near_dedup_core.lazy import lazy_names

if TYPE_CHECKING:
    from near_dedup_core.index_store.snapshot import *  # noqa: F403
    from near_dedup_core.index_store.store import *  # noqa: F403

__all__ = [
    "CACHE_SIZE", "DICT_DMER", "DICT_MAX_BYTES", "DICT_MIN_BYTES", "DICT_MIN_SAMPLES",
    "DICT_SEGMENT", "SCHEMES", "SQL_IN", "ZSTD_LEVEL", "IndexTexts", "KnownTexts",
    "ShippedTexts", "TextReader", "compress_texts", "damaged", "is_url", "open_known_texts",
    "open_texts", "postgres_url", "rows_in", "train_text_dictionary",
]


if not TYPE_CHECKING:  # mypy reads the names above, and flags any other
    # a scan finds every name it uses in `snapshot`, and never loads `store`
    __getattr__ = lazy_names(__name__, ("postgres", "snapshot", "store", "texts"),
                             ("near_dedup_core.index_store.snapshot",
                              "near_dedup_core.index_store.store"))
