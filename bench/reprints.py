"""Realistic reprints: copies of a document with the small edits that re-published text gets.

Every edit is driven by one ``random.Random`` so that a seed gives the same reprints on every
machine. The edits are the ones seen when the same page comes back in a later crawl or a later
package version: a sentence dropped or added, a year bumped, a navigation line, two words
swapped, re-wrapped lines or a changed title case. Some of them change the numbers of the text
(year bump), so the numeric guard keeps those copies apart, as it should.
"""

from __future__ import annotations

import random
import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_YEAR = re.compile(r"\b(19[5-9]\d|20[0-3]\d)\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")

NAVIGATION_LINES = (
    "Home | Documentation | Downloads | Support",
    "Back to top",
    "Previous page | Next page | Table of contents",
    "Printer-friendly version",
    "You are here: Home > Manuals > Reference",
    "Skip to main content",
    "Share this page: Mail | Print",
    "Contents | Index | Search",
)


def _sentences(text: str) -> list[str]:
    return _SENTENCE_END.split(text)


def delete_sentence(text: str, rng: random.Random, donor: str) -> str | None:
    parts = _sentences(text)
    if len(parts) < 3:
        return None
    del parts[rng.randrange(len(parts))]
    return " ".join(parts)


def insert_sentence(text: str, rng: random.Random, donor: str) -> str | None:
    donor_parts = [s for s in _sentences(donor) if 20 <= len(s) <= 300]
    if not donor_parts:
        return None
    parts = _sentences(text)
    parts.insert(rng.randrange(len(parts) + 1), rng.choice(donor_parts))
    return " ".join(parts)


def change_year(text: str, rng: random.Random, donor: str) -> str | None:
    years = list(_YEAR.finditer(text))
    if not years:
        return None
    m = rng.choice(years)
    new = int(m.group(0)) + rng.choice((-2, -1, 1, 2, 3))
    return f"{text[:m.start()]}{new}{text[m.end():]}"


def add_navigation(text: str, rng: random.Random, donor: str) -> str | None:
    line = rng.choice(NAVIGATION_LINES)
    return f"{line}\n{text}" if rng.random() < 0.5 else f"{text}\n{line}"


def swap_words(text: str, rng: random.Random, donor: str) -> str | None:
    words = list(_WORD.finditer(text))
    if len(words) < 4:
        return None
    i = rng.randrange(len(words) - 1)
    a, b = words[i], words[i + 1]
    return f"{text[:a.start()]}{b.group(0)}{text[a.end():b.start()]}{a.group(0)}{text[b.end():]}"


def rewrap_or_recase(text: str, rng: random.Random, donor: str) -> str | None:
    """Whitespace and case only: the normalized text is unchanged (an exact duplicate)."""
    if rng.random() < 0.5:
        return re.sub(r"(?<=\S)\n(?=\S)", lambda m: " " if rng.random() < 0.5 else "\n  ", text)
    first, sep, rest = text.partition("\n")
    return f"{first.upper()}{sep}{rest}"


EDITS = (
    (delete_sentence, 3),
    (insert_sentence, 3),
    (change_year, 1),
    (add_navigation, 2),
    (swap_words, 2),
    (rewrap_or_recase, 2),
)


def reprint(text: str, rng: random.Random, donor: str) -> tuple[str, list[str]]:
    """Apply one to three random edits; return the new text and the names of the edits."""
    funcs = [f for f, _ in EDITS]
    weights = [w for _, w in EDITS]
    applied: list[str] = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        for _attempt in range(4):
            edit = rng.choices(funcs, weights)[0]
            result = edit(text, rng, donor)
            if result is not None and result != text:
                text = result
                applied.append(edit.__name__)
                break
    if not applied:
        text = add_navigation(text, rng, donor) or text
        applied.append("add_navigation")
    return text, applied
