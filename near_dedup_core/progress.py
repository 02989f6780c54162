"""Progress lines on stderr for long work: delayed, throttled, carriage-return on a terminal.

Nothing is shown for work that finishes within ``delay`` seconds (one second by default): a
quick command, or one that stops on bad input, prints its result or its one-line error alone.
"""

from __future__ import annotations

import os
import sys
import time

PAUSE_ENV = "NEAR_DEDUP_PAUSE"


class Progress:
    """Counts work done and reports it on stderr at most every ``interval`` seconds, once the
    work has lasted ``delay`` seconds; the final count is shown only if a line was.

    Silent when ``enabled`` is False (library use, tests) so that only the CLI talks.
    """

    def __init__(self, label: str, total: int | None = None, *, enabled: bool = True,
                 interval: float = 1.0, delay: float = 1.0, stream=None) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.interval = interval
        self.delay = delay
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self._start = time.monotonic()
        self._last = 0.0
        self._shown = -1
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.enabled:
            now = time.monotonic()
            if now - self._start >= self.delay and now - self._last >= self.interval:
                self._last = now
                self._emit(final=False)

    def note(self, text: str) -> None:
        """The line ``text`` now, for a long step that has no count of its own."""
        if not self.enabled:
            return
        self.stream.write(("\n" if self._tty and self._shown >= 0 else "") + text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if not (self.enabled and self.done):
            return
        if self._shown < 0 and time.monotonic() - self._start < self.delay:
            return  # quick work: no progress at all
        if self._tty or self._shown != self.done:
            self._emit(final=True)

    def _emit(self, final: bool) -> None:
        self._shown = self.done
        elapsed = time.monotonic() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total:
            text = f"{self.label}: {self.done:,}/{self.total:,} ({100 * self.done / self.total:.0f}%)"
        else:
            text = f"{self.label}: {self.done:,}"
        text += f", {rate:,.0f}/s, {elapsed:.1f}s"
        if self._tty and not final:
            self.stream.write("\r" + text)
        else:
            self.stream.write(("\r" if self._tty else "") + text + "\n")
        self.stream.flush()


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
