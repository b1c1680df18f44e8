"""Rates the dashboard plots (tokens/s), measured over wall time, never over one step.

A step's own duration is no measure of a rate: a route that chains decode steps by itself
(``LocalRoute.decode``) queues finished steps while the event loop is busy (the GUI painting,
another stream), and the loop then takes several in a row, each a few microseconds after the
last. One token over such an interval read as 15,000 tokens/s on a stream making 200.

:class:`RateMeter` counts events over a trailing window instead: the count since an anchor
sample, over the wall time since it. The anchor's own count is left out (the time it took is
not in the span; a stream's first token also carries the prompt's time), and no rate is given
until the span is long enough for a burst not to dominate it. The anchor of a stream is its
first token, which comes before any decode step starts (the pipeline asks for steps once it has
handed the first token on), so it is never part of a burst; a stream that ends sooner than that
span is measured over all it had (:meth:`RateMeter.rate_so_far`).
"""

from __future__ import annotations

import collections
import logging
import math

log = logging.getLogger(__name__)

RATE_WINDOW_S = 2.0  # a rate covers at least this much wall time once there is that much
MIN_SPAN_S = 0.25  # no rate over less wall time than this (a burst would read as a huge rate)


class RateMeter:
    """Events per second over a trailing window of wall time (see module doc)."""

    def __init__(
        self,
        window_s: float = RATE_WINDOW_S,
        min_span_s: float = MIN_SPAN_S,
        idle_s: float = math.inf,
    ) -> None:
        """``idle_s``: a gap this long starts the measurement again (what came before the
        gap is not part of the rate after it)."""
        self.window_s = window_s
        self.min_span_s = min_span_s
        self.idle_s = idle_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._total = 0  # counts of the samples after the anchor (the first one)

    def restart(self) -> None:
        """Forget every sample: the next one is the anchor of a new measurement."""
        self._samples.clear()
        self._total = 0

    def add(self, t: float, count: int) -> float | None:
        """Record ``count`` events at time ``t`` (seconds); the rate now, or None while the
        span measured is too short."""
        if self._samples and t - self._samples[-1][0] > self.idle_s:
            self.restart()
        self._samples.append((t, count))
        if len(self._samples) == 1:
            return None
        self._total += count
        # slide the anchor up while the next sample is at least a window before t
        while len(self._samples) > 2 and self._samples[1][0] <= t - self.window_s:
            self._samples.popleft()
            self._total -= self._samples[0][1]
        span = t - self._samples[0][0]
        return self._total / span if span >= self.min_span_s else None

    def __len__(self) -> int:
        """Samples of the current measurement (1 right after a (re)start)."""
        return len(self._samples)

    def rate_so_far(self) -> float | None:
        """The rate over the span measured, however short (for a burst that ended before it
        lasted ``min_span_s``: a reply of a few tokens); None before two samples."""
        if len(self._samples) < 2:
            return None
        span = self._samples[-1][0] - self._samples[0][0]
        return self._total / span if span > 0 else None
