"""The write side of one appended batch (`BatchTransaction`, a `protocols.Batch`): every
statement `index` makes inside the batch's transaction, on SQLite (the PostgreSQL variant is
`postgres.PostgresBatch`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from itertools import chain

import numpy as np
import orjson
from sqlalchemy import Connection, Insert, func, insert, select

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.common import BAND_TABLES, SCHEMA_VERSION
from near_dedup_core.index_store.invariants import BANDS_MERGED_THROUGH
from near_dedup_core.index_store.protocols import BandChunks
from near_dedup_core.index_store.records import BandWrite, IndexedPackage, RefTarget
from near_dedup_core.index_store.schema import (
    bands_recent,
    batches,
    contents,
    dictionaries,
    insert_sql,
    meta,
    metadata,
    packages,
    raw_texts,
    read_meta,
    scopes,
    sources,
)
from near_dedup_core.index_store.texts import SQL_IN, KnownTexts
from near_dedup_core.wording import count

#: Band rows per ``INSERT`` statement (1,000 bound parameters): 15.6 M sorted rows went in
#: about 10 % faster than with 50 per statement, and no faster with 1,000
#: (`bench.band_insert`).
BAND_ROWS_PER_INSERT = 500
#: Source rows per ``INSERT`` statement (704 bound parameters; SQLite starts the statement's
#: program once per statement): 10^6 rows of a cumulative snapshot went into its index in
#: 3.2–4.1 s against 4.0–5.1 s one row to a statement, on their own; inside the snapshot's
#: batch, beside the workers, the main process spent 5.3–5.7 s of CPU on them against
#: 6.0–6.2 s.
SOURCE_ROWS_PER_INSERT = 64
#: Band rows per ``executemany`` call (16 statements). The rows reach the driver as Python
#: lists; lists of 8,000 rows stay in the CPU's caches, where 8 M rows per call (64 MB of
#: lists) took about 1.35× as long (`bench.band_insert --call-rows`).
BAND_ROWS_PER_CALL = 8_000
#: ``bands_recent`` is folded into ``bands`` once it holds the band rows of this share of the
#: contents that ``bands`` holds (see `BatchTransaction.write_bands`).
RECENT_SHARE = 1 / 8


class BatchTransaction:
    """The write side of one open batch transaction: every statement ``index`` makes.

    The index's backend opens it (`SqliteIndex.batch`; `postgres.PostgresBatch` on
    PostgreSQL).

    Rows are plain tuples in the table's column order (``sources``, ``contents``) so that a
    million of them go through ``executemany`` without per-row objects; everything else comes
    back as named records. Nothing is visible to readers until the surrounding transaction
    commits.
    """

    #: How the statements that write many rows begin. With SQLite's default conflict
    #: resolution (ABORT), a failing row undoes the rows that its statement wrote before it,
    #: so inside a transaction SQLite first copies every existing page that such a statement
    #: changes into a statement journal, a temporary file (``/var/tmp/etilqs_…``): 2.2 GB of
    #: page copies for the 10^6 source rows of a cumulative snapshot appended to an index in
    #: WAL mode (`docs/benchmarks.md`, round sixteen). With FAIL, the rows before a failing one
    #: stay, and SQLite keeps no statement journal. A batch never keeps them: any error rolls
    #: the whole transaction back.
    MANY_ROWS = "INSERT OR FAIL"
    #: Whether workers on any machine can reach ``reader_location`` (a server), not only
    #: processes on this one (a file).
    served = False

    def __init__(self, conn: Connection, reader_location: str | None = None) -> None:
        self.conn = conn
        #: where worker processes can read the index as its last committed batch left it, on
        #: connections of their own (`open_known_texts`); None when they cannot (a new index,
        #: staged in a file no other process opens)
        self.reader_location = reader_location
        #: the sequence number of the batch row this transaction added (`add_batch`), if any
        self.seq: int | None = None
        self._sql_sources = insert_sql(sources)
        self._sql_sources_many = insert_sql(sources, SOURCE_ROWS_PER_INSERT, self.MANY_ROWS)
        self._sql_contents = insert_sql(contents)
        self._sql_bands = {t: f"INSERT OR IGNORE INTO {t} (key, content) VALUES (?, ?)"
                           for t in BAND_TABLES}
        self._sql_bands_many = {t: sql.replace("VALUES (?, ?)", "VALUES " + ", ".join(
            ["(?, ?)"] * BAND_ROWS_PER_INSERT)) for t, sql in self._sql_bands.items()}
        self._sql_raw_texts = insert_sql(raw_texts)

    def _insert_id(self, statement: Insert) -> int:
        """Execute a single-row insert and return the new row's integer primary key."""
        key = self.conn.execute(statement).inserted_primary_key
        if key is None:
            raise NearDedupError(f"index: no primary key returned for the new "
                                 f"{statement.table.name} row")
        return key[0]

    # -- the index as a whole
    def meta(self) -> dict[str, str]:
        return read_meta(self.conn)

    def set_kind(self, kind: str) -> None:
        self.conn.execute(insert(meta).values(key="kind", value=kind))

    def add_takedown(self, key: str, act_json: str) -> None:
        """A takedown act's ``meta`` row (its primary key refuses a key recorded before)."""
        self.conn.execute(insert(meta).values(key=key, value=act_json))

    def indexed_packages(self) -> dict[str, IndexedPackage]:
        p = packages.c
        return {row.package_id: IndexedPackage(*row) for row in self.conn.execute(
            select(p.id, p.package_id, p.kind, p.manifest_sha256, p.batch, p.records))}

    def add_batch(self, created_at: str, tool_version: str, package_ids: list[str]) -> int:
        """A new batch row; returns its sequence number (one more than the last)."""
        seq = (self.conn.execute(select(func.max(batches.c.seq))).scalar() or 0) + 1
        self.conn.execute(insert(batches).values(
            seq=seq, created_at=created_at, tool_version=tool_version,
            packages=orjson.dumps(package_ids).decode()))
        self.seq = seq
        return seq

    def add_package(self, package_id: str, kind: str, manifest_sha256: str, batch: int,
                    records: int, manifest_json: str) -> int:
        return self._insert_id(insert(packages).values(
            package_id=package_id, kind=kind, manifest_sha256=manifest_sha256, batch=batch,
            records=records, manifest=manifest_json))

    # -- scopes, contents, sources
    def scope_ids(self) -> dict[str, int]:
        return {k: i for i, k in self.conn.execute(select(scopes.c.id, scopes.c.scope_key))}

    def add_scope(self, scope_key: str, label: str) -> int:
        return self._insert_id(insert(scopes).values(scope_key=scope_key, label=label))

    def max_content_rowid(self) -> int:
        return self.conn.execute(select(func.max(contents.c.id))).scalar() or 0

    def ref_targets(self, package_rowid: int) -> dict[str, RefTarget]:
        """sample_id → what a ref to that sample of an indexed package resolves to."""
        s = sources.c
        rows = self.conn.execute(select(s.sample_id, s.content, s.text_sha256, s.domain)
                                 .where(s.package == package_rowid))
        return {sid: RefTarget(c, sha, dom) for sid, c, sha, dom in rows}

    def known_contents(self, content_ids: list[bytes]) -> dict[bytes, int]:
        """Row ids of the given content ids that the index already holds."""
        found: dict[bytes, int] = {}
        for i in range(0, len(content_ids), SQL_IN):
            part = content_ids[i:i + SQL_IN]
            found.update(self.conn.exec_driver_sql(
                f"SELECT content_id, id FROM contents WHERE content_id IN "
                f"({','.join('?' * len(part))})", tuple(part)).all())
        return found

    def known_raw_texts(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        """`KnownTexts.contents` inside the batch (for workers that cannot read the index)."""
        return KnownTexts(self.conn.connection.dbapi_connection).contents(shas)

    def add_sources(self, rows: list[tuple]) -> None:
        """``sources`` rows: (None, content, package, sample_id, split, file, line, position,
        text_sha256, domain, source JSON), ``SOURCE_ROWS_PER_INSERT`` to a statement (the
        rows get their ids in the same order either way)."""
        per = SOURCE_ROWS_PER_INSERT
        full = len(rows) // per * per
        if full:
            width = per * len(sources.columns)
            flat = list(chain.from_iterable(rows[:full]))
            dbapi = self.conn.connection.dbapi_connection  # the same transaction
            assert dbapi is not None
            dbapi.executemany(self._sql_sources_many,
                              [flat[i:i + width] for i in range(0, len(flat), width)])
        if full < len(rows):
            self.conn.exec_driver_sql(self._sql_sources, rows[full:])

    def add_dictionary(self, batch: int, data: bytes) -> int:
        return self._insert_id(insert(dictionaries).values(batch=batch, data=data))

    def newest_dictionary(self) -> tuple[int, bytes] | None:
        """(id, data) of the text dictionary that earlier batches stored last, if any."""
        row = self.conn.execute(select(dictionaries.c.id, dictionaries.c.data)
                                .order_by(dictionaries.c.id.desc()).limit(1)).first()
        return None if row is None else (row[0], bytes(row[1]))

    def add_contents(self, rows: list[tuple]) -> None:
        """``contents`` rows: (rowid, content_id, scope, batch, norm_chars, shingles,
        signature, text_z, dictionary)."""
        self.conn.exec_driver_sql(self._sql_contents, rows)

    def upgrade_schema(self, values: dict[str, str]) -> None:
        """An index of the `UPGRADABLE_SCHEMA` becomes one of `SCHEMA_VERSION`, inside the
        batch's transaction: an empty ``bands_recent``, every band row in ``bands``."""
        if values["schema_version"] == SCHEMA_VERSION:
            return
        metadata.create_all(self.conn, tables=[bands_recent])
        self.conn.execute(meta.update().where(meta.c.key == "schema_version")
                          .values(value=SCHEMA_VERSION))
        self.conn.execute(insert(meta).values(key=BANDS_MERGED_THROUGH,
                                              value=str(self.max_content_rowid())))

    def band_writer(self, executor: Executor, parallelism: int) -> BandChunks | None:
        """Where `index` hands the batch's band rows while it runs, a chunk at a time, for
        tasks of ``executor`` to write (an Iceberg index); None: all of them at the end,
        through `write_bands`."""
        return None

    def work_files(self, inputs: str) -> None:
        """A SQL batch keeps no worker results: a killed one is rolled back whole."""
        return None

    def write_bands(self, ranges: Iterable[tuple[np.ndarray, np.ndarray]],
                    announce: Callable[[str], None] = lambda _text: None) -> BandWrite:
        """The batch's band rows, after its contents: into ``bands_recent``, or with it
        folded, into ``bands``. ``ranges`` gives them as (keys, content row ids) arrays in
        (key, content) order, one key range after another.

        Band keys are uniform hashes, so a day's rows, sorted, still land on nearly every leaf
        of a band B-tree much larger than they are: at 10^7 contents (1.5·10^8 band rows) a
        day of 5·10^4 contents would rewrite the whole ``bands`` B-tree, gigabytes through the
        journal, whatever its own size. So, with ``M`` contents in ``bands`` (row ids up to
        ``meta.bands_merged_through``) and ``R`` after them (this batch's included), the rows
        go to the small ``bands_recent`` while ``R < RECENT_SHARE · M``; otherwise (and for
        the first batch, ``M = 0``) they go to ``bands``, and the rows of ``bands_recent``
        follow them there. A fold rewrites ``bands`` once per ``RECENT_SHARE · M`` contents
        appended, so the pages a batch writes amortize to a constant multiple of its own rows
        (``1 / RECENT_SHARE``), as in a log-structured merge; every lookup reads both tables,
        the second at most an eighth of the first. ``announce`` hears of a fold before it
        starts (it rewrites ``bands``: about a minute at 10^7 contents)."""
        merged = int(self.conn.execute(select(meta.c.value).where(
            meta.c.key == BANDS_MERGED_THROUGH)).scalar_one())
        newest = self.max_content_rowid()
        table = "bands_recent" if newest - merged < RECENT_SHARE * merged else "bands"
        first = newest + 1  # the batch's first content with band rows
        for keys, content_rowids in ranges:
            self.add_bands(table, keys, content_rowids)
            if len(content_rowids):
                first = min(first, int(content_rowids.min()))
        if table == "bands_recent":
            return BandWrite(table, 0)
        earlier = first - 1 - merged
        if earlier > 0:
            announce(f"merging the lookup keys of {count(earlier, 'text')} of earlier batches "
                     f"into the main lookup table (once in a while; this batch takes longer)")
        folded = self.fold_recent_bands()
        self.conn.execute(meta.update().where(meta.c.key == BANDS_MERGED_THROUGH)
                          .values(value=str(newest)))
        return BandWrite("bands", folded)

    def fold_recent_bands(self) -> int:
        """Move every row of ``bands_recent`` into ``bands`` (in key order); their count."""
        moved = self.conn.exec_driver_sql(
            f"{self.MANY_ROWS} INTO bands (key, content) "
            "SELECT key, content FROM bands_recent ORDER BY key, content").rowcount
        self.conn.exec_driver_sql("DELETE FROM bands_recent")
        return max(moved, 0)

    def add_bands(self, table: str, keys: np.ndarray, content_rowids: np.ndarray) -> None:
        """Band rows into ``table`` (one of `BAND_TABLES`), given sorted by (key, content) so
        the B-tree fills front to back. ``BAND_ROWS_PER_INSERT`` rows per statement, so that a
        statement's own overhead is paid once for many rows, and ``BAND_ROWS_PER_CALL`` per
        call of the driver."""
        per = BAND_ROWS_PER_INSERT
        full = len(keys) // per * per
        step = max(1, BAND_ROWS_PER_CALL // per) * per
        dbapi = self.conn.connection.dbapi_connection  # the same transaction, rows as lists
        assert dbapi is not None
        for i in range(0, full, step):
            end = min(i + step, full)
            flat = np.empty(2 * (end - i), dtype=np.int64)
            flat[0::2], flat[1::2] = keys[i:end], content_rowids[i:end]
            dbapi.executemany(self._sql_bands_many[table], flat.reshape(-1, 2 * per).tolist())
        if full < len(keys):
            self.conn.exec_driver_sql(self._sql_bands[table], list(zip(
                keys[full:].tolist(), content_rowids[full:].tolist(), strict=True)))

    def add_raw_texts(self, rows: list[tuple[bytes, int, int]]) -> None:
        """``raw_texts`` rows (text_sha256, scope, content), given sorted."""
        self.conn.exec_driver_sql(self._sql_raw_texts, rows)


