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


def test_a_terminal_shows_a_bar_and_a_note_on_its_own_line_and_silent_when_disabled(clock):
    out = Tty()
    bar = Progress("index: records", 10, stream=out)
    clock.now += 2
    bar.advance(5)
    drawn = out.getvalue()
    assert drawn.startswith("\rindex: records:  50%|") and "| 5/10 [" in drawn
    assert "\n" not in drawn  # redrawn in place
    bar.note("index: folding")
    after = out.getvalue()[len(drawn):]
    assert after.startswith("\r") and "\rindex: folding\n" in after  # the bar cleared first
    clock.now += 2
    bar.advance(5)
    bar.finish()
    assert "100%|" in out.getvalue() and out.getvalue().endswith("\n")
    quiet = io.StringIO()
    Progress("index: records", 10, stream=quiet, enabled=False).note("index: folding")
    assert quiet.getvalue() == ""


def test_steps_count_the_command_from_its_start_and_counts_from_their_own(clock):
    """A command of many short stages shows them once the command has lasted the delay; a
    counted bar made late in the command still waits its own delay."""
    from near_dedup_core.progress import command_clock

    out = io.StringIO()
    with command_clock():
        clock.now += 0.8  # the command's own set-up
        stages = Progress("scan", 3, stream=out)
        bar = Progress("scan: verify pairs", 4, stream=out)
        clock.now += 0.3
        stages.step("verifying pairs")
        bar.advance()
    assert out.getvalue().splitlines() == ["scan: 1/3 (33%) verifying pairs, 0.3s"]


def test_every_step_shows_once_past_the_delay(clock):
    out = io.StringIO()
    stages = Progress("scan", 3, stream=out)
    clock.now += 2
    stages.step("deciding")
    clock.now += 0.1
    stages.step("writing the report")  # within the interval, shown all the same
    assert [line.split(",")[0] for line in out.getvalue().splitlines()] == [
        "scan: 1/3 (33%) deciding", "scan: 2/3 (67%) writing the report"]


def test_a_bar_left_open_by_an_error_ends_its_line_before_the_error(clock):
    from near_dedup_core.progress import close_bars

    out = Tty()
    bar = Progress("index: records", 10, stream=out)
    clock.now += 2
    bar.advance(4)
    assert not out.getvalue().endswith("\n")
    close_bars()
    assert out.getvalue().endswith("\n")
    close_bars()  # nothing left open


def test_a_terminal_without_a_size_still_shows_the_bar():
    """A pseudo-terminal that reports 0 × 0 (as a fresh one does): tqdm alone would draw
    nothing there."""
    import os
    import pty
    import subprocess
    import sys

    code = ("from near_dedup_core.progress import Progress\n"
            "bar = Progress('x: records', 3, delay=0, interval=0)\n"
            "for _ in range(3):\n    bar.advance()\nbar.finish()\n")
    master, slave = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-c", code], stderr=slave,
                              stdout=subprocess.DEVNULL, timeout=120, check=False)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the other side is closed and everything was read
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    shown = b"".join(chunks).decode()
    assert done.returncode == 0
    assert "x: records: 100%|" in shown and "3/3" in shown, repr(shown)
