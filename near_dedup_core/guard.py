"""The numeric/unit guard: texts whose number sequences or unit sequences differ never merge.

Both sequences are read from the normalized text, in order of appearance:
- numbers: runs of digits with inner ``.`` or ``,`` separators (``1,000.5``); "1,000" and
  "1000" count as different on purpose: the guard errs towards keeping samples apart;
- units: symbol units (``%``, ``‰``, ``元``, ``万``, ``亿``, currency signs …) wherever they occur,
  and word units (``kg``, ``km``, ``ms``, ``usd``, ``bp`` …) when they follow a number (``5 kg``,
  ``5kg``) or, for currency codes, precede one (``usd 5``), so that ordinary words such as
  "m" or "s" in prose are not units.
Extra unit tokens come from the config (``extra_units``), globally or per domain.
"""

from __future__ import annotations

import re
from functools import lru_cache

from near_dedup_core.config import NearDedupConfig

SYMBOL_UNITS = ("%", "‰", "‱", "°", "℃", "℉", "$", "¥", "€", "£", "₩", "₹",
                "元", "角", "分", "万", "亿", "兆", "千", "百", "吨", "斤", "公斤", "公里", "米", "股", "倍")
WORD_UNITS = ("kg", "g", "mg", "lb", "oz", "km", "m", "cm", "mm", "nm", "mi", "ft",
              "ms", "ns", "s", "sec", "min", "h", "hr", "hrs", "kb", "mb", "gb", "tb",
              "kib", "mib", "gib", "tib", "hz", "khz", "mhz", "ghz", "w", "kw", "mw", "kwh",
              "v", "mv", "kv", "ma", "l", "ml", "usd", "cny", "rmb", "eur", "gbp", "jpy",
              "hkd", "bp", "bps", "pp", "x")
#: Word units that also count when they precede the number ("usd 5").
PREFIX_UNITS = ("usd", "cny", "rmb", "eur", "gbp", "jpy", "hkd")

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


class Guard:
    """Extracts (numbers, units) of a normalized text for one set of unit tokens."""

    def __init__(self, extra: frozenset[str] = frozenset()) -> None:
        extra_words = {t for t in extra if t.isascii() and t.isalpha()}
        extra_symbols = set(extra) - extra_words
        words = sorted(set(WORD_UNITS) | extra_words, key=lambda t: (-len(t), t))
        symbols = sorted(set(SYMBOL_UNITS) | extra_symbols, key=lambda t: (-len(t), t))
        prefixes = sorted(PREFIX_UNITS, key=lambda t: (-len(t), t))
        alt = lambda tokens: "|".join(re.escape(t) for t in tokens)  # noqa: E731
        self._after = re.compile(rf" ?({alt(words)})(?![^\W\d_])")       # 5kg, 5 kg
        self._before = re.compile(rf"(?<![^\W\d_])({alt(prefixes)}) ?$")  # usd 5
        self._symbols = re.compile(alt(symbols))

    def sequences(self, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        numbers = []
        units: dict[int, str] = {}
        for m in _NUMBER.finditer(text):
            numbers.append(m.group())
            after = self._after.match(text, m.end())
            if after:
                units[after.start(1)] = after.group(1)
            before = self._before.search(text, max(0, m.start() - 5), m.start())
            if before:
                units[before.start(1)] = before.group(1)
        for m in self._symbols.finditer(text):
            units[m.start()] = m.group()
        return tuple(numbers), tuple(units[k] for k in sorted(units))

    def blocked_by(self, text_a: str, text_b: str) -> str | None:
        """"numbers", "units" or None (the pair may merge)."""
        na, ua = self.sequences(text_a)
        nb, ub = self.sequences(text_b)
        if na != nb:
            return "numbers"
        if ua != ub:
            return "units"
        return None


@lru_cache(maxsize=256)
def _guard(extra: frozenset[str]) -> Guard:
    return Guard(extra)


def guard_for(config: NearDedupConfig, domains: frozenset[str]) -> Guard:
    """The guard for a pair whose samples carry these domains: built-in units plus every
    configured extra that is global or names one of the domains."""
    extra: set[str] = set()
    for rule in config.extra_units:
        if not rule.domains or domains.intersection(rule.domains):
            extra.update(t.casefold() for t in rule.tokens)
    return _guard(frozenset(extra))
