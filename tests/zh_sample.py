"""Real Chinese text shipped with the tests: paragraphs of the Chinese man pages of
manpages-zh (GFDL-1.2+; which pages, in `tests/data/zh/README.md`). The tests read it from
the repository, never from ``/usr/share/man``, so that they run the same on a machine without
the package."""

from __future__ import annotations

from pathlib import Path

ZH_SAMPLE = Path(__file__).resolve().parent / "data" / "zh" / "manpages-zh.txt"


def zh_sample_text() -> str:
    """The sample's paragraphs (troff stripped, line breaks kept), separated by blank lines."""
    return ZH_SAMPLE.read_text(encoding="utf-8")
