"""Text normalization for comparison: Unicode NFKC, casefold, whitespace runs → one space, trim.

Pure-ASCII text takes a fast path with the same result: NFKC is the identity on ASCII and
casefold equals lower(). ``str.split()`` without arguments splits on every Unicode whitespace
run, which is exactly the collapse rule.
"""

from __future__ import annotations

import unicodedata


def normalize(text: str) -> str:
    """Return the comparison form of ``text``."""
    if text.isascii():
        return " ".join(text.lower().split())
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())
