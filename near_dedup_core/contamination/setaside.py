"""What is set aside from the matches (docs/contamination.md, "Common text and the
allowlist"): an item whose matches all lie within public text the team expects (the
allowlist), an item found in so many training samples that it is text common in the pool
itself (a licence header, a famous quote, a formula, a template line), or an item whose
words, one of them changed, recur in several training samples (a line of a template: a
changelog entry whose file name differs). None is reported as contamination; all are listed
in ``set_aside.jsonl`` with their figures."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
from pydantic import ValidationError

from near_dedup_core.contamination.report import AllowEntry, problem
from near_dedup_core.errors import NearDedupError
from near_dedup_core.normalize import normalize

WORD = re.compile(r"[^\W_]+")


def words_of(text: str) -> str:
    """A normalized text's words (letters and digits), one space apart, with a space at each
    end: a run of words is inside another exactly when this string is a substring."""
    return " " + " ".join(WORD.findall(text)) + " "


def read_allowlist(path: str | Path) -> list[AllowEntry]:
    """An allowlist file: JSON Lines, each ``{"text": …, "reason": …}`` (both non-empty
    strings, nothing else), in file order."""
    label = f"allowlist {path}"
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise NearDedupError(f"{label}: cannot be read ({exc.strerror or exc})") from None
    entries = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            raise NearDedupError(f"{label}:{n}: empty line")
        try:
            entries.append(AllowEntry.model_validate(orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            raise NearDedupError(f"{label}:{n}: not valid JSON ({exc})") from None
        except ValidationError as exc:
            raise NearDedupError(f"{label}:{n}: {problem(exc)}") from None
    if not entries:
        raise NearDedupError(f"{label}: no entries (one JSON object per line, with text and "
                             f"reason)")
    return entries


@dataclass(frozen=True)
class Matched:
    """One match of an item: the item (its index), the training sample's key, and the
    item's text that matched (its normalized text within the item span)."""

    item: int
    sample: tuple[int, int]
    text: str
    whole: bool = True  # every shingle or word of the item matched
    short: bool = False  # the item is found by its words (a line, which a template may hold)


class Allowlist:
    """Allowlist entries as runs of words: a match is allowlisted when the words of the
    item's matched text are a run of the words of one entry (the item shares nothing else
    with the sample)."""

    def __init__(self, entries: Sequence[AllowEntry]):
        self.entries = list(entries)
        self._words = [words_of(normalize(e.text)) for e in self.entries]

    def entry_of(self, text: str) -> int | None:
        """The first entry holding the matched text's words, None when none does."""
        w = words_of(text)
        if w == "  ":
            return None
        for k, entry in enumerate(self._words):
            if w in entry:
                return k
        return None


@dataclass(frozen=True)
class Aside:
    """An item's matches set aside: ``reason``, the samples, the entry (allowlist)."""

    item: int
    reason: str
    samples: int
    entry: int | None
    first: int  # index of its first match


@dataclass(frozen=True)
class MatchColumns:
    """The matches (in report order) as columns, one row a match: the item, its training
    sample (an int per sample: equal ints, one sample), whether every shingle or word of
    the item matched (``whole``), whether the item is found by its words (``short``), and
    the allowlist entry of its matched text (−1: none; None: no allowlist)."""

    item: np.ndarray
    sample: np.ndarray
    whole: np.ndarray
    short: np.ndarray
    entry: np.ndarray | None = None


def set_aside(matches: list[Matched], allowlist: Allowlist, common_samples: int,
              template_samples: int | None = None) -> tuple[list[int], list[Aside]]:
    """`set_aside_columns` of matches given one object each."""
    codes: dict[tuple[int, int], int] = {}
    entry = None
    if allowlist.entries:
        entry = np.asarray([-1 if (e := allowlist.entry_of(m.text)) is None else e
                            for m in matches], dtype=np.int64)
    columns = MatchColumns(
        np.asarray([m.item for m in matches], dtype=np.int64),
        np.asarray([codes.setdefault(m.sample, len(codes)) for m in matches], dtype=np.int64),
        np.asarray([m.whole for m in matches], dtype=bool),
        np.asarray([m.short for m in matches], dtype=bool), entry)
    return set_aside_columns(columns, common_samples, template_samples)


class _Groups:
    """The rows of `MatchColumns` grouped by item, items in order of their first row."""

    def __init__(self, m: MatchColumns) -> None:
        self.items, first, self.of_row = np.unique(m.item, return_index=True,
                                                   return_inverse=True)
        self.of_row = self.of_row.reshape(-1)
        self.order = np.argsort(first, kind="stable").tolist()
        self.n = len(m.item)
        self.sample = m.sample
        self.by_sample = np.lexsort((m.sample, self.of_row))  # an item's same samples adjacent

    def samples(self, mask: np.ndarray) -> np.ndarray:
        """Per item, its distinct samples among the rows of ``mask``."""
        rows = self.by_sample[mask[self.by_sample]]
        group, sample = self.of_row[rows], self.sample[rows]
        new = np.ones(len(rows), dtype=bool)
        new[1:] = (group[1:] != group[:-1]) | (sample[1:] != sample[:-1])
        return np.bincount(group[new], minlength=len(self.items))

    def first(self, mask: np.ndarray) -> np.ndarray:
        """Per item, its first row among those of ``mask`` (−1: none)."""
        out = np.full(len(self.items), -1, dtype=np.int64)
        rows = np.flatnonzero(mask)
        groups, at = np.unique(self.of_row[rows], return_index=True)  # first occurrences
        out[groups] = rows[at]
        return out


#: what is kept of an item's matches that are not allowlisted
_NONE, _ALL, _WHOLE = 0, 1, 2


def set_aside_columns(m: MatchColumns, common_samples: int,
                      template_samples: int | None = None) -> tuple[list[int], list[Aside]]:
    """Split the matches (in report order) into those reported as contamination (their
    indexes) and those set aside, per item: allowlisted matches first, then, of the rest, the
    matches of an item found in at least ``common_samples`` training samples: all of them,
    or, when its whole copies alone are fewer, its partial matches only (the item is an
    instance of a template common in the pool; a whole copy of it is still a leak). Else,
    with ``template_samples`` (report format 4), a short item (found by its words) whose
    partial matches (a word changed, a shingle missing) are in at least ``template_samples``
    training samples is a line of a template of the pool: those matches are set aside
    (``template``), its whole copies are still contamination. A longer item's near copies
    in a few documents are leaks, each edited, not the lines of a template.

    Counted per item over columns, not per match: a common text's matches run to millions
    in a large pool."""
    if not len(m.item):
        return [], []
    g = _Groups(m)
    listed = m.entry >= 0 if m.entry is not None else np.zeros(g.n, dtype=bool)
    rest = ~listed
    partial = rest & ~m.whole
    n_listed, first_listed = g.samples(listed), g.first(listed)
    n_rest, first_rest = g.samples(rest), g.first(rest)
    n_whole = g.samples(rest & m.whole)
    n_partial, first_partial = g.samples(partial), g.first(partial)
    keep = np.full(len(g.items), _NONE, dtype=np.int8)
    aside: list[Aside] = []
    for u in g.order:
        item = int(g.items[u])
        if n_listed[u]:
            k = int(first_listed[u])
            assert m.entry is not None
            aside.append(Aside(item, "allowlist", int(n_listed[u]), int(m.entry[k]), k))
        if first_rest[u] < 0:
            continue
        if n_rest[u] < common_samples:
            if template_samples is None or n_partial[u] < template_samples or \
                    not m.short[first_rest[u]]:
                keep[u] = _ALL
                continue
            aside.append(Aside(item, "template", int(n_partial[u]), None,
                               int(first_partial[u])))
            keep[u] = _WHOLE
            continue
        if n_whole[u] >= common_samples:
            aside.append(Aside(item, "common", int(n_rest[u]), None, int(first_rest[u])))
            continue
        # common only as a template (the item's text with a part changed): its partial
        # matches are set aside, its whole copies are still contamination
        aside.append(Aside(item, "common", int(n_rest[u]), None, int(first_partial[u])))
        keep[u] = _WHOLE
    mode = keep[g.of_row]
    kept = rest & ((mode == _ALL) | ((mode == _WHOLE) & m.whole))
    return np.flatnonzero(kept).tolist(), aside
