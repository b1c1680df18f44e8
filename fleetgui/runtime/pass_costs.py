"""What a pass costs each stage against the tokens in it, as measured, and the prompt tokens a
pass may add beside running streams without slowing them past a set factor.

Each stage's time per pass is close to a line in the tokens the pass carries: a fixed part
(reading the stage's weights) and a part per token. The lines are fitted to the passes the
scheduler ran (:class:`PassCosts`), beside what a pass's round trip takes on top of its stages
(hand-offs, hops, the head). A running user's time between tokens is about one round trip, so
a prompt chunk of ``p`` tokens joins a pass of ``d`` decode tokens with ``p * sum(per-token
ms) <= (factor - 1) * round trip(d)``: that user's tokens come at most ``factor`` times slower
while another's prompt is prefilled.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import numpy as np

#: Prompt tokens a pass carries beside running streams before any pass was measured.
DEFAULT_PREFILL_ROOM = 16
#: A prompt chunk beside running streams: at least this many tokens (it must progress) ...
MIN_PREFILL_ROOM = 4
#: ... and at most this many (the fit is taken from passes of that size or smaller).
MAX_PREFILL_ROOM = 256
#: How much slower a pass may get by the prompt tokens it carries beside decode steps.
SLOWDOWN = 1.8
_WINDOW = 128  # passes the fit remembers


@dataclass(frozen=True, slots=True)
class StageLine:
    """``fixed_ms + per_token_ms * tokens``: one stage's time per pass."""

    fixed_ms: float
    per_token_ms: float

    def ms(self, tokens: int) -> float:
        return self.fixed_ms + self.per_token_ms * tokens


class PassCosts:
    """Measured stage times of recent passes and the line each stage's fit gives."""

    def __init__(self, slowdown: float = SLOWDOWN) -> None:
        self.slowdown = slowdown
        self._samples: dict[int, collections.deque[tuple[int, float]]] = {}
        self._overhead: collections.deque[float] = collections.deque(maxlen=_WINDOW)

    def record(self, tokens: int, stage_ms: dict[int, float], round_trip_ms: float) -> None:
        """A pass of ``tokens`` tokens took ``stage_ms[stage]`` on each stage and
        ``round_trip_ms`` from sent to back."""
        self._overhead.append(max(0.0, round_trip_ms - sum(stage_ms.values())))
        for stage, ms in stage_ms.items():
            if math.isfinite(ms) and ms >= 0:
                self._samples.setdefault(stage, collections.deque(maxlen=_WINDOW)).append(
                    (tokens, ms)
                )

    def lines(self) -> dict[int, StageLine]:
        """Each stage's fitted line, once its passes had two sizes at least."""
        fitted = {}
        for stage, samples in self._samples.items():
            tokens = np.array([t for t, _ in samples], dtype=np.float64)
            ms = np.array([m for _, m in samples], dtype=np.float64)
            if len(set(tokens.tolist())) < 2:
                continue
            slope, intercept = np.polyfit(tokens, ms, 1)
            fitted[stage] = StageLine(max(float(intercept), 0.0), max(float(slope), 1e-6))
        return fitted

    def prefill_room(self, decode_tokens: int) -> int:
        """Prompt tokens a pass of ``decode_tokens`` decode tokens may add (see module doc)."""
        lines = self.lines()
        if not lines:
            return DEFAULT_PREFILL_ROOM
        overhead = float(np.median(self._overhead)) if self._overhead else 0.0
        round_trip = sum(line.ms(decode_tokens) for line in lines.values()) + overhead
        per_token = sum(line.per_token_ms for line in lines.values())
        room = (self.slowdown - 1.0) * round_trip / per_token
        return int(min(max(room + 1e-6, MIN_PREFILL_ROOM), MAX_PREFILL_ROOM))  # fit rounding
