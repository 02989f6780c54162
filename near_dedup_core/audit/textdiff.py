"""Character-level changed spans between two normalized texts.

`difflib.SequenceMatcher` (``autojunk=False``, so frequent characters such as the space are
not ignored) finds the longest matching blocks; its cost grows with the product of the two
lengths in the worst case. To bound it, the common prefix and suffix are stripped first
(linear), and when the two remaining middles are both long (product above
``CHAR_BUDGET``) the middles are compared as sequences of words (runs of non-space plus
their trailing space) instead of characters: a near duplicate differs in few words, so the
spans are the same or slightly wider, at a fraction of the cost. Offsets always refer to the
full normalized strings.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import NamedTuple

#: Above this product of the two middle lengths, compare words instead of characters.
CHAR_BUDGET = 4_000_000
_WORD = re.compile(r"\S+\s*|\s+")


class Span(NamedTuple):
    """One changed span: ``a[a_start:a_end]`` became ``b[b_start:b_end]``."""

    op: str  # replace, delete, insert
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    a_text: str
    b_text: str

    def to_json(self) -> dict:
        return self._asdict()


def changed_spans(a: str, b: str) -> list[Span]:
    """The changed spans turning ``a`` into ``b`` (empty when equal)."""
    if a == b:
        return []
    prefix = 0
    limit = min(len(a), len(b))
    while prefix < limit and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
        suffix += 1
    mid_a, mid_b = a[prefix:len(a) - suffix], b[prefix:len(b) - suffix]
    if len(mid_a) * len(mid_b) <= CHAR_BUDGET:
        units_a, units_b = list(mid_a), list(mid_b)
    else:
        units_a, units_b = _WORD.findall(mid_a), _WORD.findall(mid_b)
    off_a, off_b = _offsets(units_a), _offsets(units_b)
    spans = []
    matcher = SequenceMatcher(None, units_a, units_b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        a0, a1 = prefix + off_a[i1], prefix + off_a[i2]
        b0, b1 = prefix + off_b[j1], prefix + off_b[j2]
        spans.append(Span(op, a0, a1, b0, b1, a[a0:a1], b[b0:b1]))
    return spans


def _offsets(units: list[str]) -> list[int]:
    out = [0]
    for u in units:
        out.append(out[-1] + len(u))
    return out


def show_span(a: str, b: str, span: Span, context: int = 20) -> str:
    """One line: the span in context, ``[-removed-]{+added+}``, newlines shown as ``⏎``."""
    before = a[max(0, span.a_start - context):span.a_start]
    after = a[span.a_end:span.a_end + context]
    lead = "…" if span.a_start > context else ""
    trail = "…" if span.a_end + context < len(a) else ""
    change = (f"[-{span.a_text}-]" if span.a_text else "") + \
             (f"{{+{span.b_text}+}}" if span.b_text else "")
    return (lead + before + change + after + trail).replace("\n", "⏎")


def merge_close(a: str, b: str, spans: list[Span], gap: int = 8) -> list[Span]:
    """Spans less than ``gap`` unchanged characters apart joined into one ``replace`` (for
    reading: "3 [-km-]{+miles+}" rather than "3 [-k-]m{+iles+}")."""
    out: list[Span] = []
    for s in spans:
        if out and s.a_start - out[-1].a_end < gap and s.b_start - out[-1].b_end < gap:
            p = out[-1]
            out[-1] = Span("replace", p.a_start, s.a_end, p.b_start, s.b_end,
                           a[p.a_start:s.a_end], b[p.b_start:s.b_end])
        else:
            out.append(s)
    return out
