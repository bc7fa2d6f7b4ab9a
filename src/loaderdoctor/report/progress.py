"""Progress of a long command (scan, tune) where no progress bar can be drawn.

A log (``| tee``, nohup, a Slurm job's output) gets one line at a steady interval instead of
rich's bar, which redraws one line of a terminal in place: done of total, the rate, and the
time left. The commands hand their progress to a callback; this is one, the bar the other.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import IO

INTERVAL_ENV = "LOADERDOCTOR_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 10.0


def interval_s() -> float:
    """Seconds between lines: ``LOADERDOCTOR_PROGRESS_INTERVAL`` (for a busier log), else 10."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value >= 0 else DEFAULT_INTERVAL_S


def format_duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 05 s"``, ``"2 h 07 min"``: an ETA, to the precision that matters."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


class ProgressLines:
    """``scanning: 1200/5000 samples (24%), 310/s, about 12 s left``, once per interval.

    ``update(done, total)`` is the scan's callback, ``update(done, total, label)`` the tune's
    (``label``: what runs now). The rate counts from the first update, so a resumed scan's
    samples done before it do not inflate it.
    """

    def __init__(
        self,
        doing: str,
        unit: str,
        stream: IO[str],
        *,
        every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.doing = doing
        self.unit = unit
        self.stream = stream
        self.every_s = interval_s() if every_s is None else every_s
        self.clock = clock
        self.started: tuple[float, int] | None = None
        self.last_line_at = 0.0
        self.last_done = 0

    def update(self, done: int, total: int | None, label: str | None = None) -> None:
        now = self.clock()
        if self.started is None or done < self.last_done:  # the first, or a new phase (soak)
            self.started = (now, done)
            self.last_done = done
            self.last_line_at = now
            return
        self.last_done = done
        if now - self.last_line_at < self.every_s:
            return
        self.last_line_at = now
        self.stream.write(self.format(done, total, label, now) + "\n")
        self.stream.flush()

    def format(self, done: int, total: int | None, label: str | None, now: float) -> str:
        assert self.started is not None
        since, done_then = self.started
        elapsed = now - since
        text = f"{self.doing}: {done}"
        if total:
            text += f"/{total} {self.unit} ({100 * done // total}%)"
        else:
            text += f" {self.unit}"
        if label:
            text += f", now {label}"
        rate = (done - done_then) / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            text += f", {rate:.1f}/s" if rate < 10 else f", {rate:.0f}/s"
            if total and total > done:
                text += f", about {format_duration((total - done) / rate)} left"
        return text + f", {format_duration(elapsed)} so far"
