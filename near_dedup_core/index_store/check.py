"""`index check`: every invariant of an index that a scan or an append relies on, verified in
one read transaction (`check_sqlite`; the PostgreSQL side is `postgres.check_postgres`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import zstandard

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.common import (
    FORMAT,
    SCHEMA_VERSION,
    check_schema,
    package_sources_error,
)
from near_dedup_core.index_store.invariants import (
    BANDS_MERGED_THROUGH,
    check_content_rows,
    check_meta_keys,
    quick_check,
)
from near_dedup_core.index_store.records import IndexCheck
from near_dedup_core.index_store.sqlite.snapshot import (
    connect_reader,
    read_foreign,
    sqlite_errors,
)
from near_dedup_core.index_store.texts import Digests, ReadConnection, TextDecoder, rows_in


def check_sqlite(path: Path) -> IndexCheck:
    """The index's own invariants on the SQLite file at ``path``, after SQLite's
    ``integrity_check``; raises NearDedupError naming the first problem. Reads only.

    Invariants: the meta keys are present, name this format, schema and algorithm, and the
    stored config has the stored fingerprint; every band row's content exists and has a
    signature of ``num_perm`` values, and the row is in the band table that
    ``meta.bands_merged_through`` assigns it to; every source's and raw text's content and
    every source's package exist; no content, package or dictionary names a batch that does
    not exist; every text decompresses (with its dictionary) to ``norm_chars`` characters.

    One read transaction on a connection that cannot write (:func:`connect_reader`), after
    ``PRAGMA integrity_check``, which reads every page. (PostgreSQL: `postgres.check_postgres`.)"""
    if not path.is_file():
        raise NearDedupError(f"index {path}: not found")
    with sqlite_errors(path):
        values = read_foreign(path)
        config = check_meta(path, values)
        con = connect_reader(path)
        try:
            con.execute("BEGIN")
            problems = [row[0] for row in con.execute("PRAGMA integrity_check(1)")]
            if problems != ["ok"]:
                first = " ".join(problems[0].split())
                raise NearDedupError(f"index {path}: damaged (SQLite integrity_check: {first}); "
                                     f"restore it from a backup")
            result = check_invariants(path, con, config, con.execute)
            con.execute("COMMIT")
            return result
        finally:
            con.close()


def check_meta(path: Path | str, values: dict[str, str]) -> NearDedupConfig:
    """The binding rows: present, ours, readable by this tool, the config its fingerprint."""
    if values.get("format") == FORMAT:
        check_schema(path, values.get("schema_version"))
    check_meta_keys(path, values)
    if values.get("format") != FORMAT:
        raise NearDedupError(f"index {path}: not a near-dedup index")
    if values["schema_version"] != SCHEMA_VERSION or values["algorithm_version"] != ALGORITHM_VERSION:
        raise NearDedupError(f"index {path}: schema {values['schema_version']}, algorithm "
                             f"{values['algorithm_version']}: not readable by this tool "
                             f"(schema {SCHEMA_VERSION}, algorithm {ALGORITHM_VERSION})")
    try:
        config = NearDedupConfig.model_validate_json(values["config"])
    except ValueError:
        raise NearDedupError(f"index {path}: meta config is not a valid near-dedup config; "
                             f"restore it from a backup") from None
    if config.fingerprint() != values["config_fingerprint"]:
        raise NearDedupError(f"index {path}: meta config does not have the stored "
                             f"config_fingerprint; restore it from a backup")
    return config


def check_invariants(path: Path | str, con: ReadConnection, config: NearDedupConfig,
                      stream: Callable[[str], Iterable[tuple]]) -> IndexCheck:
    """The row invariants, on ``con`` (SQLite, or PostgreSQL through `QmarkConnection`) inside
    the caller's read transaction; ``stream(sql)`` iterates over a large result without
    holding it in memory."""
    def bad(what: str) -> NearDedupError:
        return NearDedupError(f"index {path}: {what}; restore it from a backup")

    quick_check(path, con.execute)  # what every scan and append verifies, in their words
    check_content_rows(path, con.execute, config.min_chars)  # as a scan or append says
    max_batch = con.execute("SELECT MAX(seq) FROM batches").fetchone()[0] or 0
    (merged,) = con.execute("SELECT value FROM meta WHERE key = ?",
                            (BANDS_MERGED_THROUGH,)).fetchone()
    queries = [
        ("a band row names a missing content or one without a signature",
         ("SELECT COUNT(*) FROM (SELECT content FROM bands UNION ALL "
          "SELECT content FROM bands_recent) b LEFT JOIN contents c ON c.id = b.content "
          "WHERE c.id IS NULL OR c.signature IS NULL")),
        (f"a band row is in the wrong table for {BANDS_MERGED_THROUGH} = {merged}",
         (f"SELECT (SELECT COUNT(*) FROM bands WHERE content > {int(merged)}) + "
          f"(SELECT COUNT(*) FROM bands_recent WHERE content <= {int(merged)})")),
        ("a content's signature does not have num_perm values",
         (f"SELECT COUNT(*) FROM contents WHERE signature IS NOT NULL AND "
          f"length(signature) != {2 * config.num_perm}")),
        ("a source names a missing content",
         ("SELECT COUNT(*) FROM sources s LEFT JOIN contents c ON c.id = s.content "
          "WHERE c.id IS NULL")),
        ("a raw text names a missing scope",
         ("SELECT COUNT(*) FROM raw_texts r LEFT JOIN scopes s ON s.id = r.scope "
          "WHERE s.id IS NULL")),
        ("a raw text names a missing content",
         ("SELECT COUNT(*) FROM raw_texts r LEFT JOIN contents c ON c.id = r.content "
          "WHERE c.id IS NULL")),
        ("a source names a missing package",
         ("SELECT COUNT(*) FROM sources s LEFT JOIN packages p ON p.id = s.package "
          "WHERE p.id IS NULL")),
        ("a content names a batch after the last one",
         f"SELECT COUNT(*) FROM contents WHERE batch > {max_batch} OR batch < 1"),
        ("a package names a missing batch",
         ("SELECT COUNT(*) FROM packages p LEFT JOIN batches b ON b.seq = p.batch "
          "WHERE b.seq IS NULL")),
        ("a dictionary names a missing batch",
         ("SELECT COUNT(*) FROM dictionaries d LEFT JOIN batches b ON b.seq = d.batch "
          "WHERE b.seq IS NULL")),
        ("a content names a missing dictionary",
         ("SELECT COUNT(*) FROM contents c LEFT JOIN dictionaries d ON d.id = c.dictionary "
          "WHERE c.dictionary IS NOT NULL AND d.id IS NULL")),
    ]
    for what, sql in queries:
        (n,) = con.execute(sql).fetchone()
        if n:
            raise bad(f"{what} ({n:,} rows)")
    for package_id, records, sources in con.execute(
            "SELECT p.package_id, p.records, (SELECT COUNT(*) FROM sources s "
            "WHERE s.package = p.id) FROM packages p ORDER BY p.id").fetchall():
        if sources != records:
            raise package_sources_error(path, package_id, sources, records)
    reader = TextDecoder(con)
    digests = Digests(path, lambda ids: dict(rows_in(
        con, "SELECT id, scope_key FROM scopes WHERE id IN ({})", ids)), bad)
    for cid, blob, dictionary, chars, digest, scope in stream(
            "SELECT id, text_z, dictionary, norm_chars, content_id, scope FROM contents"):
        try:
            utf8 = reader.utf8(blob, dictionary)
            text = utf8.decode()
        except (zstandard.ZstdError, UnicodeDecodeError) as exc:
            raise bad(f"the text of content row {cid} does not decompress ({exc})") from None
        if len(text) != chars:
            raise bad(f"the text of content row {cid} has {len(text)} characters, "
                      f"norm_chars says {chars}")
        digests.check([cid], [utf8], [(digest, scope)])
    counts = [con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
              for t in ("packages", "contents", "sources")]
    return IndexCheck(path, max_batch, *counts)


