"""The index's texts, read and written without SQLAlchemy: what a worker process needs.

A worker of `index` compresses the texts it normalizes (`compress_texts`, with a dictionary
that `train_text_dictionary` trains on a batch's new texts) and looks raw texts up among the
committed batches (`KnownTexts`); a verify worker of `scan` reads the normalized texts of
content rows (`IndexTexts`, or `ShippedTexts` on another machine). Each opens its own plain
``sqlite3`` connection (or psycopg's, for a PostgreSQL index; opened by the index's backend,
`backends.SqliteIndex.texts`), so this module imports neither SQLAlchemy nor the config's
pydantic models: a worker forked from the pool's forkserver starts with only what it uses.

Texts are zstd frames of the normalized text's UTF-8, each compressed on its own, with the
batch's dictionary when it has one (``contents.dictionary``). Every text read for a decision
is checked against its digest, the content's ``content_id`` (`Digests`): a text that changed
in storage is one line naming the index, never a different report.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import zstandard

from near_dedup_core.compare import scope_hash
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store.records import SAMPLE_COLUMNS

ZSTD_LEVEL = 3  # level 2 is ~10 % faster for 6 % more text bytes: over 0.6 bytes of index per
#                input text byte at 1M (docs/benchmarks.md)
DICT_MIN_SAMPLES = 128
DICT_MIN_BYTES = 100 * 1024
DICT_MAX_BYTES = 112_640
#: The cover algorithm's segment and dmer sizes, fixed. Left to choose, zstd trains four
#: dictionaries (segment sizes 50 to 2000) and keeps the one that compresses a held-out
#: quarter best: 4-5x the time (0.27-0.55 s against 0.06-0.12 s on a block of 1,024 web
#: documents) for texts 0-1.4 % smaller on the blocks measured (docs/benchmarks.md). A worker
#: trains one inside a block's work, about once per 100,000 new contents, and the batch's
#: first block holds back the writing of the blocks after it until its own is trained.
DICT_SEGMENT = 1024
DICT_DMER = 8


def train_text_dictionary(utf8: list[bytes]) -> bytes | None:
    """A zstd dictionary trained on normalized texts (their UTF-8; the cover algorithm with
    segment size `DICT_SEGMENT` and dmer size `DICT_DMER`), or None when they are too few to
    help."""
    samples: list[bytes | bytearray | memoryview] = list(utf8)
    total = sum(len(x) for x in samples)
    if len(samples) < DICT_MIN_SAMPLES or total < DICT_MIN_BYTES:
        return None
    try:
        return zstandard.train_dictionary(min(DICT_MAX_BYTES, total // 10), samples,
                                          k=DICT_SEGMENT, d=DICT_DMER).as_bytes()
    except zstandard.ZstdError:
        return None


@lru_cache(maxsize=4)
def _compressor(dictionary: bytes | None) -> zstandard.ZstdCompressor:
    if dictionary is None:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL,
                                    dict_data=zstandard.ZstdCompressionDict(dictionary))


def compress_texts(utf8: list[bytes], dictionary: bytes | None) -> list[bytes]:
    """Normalized texts (their UTF-8), each compressed on its own, with ``dictionary`` if
    any: the same bytes in whichever process compresses them."""
    compress = _compressor(dictionary).compress
    return [compress(t) for t in utf8]


class ReadConnection(Protocol):
    """What the SQL readers ask of a connection: a ``sqlite3.Connection``, or a PostgreSQL
    one spoken to in SQLite's parameter style (`postgres.QmarkConnection`)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

    def close(self) -> None: ...


class TextDecoder:
    """Decompresses stored texts, loading each batch dictionary once."""

    def __init__(self, con: ReadConnection) -> None:
        self._con = con
        self._plain = zstandard.ZstdDecompressor()
        self._by_dict: dict[int, zstandard.ZstdDecompressor] = {}

    def text(self, blob: bytes, dictionary: int | None) -> str:
        return self.utf8(blob, dictionary).decode()

    def utf8(self, blob: bytes, dictionary: int | None) -> bytes:
        """The stored text as its UTF-8 bytes (not checked to be valid UTF-8)."""
        if dictionary is None:
            return self._plain.decompress(blob)
        dctx = self._by_dict.get(dictionary)
        if dctx is None:
            (data,) = self._con.execute("SELECT data FROM dictionaries WHERE id = ?",
                                        (dictionary,)).fetchone()
            dctx = self._by_dict[dictionary] = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(data))
        return dctx.decompress(blob)


class Digests:
    """Checks decompressed texts against their ``content_id`` (`compare.content_id`: sha256
    of the scope key, NUL and the text, first 16 bytes), the scope keys fetched by
    ``scope_keys(ids)`` as they are first needed and kept."""

    def __init__(self, label: Path | str, scope_keys: Callable[[list[int]], dict[int, str]],
                 error: Callable[[str], NearDedupError] | None = None) -> None:
        self.label = label
        self._fetch = scope_keys
        self._error = error or (lambda detail: damaged(label, detail))
        self._hashes: dict[int, Any] = {}

    def check(self, ids: Sequence[int], utf8: Sequence[bytes],
              digests: Sequence[tuple[bytes, int]]) -> None:
        """``utf8[i]`` is the text of content row ``ids[i]`` whose (content_id, scope) is
        ``digests[i]``; a mismatch raises `damaged` naming the first such row."""
        missing = sorted({scope for _, scope in digests} - self._hashes.keys())
        if missing:
            found = self._fetch(missing)
            for scope in missing:
                if scope not in found:
                    raise self._error(f"content row scope {scope} is missing")
                self._hashes[scope] = scope_hash(found[scope])
        for cid, text, (digest, scope) in zip(ids, utf8, digests, strict=True):
            h = self._hashes[scope].copy()
            h.update(text)
            if h.digest()[:16] != bytes(digest or b""):
                raise self._error(f"the text of content row {cid} does not match its "
                                  f"content_id")


SQL_IN = 900  # ids per ``IN (…)`` list, under SQLite's bound-parameter limit


def rows_in(con: ReadConnection, sql: str, ids: Sequence[int | bytes]) -> Iterator[tuple]:
    """Rows of ``sql`` (one ``{}`` standing for the id list) over ``ids``, in slices."""
    for i in range(0, len(ids), SQL_IN):
        part = ids[i:i + SQL_IN]
        yield from con.execute(sql.format(",".join("?" * len(part))), part)


CACHE_SIZE = -262144  # page cache of a connection that writes (or reads a lot): 256 MiB


def uri_path(path: Path) -> str:
    return urllib.parse.quote(str(path.resolve()))


def connect_read_only(path: Path, cached: bool = False) -> sqlite3.Connection:
    """A worker's own ``mode=ro`` connection to the SQLite index at ``path``; ``cached``: kept
    for many lookups, with the writer's page cache size."""
    con = sqlite3.connect(f"file:{uri_path(path)}?mode=ro", uri=True, check_same_thread=False)
    if cached:
        con.execute(f"PRAGMA cache_size = {CACHE_SIZE}")
    return con


class IndexTexts:
    """Normalized texts of contents by row id, on a read connection.

    Content rows (and dictionaries) are insert-only and never change once committed, so a
    connection that reads a newer state of the index than a scan's snapshot returns the same
    text for every id that existed when the snapshot was taken: verify workers may read texts
    on their own read-only connections."""

    def __init__(self, path: Path | str, con: ReadConnection) -> None:
        self.path = path
        #: where a worker opens its own reader (`open_texts`): the absolute SQLite path, or
        #: the PostgreSQL URL with its credentials (``path`` is the URL without password)
        self.location = str(path.resolve()) if isinstance(path, Path) else str(path)
        self._con = con
        self._reader = TextDecoder(con)
        self._digests = Digests(path, self._scope_keys)

    def _scope_keys(self, ids: list[int]) -> dict[int, str]:
        return dict(rows_in(self._con, "SELECT id, scope_key FROM scopes WHERE id IN ({})",
                            ids))

    @classmethod
    def open(cls, path: Path) -> IndexTexts:
        """Texts on a fresh read-only connection (``mode=ro``: while a scan holds its snapshot
        open, the index's side files exist and this connection creates nothing)."""
        return cls(path, connect_read_only(path))

    def close(self) -> None:
        self._con.close()

    def package_origins(self, package_rowid: int) -> Iterator[tuple]:
        """(sample_id, split, file, line, source JSON) of one indexed package's samples in
        package order. A package's sources never change once committed, so any connection
        reads the same rows as the scan's snapshot."""
        return self._con.execute(
            "SELECT sample_id, split, file, line, source FROM sources WHERE package = ? "
            "ORDER BY position", (package_rowid,))

    SAMPLE_COLUMNS = SAMPLE_COLUMNS

    def package_column(self, package_rowid: int, column: str) -> list:
        """One column (`SAMPLE_COLUMNS`) of one indexed package's samples, in package order
        (as `package_origins`, any connection reads the same rows as the scan's snapshot)."""
        if column not in self.SAMPLE_COLUMNS:
            raise ValueError(f"not a sample column: {column}")
        return [row[0] for row in self._con.execute(
            f"SELECT {column} FROM sources WHERE package = ? ORDER BY position",
            (package_rowid,))]

    def shipped(self, ids: list[int]) -> ShippedTexts:
        """The compressed texts of these content ids with the dictionaries they need: what a
        task on another machine gets instead of a connection (``--executor ray``)."""
        blobs: dict[int, tuple[bytes, int | None]] = {}
        digests: dict[int, tuple[bytes, int]] = {}
        for cid, blob, dictionary, digest, scope in rows_in(self._con, _TEXTS_SQL, ids):
            blobs[cid] = (bytes(blob), dictionary)
            digests[cid] = (bytes(digest), scope)
        if len(blobs) != len(set(ids)):
            raise damaged(self.path, f"{len(set(ids)) - len(blobs):,} content rows are missing")
        dictionaries = {}
        for d in sorted({d for _, d in blobs.values() if d is not None}):
            (data,) = self._con.execute("SELECT data FROM dictionaries WHERE id = ?",
                                        (d,)).fetchone()
            dictionaries[d] = bytes(data)
        scopes = sorted({scope for _, scope in digests.values()})
        return ShippedTexts(str(self.path), blobs, dictionaries, digests,
                            self._scope_keys(scopes) if scopes else {})

    def texts(self, ids: list[int]) -> dict[int, str]:
        """Texts of these content ids, all of which exist (they come from sources or bands):
        a missing row, or a text that does not decompress, is not UTF-8 or does not match its
        content_id, means the index is damaged."""
        ids = list(dict.fromkeys(ids))
        out = {}
        for cid, text in zip(ids, self.utf8_texts(ids), strict=True):
            try:
                out[cid] = text.decode()
            except UnicodeDecodeError as exc:
                raise damaged(self.path, f"the text of content row {cid} is not UTF-8: "
                                         f"{exc}") from None
        return out

    def utf8_texts(self, ids: list[int]) -> list[bytes]:
        """The texts of these distinct content ids, in the order given, as UTF-8 bytes that
        the caller checks (`texts` of an id whose bytes are not UTF-8 names the damage):
        decompressed without building Python strings, each checked against its content_id
        (`Digests`)."""
        out: dict[int, bytes] = {}
        digests: dict[int, tuple[bytes, int]] = {}
        for cid, blob, dictionary, digest, scope in rows_in(self._con, _TEXTS_SQL, ids):
            try:
                out[cid] = self._reader.utf8(blob, dictionary)
            except (zstandard.ZstdError, TypeError) as exc:
                raise damaged(self.path, f"the text of content row {cid} does not "
                                         f"decompress: {exc}") from None
            digests[cid] = (digest, scope)
        if len(out) != len(ids):
            raise damaged(self.path, f"{len(ids) - len(out):,} content rows are missing")
        texts = [out[cid] for cid in ids]
        self._digests.check(ids, texts, [digests[cid] for cid in ids])
        return texts


_TEXTS_SQL = ("SELECT id, text_z, dictionary, content_id, scope FROM contents "
              "WHERE id IN ({})")


class ShippedTexts:
    """Compressed texts of some contents and their dictionaries, picklable: the same
    ``texts(ids)`` as `IndexTexts` without any connection to the index."""

    def __init__(self, label: str, blobs: dict[int, tuple[bytes, int | None]],
                 dictionaries: dict[int, bytes],
                 digests: dict[int, tuple[bytes, int]] | None,
                 scope_keys: dict[int, str]) -> None:
        """``digests``: each content's (content_id, scope), the texts checked against them
        (`Digests`, with ``scope_keys``); None only for texts that no index stores."""
        self.label = label
        self.blobs = blobs
        self.dictionaries = dictionaries
        self.digests = digests
        self.scope_keys = scope_keys

    def texts(self, ids: list[int]) -> dict[int, str]:
        return {cid: text.decode() for cid, text in zip(ids, self.utf8_texts(ids), strict=True)}

    def utf8_texts(self, ids: list[int]) -> list[bytes]:
        """The texts of these content ids, in the order given, as UTF-8 bytes (see
        `IndexTexts.utf8_texts`)."""
        plain = zstandard.ZstdDecompressor()
        by_dict = {d: zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(data))
                   for d, data in self.dictionaries.items()}
        out = []
        for cid in ids:
            blob, dictionary = self.blobs[cid]
            out.append((plain if dictionary is None else by_dict[dictionary]).decompress(blob))
        if self.digests is not None:
            keys = self.scope_keys
            Digests(self.label, lambda scopes: {s: keys[s] for s in scopes if s in keys}
                    ).check(ids, out, [self.digests[cid] for cid in ids])
        return out


def damaged(path: Path | str, detail: str) -> NearDedupError:
    """The one-line error for an index whose data contradicts itself."""
    return NearDedupError(f"index {path}: damaged ({detail}); restore it from a backup or run "
                          f"`near-dedup --index {path} index check`")


_RAW_TEXTS_SQL = ("SELECT r.text_sha256, s.scope_key, r.content FROM raw_texts r "
                  "JOIN scopes s ON s.id = r.scope WHERE r.text_sha256 IN ({})")


class KnownTexts:
    """Contents of the raw compared texts that committed batches indexed, on a read
    connection of its own (an `index` worker's): rows are insert-only, so what it finds stays
    true while the batch that asks is open."""

    def __init__(self, con: Any) -> None:
        self._con = con

    def contents(self, shas: list[bytes]) -> dict[tuple[bytes, str], int]:
        """(text_sha256, scope key) -> content row id, for the given sha256s."""
        return {(bytes(sha), key): content for sha, key, content
                in rows_in(self._con, _RAW_TEXTS_SQL, shas)}

    def close(self) -> None:
        self._con.close()
