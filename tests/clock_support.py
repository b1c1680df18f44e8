"""A clock the test moves by hand, for code that takes ``clock=`` (pairing codes, the worker
table, the dashboard's feed, the build's progress log)."""

from __future__ import annotations


class FakeClock:
    """Returns ``now`` when called; a test advances it (``clock.now += 1``)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
