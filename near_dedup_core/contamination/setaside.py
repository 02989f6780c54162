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


def set_aside(matches: list[Matched], allowlist: Allowlist, common_samples: int,
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
    in a few documents are leaks, each edited, not the lines of a template."""
    by_item: dict[int, list[int]] = {}
    for k, m in enumerate(matches):
        by_item.setdefault(m.item, []).append(k)
    kept: list[int] = []
    aside: list[Aside] = []
    for item, ks in by_item.items():
        if allowlist.entries:
            allowed = [(k, allowlist.entry_of(matches[k].text)) for k in ks]
        else:  # no entry to hold any of them (a common item has one match per sample)
            allowed = [(k, None) for k in ks]
        listed = [(k, e) for k, e in allowed if e is not None]
        if listed:
            aside.append(Aside(item, "allowlist", len({matches[k].sample for k, _ in listed}),
                               listed[0][1], listed[0][0]))
        rest = [k for k, e in allowed if e is None]
        samples = {matches[k].sample for k in rest}
        if not rest:
            continue
        if len(samples) < common_samples:
            partial = [k for k in rest if not matches[k].whole]
            n_partial = len({matches[k].sample for k in partial})
            if template_samples is None or n_partial < template_samples or \
                    not matches[rest[0]].short:
                kept.extend(rest)
                continue
            aside.append(Aside(item, "template", n_partial, None, partial[0]))
            kept.extend(k for k in rest if matches[k].whole)
            continue
        whole = [k for k in rest if matches[k].whole]
        if len({matches[k].sample for k in whole}) >= common_samples:
            aside.append(Aside(item, "common", len(samples), None, rest[0]))
            continue
        # common only as a template (the item's text with a part changed): its partial
        # matches are set aside, its whole copies are still contamination
        partial = [k for k in rest if not matches[k].whole]
        aside.append(Aside(item, "common", len(samples), None, partial[0]))
        kept.extend(whole)
    return sorted(kept), aside
