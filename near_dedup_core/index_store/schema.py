"""The index's tables (SQLAlchemy 2 Core, one definition for SQLite and PostgreSQL; see the
package's docstring) and the ``meta`` rows that bind a new index to its format, config and
algorithm."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    insert,
    select,
)

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core.index_store.common import FORMAT, SCHEMA_VERSION
from near_dedup_core.index_store.invariants import BANDS_MERGED_THROUGH

if TYPE_CHECKING:
    from near_dedup_core.config import NearDedupConfig

#: Row ids, band keys and counts: 64-bit everywhere (SQLAlchemy's ``Integer`` is 32-bit on
#: PostgreSQL); on SQLite an ``INTEGER PRIMARY KEY`` is the rowid, which is 64-bit already.
INT = BigInteger().with_variant(Integer(), "sqlite")
BYTES = LargeBinary()

metadata = MetaData()

meta = Table("meta", metadata,
             Column("key", String, primary_key=True),
             Column("value", Text, nullable=False))

batches = Table("batches", metadata,
                Column("seq", INT, primary_key=True),
                Column("created_at", String, nullable=False),
                Column("tool_version", String, nullable=False),
                Column("packages", Text, nullable=False))

packages = Table("packages", metadata,
                 Column("id", INT, primary_key=True),
                 Column("package_id", String, nullable=False, unique=True),
                 Column("kind", String, nullable=False),
                 Column("manifest_sha256", String, nullable=False),
                 Column("batch", INT, ForeignKey("batches.seq"), nullable=False),
                 Column("records", INT, nullable=False),
                 Column("manifest", Text, nullable=False))

scopes = Table("scopes", metadata,
               Column("id", INT, primary_key=True),
               Column("scope_key", Text, nullable=False, unique=True),
               Column("label", String, nullable=False))

contents = Table("contents", metadata,
                 Column("id", INT, primary_key=True),
                 Column("content_id", BYTES, nullable=False, unique=True),
                 Column("scope", INT, ForeignKey("scopes.id"), nullable=False),
                 Column("batch", INT, ForeignKey("batches.seq"), nullable=False),
                 Column("norm_chars", INT, nullable=False),
                 Column("shingles", INT),
                 Column("signature", BYTES),
                 Column("text_z", BYTES, nullable=False),
                 Column("dictionary", INT, ForeignKey("dictionaries.id")))

dictionaries = Table("dictionaries", metadata,
                     Column("id", INT, primary_key=True),
                     Column("batch", INT, ForeignKey("batches.seq"), nullable=False),
                     Column("data", BYTES, nullable=False))

bands = Table("bands", metadata,
              Column("key", INT, primary_key=True, autoincrement=False),
              Column("content", INT, ForeignKey("contents.id"), primary_key=True,
                     autoincrement=False),
              sqlite_with_rowid=False)

#: Band rows of the contents after ``meta.bands_merged_through``: the same columns as
#: ``bands``. No foreign key, as for ``bands`` on PostgreSQL: `index check` verifies them.
bands_recent = Table("bands_recent", metadata,
                     Column("key", INT, primary_key=True, autoincrement=False),
                     Column("content", INT, primary_key=True, autoincrement=False),
                     sqlite_with_rowid=False)

#: Each raw compared text indexed, by sha256 within its scope, and its content: a text met
#: again (the seed's cumulative snapshots) gets a source row without being normalized or
#: signed again.
raw_texts = Table("raw_texts", metadata,
                  Column("text_sha256", BYTES, primary_key=True),
                  Column("scope", INT, ForeignKey("scopes.id"), primary_key=True,
                         autoincrement=False),
                  Column("content", INT, ForeignKey("contents.id"), nullable=False),
                  sqlite_with_rowid=False)

sources = Table("sources", metadata,
                Column("id", INT, primary_key=True),
                Column("content", INT, ForeignKey("contents.id"), nullable=False),
                Column("package", INT, ForeignKey("packages.id"), nullable=False),
                Column("sample_id", String, nullable=False),
                Column("split", String, nullable=False),
                Column("file", String, nullable=False),
                Column("line", INT, nullable=False),
                Column("position", INT, nullable=False),
                Column("text_sha256", BYTES, nullable=False),
                Column("domain", String),
                Column("source", Text),
                Index("ix_sources_package", "package", "position"),
                Index("ix_sources_content", "content"))


def insert_sql(table: Table, rows: int = 1, verb: str = "INSERT") -> str:
    """The plain ``INSERT INTO t (cols…) VALUES (?, …)`` for executemany on raw tuples, with
    ``rows`` rows of parameters per statement (``verb``: ``INSERT`` or, for instance,
    ``INSERT OR FAIL``)."""
    cols = ", ".join(c.name for c in table.columns)
    marks = ", ".join("?" for _ in table.columns)
    return f"{verb} INTO {table.name} ({cols}) VALUES " + ", ".join([f"({marks})"] * rows)

def read_meta(conn) -> dict[str, str]:
    return {k: v for k, v in conn.execute(select(meta.c.key, meta.c.value))}

def binding_rows(config: NearDedupConfig, created_at: str) -> list[dict[str, str]]:
    """The ``meta`` rows that bind a new index to its format, config and algorithm."""
    return [
        {"key": "format", "value": FORMAT},
        {"key": "schema_version", "value": SCHEMA_VERSION},
        {"key": "algorithm_version", "value": ALGORITHM_VERSION},
        {"key": "config_fingerprint", "value": config.fingerprint()},
        {"key": "config", "value": config.canonical_json()},
        {"key": "created_at", "value": created_at},
        {"key": BANDS_MERGED_THROUGH, "value": "0"},
    ]


def create_schema(engine: Engine, config: NearDedupConfig, created_at: str) -> None:
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(meta), binding_rows(config, created_at))

