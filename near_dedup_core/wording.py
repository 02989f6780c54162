"""Counts and durations as a reader writes them: ``1 batch``, ``2 batches``, ``3 days``."""

from __future__ import annotations

#: Plurals that are not the noun with an ``s``.
_PLURALS = {"batch": "batches", "match": "matches", "entry": "entries", "day": "days"}

_UNITS = ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))


def plural(n: int, noun: str) -> str:
    """``noun`` for ``n`` of it: the noun itself for 1, its plural otherwise."""
    if n == 1:
        return noun
    head, _, last = noun.rpartition(" ")
    many = _PLURALS.get(last, last + "s")
    return f"{head} {many}" if head else many


def count(n: int, noun: str) -> str:
    """``1 batch``, ``1,204 records``."""
    return f"{n:,} {plural(n, noun)}"


def duration(seconds: float) -> str:
    """A duration in the largest unit that divides it: ``3 days`` (259200), ``90 minutes``,
    ``1.5 seconds``."""
    for size, unit in _UNITS:
        if seconds >= size and seconds % size == 0:
            return count(int(seconds // size), unit)
    return f"{seconds:g} {plural(2, 'second') if seconds != 1 else 'second'}"
