"""The Parquet Bloom filters of the band files' ``key`` column (docs/iceberg.md, "Bloom
filters"). pyarrow writes them (`bands.BAND_FILE_OPTIONS`) and says where each row group's
filter is (its column chunk's ``bloom_filter_offset`` and ``bloom_filter_length``), but reads
none. The history join's task (`bands.file_hits`) reads a file's filters itself, in one range
(`row_group_filters`), and probes them here as the format defines its split-block filter
(parquet-format, ``BloomFilter.md``):

- a value's hash is XXH64 with seed 0 of its plain encoding, an int64's 8 little-endian bytes
  (`xxh64`);
- a filter is a header (Thrift compact: the bitset's size, the split-block algorithm, XXH64,
  no compression) followed by its bitset, blocks of eight 32-bit words (`bitset`);
- the hash's upper 32 bits choose a block; its lower 32 bits times each of eight salts,
  shifted right by 27, choose one bit of each of the block's words. A value may be in the
  row group only when all eight bits are set (`may_hold`).

A row group without a filter (a file of an earlier version), or whose filter is not that
header, may hold anything: the join reads it. A filter can only let through keys its row
group lacks, never turn one away that it holds; `index check` checks that every key of each
row group passes its filter (`unheld`), as it checks every page's CRC32. The keyed tables'
files (``content_keys``, ``raw_texts``: `keyed`) carry the same filters of their hash
column, whose values are hashed as their bytes (`xxh64_bytes`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from near_dedup_core.index_store.iceberg import datafiles

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_SALT = np.array([0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D,
                  0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31], dtype=np.uint32)
#: A filter's header after its size: the split-block algorithm, XXH64, no compression (each
#: a field holding a union holding an empty struct), then the header's end.
_HEADER_TAIL = b"\x1c\x1c\x00\x00" * 3 + b"\x00"
#: The header's first byte: field 1 (the bitset's size), a 32-bit integer.
_SIZE_FIELD = 0x15


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxh64(values: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of each int64's 8 little-endian bytes, as unsigned 64-bit integers: the
    hash the format's filters hold an INT64 value by."""
    return _xxh64(np.ascontiguousarray(values, dtype="<i8").view(np.uint64).reshape(-1, 1))


def xxh64_bytes(keys: list[bytes], width: int) -> np.ndarray:
    """XXH64 (seed 0) of each of ``keys``, byte strings of ``width`` bytes (a multiple of
    8), as unsigned 64-bit integers: the hash the format's filters hold a binary value by
    (its bytes, without their length)."""
    if width % 8 or width <= 0:
        raise ValueError(f"keys of {width} bytes: a multiple of 8 is hashed here")
    return _xxh64(np.frombuffer(b"".join(keys), dtype="<u8").reshape(len(keys), width // 8))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _P2, 31) * _P1


def _xxh64(lanes: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of each row of ``lanes``: a value's bytes as little-endian 64-bit
    words (its length a multiple of 8)."""
    count, words = lanes.shape
    with np.errstate(over="ignore"):
        stripes = words // 4
        if stripes:
            acc = [np.full(count, v, np.uint64) for v in
                   (_P1 + _P2, _P2, np.uint64(0), np.uint64(0) - _P1)]
            for s in range(stripes):
                acc = [_round(a, lanes[:, 4 * s + j]) for j, a in enumerate(acc)]
            h = _rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)
            for a in acc:
                h = (h ^ _round(np.zeros_like(a), a)) * _P1 + _P4
        else:
            h = np.full(count, _P5, np.uint64)
        h = h + np.uint64(8 * words)
        for j in range(4 * stripes, words):
            h = _rotl(h ^ _round(np.zeros_like(h), lanes[:, j]), 27) * _P1 + _P4
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def bitset(raw: Any) -> np.ndarray | None:
    """The blocks (one row of eight 32-bit words each) of one serialized filter (its header
    and bitset, ``bloom_filter_length`` bytes from ``bloom_filter_offset``); None when it is
    not the format's split-block filter by XXH64, uncompressed, of exactly that length."""
    view = memoryview(raw).cast("B")
    if len(view) < 2 or view[0] != _SIZE_FIELD:
        return None
    value = shift = 0
    at = 1
    while True:
        if at >= min(len(view), 6):
            return None
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    size = (value >> 1) ^ -(value & 1)
    if bytes(view[at : at + len(_HEADER_TAIL)]) != _HEADER_TAIL:
        return None
    at += len(_HEADER_TAIL)
    if size < 32 or size % 32 or len(view) - at != size:
        return None
    return np.frombuffer(view, dtype="<u4", offset=at).reshape(-1, 8)


def may_hold(blocks: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Whether the filter ``blocks`` may hold each value of ``hashes`` (`xxh64`)."""
    block = ((hashes >> np.uint64(32)) * np.uint64(len(blocks))) >> np.uint64(32)
    key = (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    with np.errstate(over="ignore"):
        bits = (key[:, None] * _SALT) >> np.uint32(27)
    return np.all((blocks[block.astype(np.intp)] >> bits) & np.uint32(1), axis=1)


def row_group_filters(uri: str, meta: Any, at: int, groups: list[int]) -> dict[int, np.ndarray]:
    """The filters (`bitset`) of column ``at`` in row groups ``groups`` of the data file
    ``uri`` (``meta``, its footer), read in one range when they lie together (pyarrow writes
    a file's filters one after another, before its footer), else one by one. A row group
    without a readable filter is left out."""
    return read_filters(uri, placed(meta, at, groups))


def placed(meta: Any, at: int, groups: list[int]) -> dict[int, tuple[int, int]]:
    """Where the filters of column ``at`` in row groups ``groups`` lie in the file of footer
    ``meta``: row group -> (offset, length); a row group without one is left out."""
    where: dict[int, tuple[int, int]] = {}
    for g in groups:
        found = place(meta.row_group(g).column(at))
        if found is not None:
            where[g] = found
    return where


def place(chunk: Any) -> tuple[int, int] | None:
    """Where the filter of the column chunk ``chunk`` (its footer's metadata) lies: (offset,
    length), or None when it has none."""
    offset, length = chunk.bloom_filter_offset, chunk.bloom_filter_length
    return (int(offset), int(length)) if offset is not None and length else None


def read_filters(uri: str, where: dict[Any, tuple[int, int]]) -> dict[Any, np.ndarray]:
    """The filters (`bitset`) lying at ``where`` (a name -> (offset, length)) in the data
    file ``uri``, read in one range when they lie together, else one by one; one that does
    not read as the format's split-block filter is left out."""
    if not where:
        return {}
    start = min(o for o, _ in where.values())
    end = max(o + n for o, n in where.values())
    fs, path = datafiles.filesystem(uri)
    out: dict[Any, np.ndarray] = {}
    with fs.open_input_file(path) as f:
        if end - start <= 2 * sum(n for _, n in where.values()):
            raw = memoryview(f.read_at(end - start, start))
            parts = {g: raw[o - start : o - start + n] for g, (o, n) in where.items()}
        else:
            parts = {g: memoryview(f.read_at(n, o)) for g, (o, n) in where.items()}
    for g, part in parts.items():
        blocks = bitset(part)
        if blocks is not None:
            out[g] = blocks
    return out


def unheld(uri: str, meta: Any, at: int, hashes: np.ndarray) -> int | None:
    """The first row group of the data file ``uri`` (``meta``, its footer) with a value of
    column ``at`` that its filter turns away (``hashes``: the whole column's values hashed,
    `xxh64` or `xxh64_bytes`, in row order); None when every filter holds its row group's
    values (or the file has none)."""
    filters = row_group_filters(uri, meta, at, list(range(meta.num_row_groups)))
    first = 0
    for g in range(meta.num_row_groups):
        rows = meta.row_group(g).num_rows
        if g in filters and not may_hold(filters[g], hashes[first : first + rows]).all():
            return g
        first += rows
    return None
