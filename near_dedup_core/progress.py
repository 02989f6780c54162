"""Progress on stderr for long work: a bar on a terminal, throttled lines in a log.

Nothing is shown until the work has run ``delay`` seconds (one second by default): a quick
command, or one that stops on bad input, prints its result or its one-line error alone. After
that each counted step of the work shows on a terminal as a bar (tqdm) and, when stderr is a
file or a pipe, as a line at most every ``interval`` seconds (one by default).
``NEAR_DEDUP_PROGRESS_INTERVAL=SECONDS`` sets both (``0``: every step).
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from near_dedup_core.errors import NearDedupError

PAUSE_ENV = "NEAR_DEDUP_PAUSE"
#: Seconds between two progress lines, and before the first one.
INTERVAL_ENV = "NEAR_DEDUP_PROGRESS_INTERVAL"

_command_start: float | None = None
#: The bars drawn on a terminal and not closed yet (`close_bars`).
_open_bars: list[Any] = []


@contextmanager
def command_clock(progress: bool = True) -> Iterator[None]:
    """A command runs in the block: its steps (`Progress.step`) show once the command as a
    whole, not the step, has lasted the delay. With ``progress``, a bad `INTERVAL_ENV` is
    refused here, before the command does anything."""
    global _command_start
    if progress:
        _timing(1.0, 1.0)
    _command_start = time.monotonic()
    try:
        yield
    finally:
        _command_start = None


def _timing(interval: float, delay: float) -> tuple[float, float]:
    value = os.environ.get(INTERVAL_ENV, "").strip()
    if not value:
        return interval, delay
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise NearDedupError(f"{INTERVAL_ENV}={value!r} is not a number of seconds (e.g. 1 or "
                             f"0.5)")
    return seconds, seconds


class Progress:
    """Counts work done and reports it on stderr at most every ``interval`` seconds, once the
    work has lasted ``delay`` seconds; the final count is shown only if a line was.
    `step` names what the work is doing now (a command's stages, counted as steps).

    Silent when ``enabled`` is False (library use, tests) so that only the CLI talks.
    """

    def __init__(self, label: str, total: int | None = None, *, enabled: bool = True,
                 interval: float = 1.0, delay: float = 1.0, stream=None) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.interval, self.delay = _timing(interval, delay) if enabled else (interval, delay)
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.doing = ""
        self._start = self._since = time.monotonic()
        self._last = -float("inf")
        self._shown = -1
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar: Any = None

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.enabled:
            now = time.monotonic()
            if now - self._since >= self.delay and now - self._last >= self.interval:
                self._last = now
                self._emit(final=False)

    def step(self, doing: str) -> None:
        """One more step done; the work now does ``doing`` (shown after the count). Steps
        show once the command as a whole has lasted the delay (`command_clock`): a command of
        many short steps shows them; each one shows, not one an interval, as a command has
        few of them and a step shown late would leave the one before it on the screen."""
        if _command_start is not None:
            self._since = min(self._since, _command_start)
        self.doing = doing
        self._last = -float("inf")  # a command's few steps each show (once past the delay)
        self.advance()

    def note(self, text: str) -> None:
        """The line ``text`` now, for a long step that has no count of its own."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.clear()
            self.stream.write(text + "\n")
            self._bar.refresh()
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if not (self.enabled and self.done):
            return
        if self._shown < 0 and time.monotonic() - self._since < self.delay:
            return  # quick work: no progress at all
        if self._shown < 0 and self._tty:
            return  # the bar was never drawn: nothing to complete
        self.doing = "done" if self.doing else ""
        if self._tty or self._shown != self.done:
            self._emit(final=True)

    def _emit(self, final: bool) -> None:
        self._shown = self.done
        if self._tty:
            self._draw(final)
            return
        elapsed = time.monotonic() - self._start
        if self.total:
            text = f"{self.label}: {self.done:,}/{self.total:,} ({100 * self.done / self.total:.0f}%)"
        else:
            text = f"{self.label}: {self.done:,}"
        if self.doing:
            text += f" {self.doing}"
        else:
            text += f", {self.done / elapsed if elapsed > 0 else 0.0:,.0f}/s"
        text += f", {elapsed:.1f}s"
        self.stream.write(text + "\n")
        self.stream.flush()

    def _draw(self, final: bool) -> None:
        """The terminal's bar: drawn at the first emit, updated, closed at the end."""
        if self._bar is None:
            # the terminal's width, followed as it changes; a terminal that reports none
            # (a pseudo-terminal without a size, where tqdm would draw nothing) gets 80 × 24
            sized = _columns(self.stream) > 0
            self._bar = _bar_class()(total=self.total or None, initial=self.done,
                                     desc=self.label, file=self.stream, mininterval=0,
                                     leave=True, dynamic_ncols=sized,
                                     ncols=None if sized else 80,
                                     nrows=None if sized else 24, unit="",
                                     postfix=self.doing or None)
            _open_bars.append(self._bar)
        else:
            self._bar.set_postfix_str(self.doing, refresh=False)
            self._bar.update(self.done - self._bar.n)
        if final:
            self._bar.close()
            _open_bars.remove(self._bar)
            self._bar = None


def _columns(stream: Any) -> int:
    """The width the terminal of ``stream`` reports (0: none, or not a terminal's file)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0


def close_bars() -> None:
    """End the line of every bar still drawn (a command stopped on an error or a signal), so
    that its one line starts a line of its own."""
    while _open_bars:
        _open_bars.pop().close()


@lru_cache(maxsize=1)
def _bar_class() -> Any:
    """tqdm without its monitor thread (nothing of this process runs on its own thread)."""
    from tqdm import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar


def pause_point(stage: str) -> None:
    """Test hook for reliability tests: with ``NEAR_DEDUP_PAUSE=<stage>:<flag path>`` in the
    environment, the first time the run reaches ``stage`` it creates the flag file, says so on
    stderr and waits until the file has been removed, so that a test can act (append a batch,
    send a signal) at a known point of a running command. Unset, it costs one lookup."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec or not spec.startswith(stage + ":"):
        return
    del os.environ[PAUSE_ENV]
    flag = spec[len(stage) + 1:]
    with open(flag, "x"):
        pass
    print(f"paused at {stage}", file=sys.stderr, flush=True)
    while os.path.exists(flag):
        time.sleep(0.05)
