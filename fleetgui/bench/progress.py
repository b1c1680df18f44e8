"""Progress on the terminal: which configuration runs, how many are left, the time so far."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

Write = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def clock(seconds: float) -> str:
    """``1:05:09`` or ``5:09``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """One line per step: ``[7/96] 50 ms a hop, repeat 1/3: PP+SD K=5 (n-gram)``, with the
    elapsed time and an estimate of what is left (from the steps so far), then its figure."""

    def __init__(self, total: int, write: Write = _stderr) -> None:
        self.total = total
        self.done = 0
        self.write = write
        self.started = time.monotonic()

    def step(self, what: str) -> None:
        elapsed = time.monotonic() - self.started
        left = ""
        if self.done:
            left = f", about {clock(elapsed / self.done * (self.total - self.done))} left"
        width = len(str(self.total))
        self.write(f"[{self.done + 1:>{width}}/{self.total}] {what}  ({clock(elapsed)}{left})")

    def finished(self, figure: str) -> None:
        self.done += 1
        self.write(f"{' ' * (2 * len(str(self.total)) + 3)}{figure}")

    def note(self, text: str) -> None:
        self.write(text)
