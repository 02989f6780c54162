"""Progress lines: nothing for work under a second, throttled lines after that."""

from __future__ import annotations

import io

import pytest

from near_dedup_core import progress as progress_module
from near_dedup_core.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", fake)
    return fake


def test_quick_work_prints_nothing(clock):
    out = io.StringIO()
    bar = Progress("index: records", 30, stream=out)
    for _ in range(30):
        clock.now += 0.03  # 0.9 s in total
        bar.advance()
    bar.finish()
    assert out.getvalue() == ""


def test_work_over_a_second_prints_throttled_lines_and_the_final_count(clock):
    out = io.StringIO()
    bar = Progress("scan: verify pairs", 40, stream=out)
    for _ in range(40):
        clock.now += 0.125  # 5 s in total
        bar.advance()
    bar.finish()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("scan: verify pairs: 8/40 (20%)")
    assert lines[-1].startswith("scan: verify pairs: 40/40 (100%)")
    assert 4 <= len(lines) <= 6  # about one a second, not one per item


def test_a_long_first_step_shows_its_count_at_the_end(clock):
    out = io.StringIO()
    bar = Progress("mixture: writing records", 2, stream=out)
    bar.advance()
    clock.now += 1.5
    bar.advance()
    bar.finish()
    assert out.getvalue().splitlines() == [
        "mixture: writing records: 2/2 (100%), 1/s, 1.5s"]


def test_disabled_is_silent(clock):
    out = io.StringIO()
    bar = Progress("x", 1, enabled=False, stream=out)
    clock.now += 5
    bar.advance()
    bar.finish()
    assert out.getvalue() == ""


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_note_is_its_own_line_after_a_carriage_return_count_and_silent_when_disabled(clock):
    out = Tty()
    bar = Progress("index: records", 10, stream=out)
    clock.now += 2
    bar.advance(5)
    bar.note("index: folding")
    assert out.getvalue() == "\rindex: records: 5/10 (50%), 2/s, 2.0s\nindex: folding\n"
    quiet = io.StringIO()
    Progress("index: records", 10, stream=quiet, enabled=False).note("index: folding")
    assert quiet.getvalue() == ""
