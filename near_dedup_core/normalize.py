"""Text normalization for comparison: Unicode NFKC, casefold, whitespace runs → one space, trim.

`normalize` is the definition. Pure-ASCII text takes a fast path with the same result: NFKC
is the identity on ASCII and casefold equals lower(). ``str.split()`` without arguments
splits on every Unicode whitespace run, which is exactly the collapse rule.

`normalize_many` gives the same strings for a batch, about 2× faster on ASCII text and 5×
on Chinese or Cyrillic, in one compiled pass over the batch's code points with a per-character
table ``fold(c) = casefold(NFKC(c))`` of the Basic Multilingual Plane. Character by
character is exact for a text when no character of it can interact with its neighbours in
NFKC: NFKC decomposes (each character on its own), reorders runs of combining marks and
recomposes a starter with what follows it. So a character is *safe* when its compatibility
decomposition starts with a starter (canonical combining class 0) that is never the second
half of a canonical composition; then no reordering or composition crosses a character
boundary, NFKC(text) is the concatenation of NFKC(c), and casefold, which is context-free
in Python, follows suit. A text holding any unsafe character (a combining mark, a Hangul
jamo, a lone surrogate) or one outside the BMP takes `normalize` itself. The table takes
about 0.1 s to build, once per process, and only for batches with enough non-ASCII text.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import numpy as np

from near_dedup_core.jit import njit
from near_dedup_core.signature import Spans

#: Non-ASCII characters a batch must hold before the table is worth building.
TABLE_MIN_CHARS = 1 << 20
_BMP = 0x10000
_UNSAFE = 0xFF  # length marker in the table: the text takes `normalize`
_NO_SINGLE = 0xFFFFFFFF  # in the ``single`` table: a character the kernel's loop spells out


def normalize(text: str) -> str:
    """Return the comparison form of ``text``."""
    if text.isascii():
        return " ".join(text.lower().split())
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _composition_seconds() -> set[int]:
    """Characters that are the second half of some canonical decomposition pair (what NFC
    may compose with the character before them), and the Hangul vowel and trailing jamo,
    which compose by the algorithm of Unicode §3.12 instead."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for c in range(0x30000):  # no character above plane 2 has a decomposition
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(int(parts[1], 16))
    return seconds


@lru_cache(maxsize=1)
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, length, flat, space, single) over the BMP: ``fold(c)`` is
    ``flat[start[c]:][:length[c]]`` (length ``_UNSAFE`` for an unsafe character); ``space[c]``
    says c is whitespace; ``single[c]`` is ``fold(c)`` where that is one character and no
    whitespace (nearly every character of real text: one lookup instead of four), else
    ``_NO_SINGLE``."""
    seconds = _composition_seconds()
    start = np.zeros(_BMP, dtype=np.int32)
    length = np.zeros(_BMP, dtype=np.uint8)
    space = np.zeros(_BMP, dtype=np.bool_)
    single = np.full(_BMP, _NO_SINGLE, dtype=np.uint32)
    flat: list[int] = []
    for c in range(_BMP):
        ch = chr(c)
        space[c] = ch.isspace()
        if 0xD800 <= c < 0xE000:
            length[c] = _UNSAFE
            continue
        first = unicodedata.normalize("NFKD", ch)[0]
        if unicodedata.combining(first) or ord(first) in seconds:
            length[c] = _UNSAFE
            continue
        folded = unicodedata.normalize("NFKC", ch).casefold()
        start[c] = len(flat)
        length[c] = len(folded)
        flat.extend(map(ord, folded))
    folds = np.asarray(flat, dtype=np.uint32)
    one = np.flatnonzero(length == 1)
    f = folds[start[one]]
    keep = ~((f < _BMP) & space[np.minimum(f, _BMP - 1)])
    single[one[keep]] = f[keep]
    return start, length, folds, space, single


@njit(cache=True, nogil=True)
def _fold_collapse(cps, offsets, start, length, flat, space, single, out, out_offsets, ok):
    """Fold each text ``cps[offsets[i]:offsets[i + 1]]`` character by character and collapse
    its whitespace into ``out``; ``ok[i]`` is False for a text that must take `normalize`."""
    pos = 0
    for i in range(offsets.shape[0] - 1):
        begin = pos
        pending = False  # a whitespace run after the first kept character
        ok[i] = True
        for j in range(offsets[i], offsets[i + 1]):
            c = np.int64(cps[j])
            if c < 0x10000 and single[c] != _NO_SINGLE and pos + 4 <= out.shape[0]:
                if pending:
                    out[pos] = 32
                    pos += 1
                    pending = False
                out[pos] = single[c]
                pos += 1
                continue
            if c >= 0x10000 or length[c] == 0xFF:
                ok[i] = False
                break
            if pos + 3 * length[c] + 1 > out.shape[0]:  # no room left: the slow path
                ok[i] = False
                break
            s = start[c]
            for t in range(length[c]):
                f = np.int64(flat[s + t])
                if f < 0x10000 and space[f]:
                    if pos > begin:
                        pending = True
                    continue
                if pending:
                    out[pos] = 32
                    pos += 1
                    pending = False
                out[pos] = f
                pos += 1
        if not ok[i]:
            pos = begin
        out_offsets[i] = begin
        out_offsets[i + 1] = pos
    return pos


@njit(cache=True, nogil=True)
def _ascii_collapse(cps, offsets, out, out_offsets):
    """Lower-case ASCII texts and collapse their whitespace (tab … CR, FS … US, space)."""
    pos = 0
    for i in range(offsets.shape[0] - 1):
        begin = pos
        pending = False
        for j in range(offsets[i], offsets[i + 1]):
            c = cps[j]
            if c == 32 or 9 <= c <= 13 or 28 <= c <= 31:
                if pos > begin:
                    pending = True
                continue
            if pending:
                out[pos] = 32
                pos += 1
                pending = False
            out[pos] = c + 32 if 65 <= c <= 90 else c
            pos += 1
        out_offsets[i] = begin
        out_offsets[i + 1] = pos
    return pos


def build_table() -> None:
    """Build the character table now (once per process): `normalize_many` then uses it for
    every batch, however little non-ASCII text the batch holds. For a process that will
    normalize many small batches, or a forkserver whose workers should inherit it."""
    _tables()


#: The worker pool's forkserver runs it (`near_dedup_core._forkserver`).
warm_up = build_table


def _offsets(texts: list[str]) -> np.ndarray:
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    return offsets


def _utf32(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _collapse_ascii(group: list[str]) -> tuple[np.ndarray, list[int]]:
    """The ASCII texts of ``group`` normalized into one byte buffer, and their bounds."""
    cps = np.frombuffer("".join(group).encode("ascii"), dtype=np.uint8)
    buf = np.empty(len(cps), dtype=np.uint8)
    ends = np.empty(len(group) + 1, dtype=np.int64)
    _ascii_collapse(cps, _offsets(group), buf, ends)
    return buf, ends.tolist()


def _fold_group(group: list[str]) -> tuple[np.ndarray, list[int], list[bool]] | None:
    """The non-ASCII texts of ``group`` folded through the table into one code-point buffer,
    their bounds, and whether each was safe to fold (else it takes `normalize`); None when
    the group is too small to build the table for (and it is not built yet)."""
    offsets = _offsets(group)
    if offsets[-1] < TABLE_MIN_CHARS and _tables.cache_info().currsize == 0:
        return None
    start, length, flat, space, single = _tables()
    cps = _utf32("".join(group))
    wide = np.empty(2 * len(cps) + 64, dtype=np.uint32)
    ends = np.empty(len(group) + 1, dtype=np.int64)
    ok = np.empty(len(group), dtype=np.bool_)
    _fold_collapse(cps, offsets, start, length, flat, space, single, wide, ends, ok)
    return wide, ends.tolist(), ok.tolist()


def normalize_many(texts: list[str]) -> list[str]:
    """`normalize` of each text (see the module doc for how)."""
    return normalize_spans(texts)[0]


def normalize_spans(texts: list[str]) -> tuple[list[str], list[Spans]]:
    """`normalize_many` of ``texts``, and the code points its strings were made from
    (`signature.Spans`: one part for the ASCII texts, one for the folded others), so that
    hashing them need not convert the strings back; a text that took `normalize` itself is
    in no part."""
    out: list[str] = [""] * len(texts)
    spans: list[Spans] = []
    ascii_idx = [i for i, t in enumerate(texts) if t.isascii()]
    other_idx = [i for i, t in enumerate(texts) if not t.isascii()]
    if ascii_idx:
        buf, bounds = _collapse_ascii([texts[i] for i in ascii_idx])
        view = memoryview(buf.data)
        for k, i in enumerate(ascii_idx):
            out[i] = str(view[bounds[k]:bounds[k + 1]], "ascii")
        ends = np.asarray(bounds, dtype=np.int64)
        spans.append(Spans(buf, np.asarray(ascii_idx, dtype=np.int64), ends[:-1], ends[1:]))
    if other_idx:
        folded = _fold_group([texts[i] for i in other_idx])
        if folded is None:
            for i in other_idx:
                out[i] = normalize(texts[i])
            return out, spans
        wide, bounds, fine = folded
        view = memoryview(wide.view(np.uint8).data)
        for k, i in enumerate(other_idx):
            out[i] = (str(view[4 * bounds[k]:4 * bounds[k + 1]], "utf-32-le") if fine[k]
                      else normalize(texts[i]))
        ok = np.asarray(fine, dtype=np.bool_)
        ends = np.asarray(bounds, dtype=np.int64)
        spans.append(Spans(wide, np.asarray(other_idx, dtype=np.int64)[ok], ends[:-1][ok],
                           ends[1:][ok]))
    return out, spans


def normalize_code_points(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The code points of `normalize` of each text, concatenated, and their offsets
    (len(texts) + 1): the values of ``signature.code_points(normalize_many(texts))``
    without making the strings, for a caller that hashes every text and needs few of them
    as strings (`text_at`). uint8 when every text is ASCII, else uint32."""
    n = len(texts)
    pieces: list[np.ndarray] = [np.zeros(0, dtype=np.uint8)] * n
    ascii_idx = [i for i, t in enumerate(texts) if t.isascii()]
    other_idx = [i for i, t in enumerate(texts) if not t.isascii()]
    if ascii_idx:
        buf, bounds = _collapse_ascii([texts[i] for i in ascii_idx])
        for k, i in enumerate(ascii_idx):
            pieces[i] = buf[bounds[k]:bounds[k + 1]]
    if other_idx:
        folded = _fold_group([texts[i] for i in other_idx])
        if folded is None:
            for i in other_idx:
                pieces[i] = _utf32(normalize(texts[i]))
        else:
            wide, bounds, fine = folded
            for k, i in enumerate(other_idx):
                pieces[i] = (wide[bounds[k]:bounds[k + 1]] if fine[k]
                             else _utf32(normalize(texts[i])))
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=n), out=out_offsets[1:])
    if not n:
        return np.zeros(0, dtype=np.uint8), out_offsets
    out = np.concatenate(pieces, dtype=np.uint32 if other_idx else np.uint8)
    return out, out_offsets


def text_at(cps: np.ndarray, offsets: np.ndarray, i: int) -> str:
    """Text ``i`` of a `normalize_code_points` batch, as a string."""
    return _decoded(cps[offsets[i]:offsets[i + 1]])


def span_at(cps: np.ndarray, offsets: np.ndarray, i: int, start: int, end: int) -> str:
    """``text_at(cps, offsets, i)[start:end]`` (0 ≤ start ≤ end), decoding that span alone."""
    first = int(offsets[i])
    length = int(offsets[i + 1]) - first
    return _decoded(cps[first + min(start, length):first + min(end, length)])


def _decoded(piece: np.ndarray) -> str:
    """Code points of a `normalize_code_points` batch as a string."""
    if piece.dtype == np.uint8:
        return piece.tobytes().decode("ascii")
    return piece.astype(np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
