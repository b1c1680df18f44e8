"""What a pass costs each stage against the tokens in it, as measured, and the prompt tokens a
pass may add beside running streams without slowing them past a set factor.

Each stage's time per pass is close to a line in the tokens the pass carries: a fixed part
(reading the stage's weights) and a part per token. The lines are fitted to the passes the
scheduler ran (:class:`PassCosts`), beside what a pass's round trip takes on top of its stages
(hand-offs, hops, the head). A running user's time between tokens is about one round trip, so
a prompt chunk of ``p`` tokens joins a pass of ``d`` decode tokens with ``p * sum(per-token
ms) <= (factor - 1) * round trip(d)``: that user's tokens come at most ``factor`` times slower
while another's prompt is prefilled.

A prompt token costs more the deeper the prompt already is (its attention reads all of it), and
the lines are fitted mostly to decode passes, so once passes that carried prompt tokens come
back the room follows what they measured instead: the round trip they added over recent
decode-only passes, per prompt token, at the depth the prompt has now.
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
        self._fitted: dict[int, StageLine] | None = None  # the lines of these samples, once fitted
        self._overhead: collections.deque[float] = collections.deque(maxlen=_WINDOW)
        self._per_prompt_token_ms: float | None = None  # measured in passes beside them
        self._decode_round_trip: dict[int, float] = {}  # recent passes of d decode tokens

    def record(
        self,
        tokens: int,
        stage_ms: dict[int, float],
        round_trip_ms: float,
        prefill_tokens: int = 0,
    ) -> None:
        """A pass of ``tokens`` tokens (``prefill_tokens`` of them a prompt's) took
        ``stage_ms[stage]`` on each stage and ``round_trip_ms`` from sent to back."""
        if prefill_tokens == 0:
            self.record_decode(tokens, round_trip_ms)
        if 0 < prefill_tokens < tokens:  # beside decode steps: what the prompt tokens added
            expected = self.round_trip_ms(tokens - prefill_tokens)
            if expected is not None:
                added = max(round_trip_ms - expected, 0.0) / prefill_tokens
                self._per_prompt_token_ms = _smoothed(self._per_prompt_token_ms, added)
        self._overhead.append(max(0.0, round_trip_ms - sum(stage_ms.values())))
        for stage, ms in stage_ms.items():
            if math.isfinite(ms) and ms >= 0:
                self._fitted = None
                self._samples.setdefault(stage, collections.deque(maxlen=_WINDOW)).append(
                    (tokens, ms)
                )

    def record_decode(self, decode_tokens: int, round_trip_ms: float) -> None:
        """A pass (or a lone stream's step) of ``decode_tokens`` decode tokens came back after
        ``round_trip_ms``: what a running user waits for each token without prompts beside."""
        old = self._decode_round_trip.get(decode_tokens)
        self._decode_round_trip[decode_tokens] = _smoothed(old, round_trip_ms)

    def round_trip_ms(self, decode_tokens: int) -> float | None:
        """The round trip of a pass of ``decode_tokens`` decode tokens: as such passes took
        lately, else as the lines predict (None: unknown)."""
        measured = self._decode_round_trip.get(decode_tokens)
        if measured is not None:
            return measured
        lines = self.lines()
        if not lines:
            return None
        overhead = float(np.median(self._overhead)) if self._overhead else 0.0
        return sum(line.ms(decode_tokens) for line in lines.values()) + overhead

    def lines(self) -> dict[int, StageLine]:
        """Each stage's fitted line, once its passes had two sizes at least."""
        if self._fitted is not None:
            return self._fitted
        fitted = {}
        for stage, samples in self._samples.items():
            tokens = np.array([t for t, _ in samples], dtype=np.float64)
            ms = np.array([m for _, m in samples], dtype=np.float64)
            if len(set(tokens.tolist())) < 2:
                continue
            slope, intercept = np.polyfit(tokens, ms, 1)
            fitted[stage] = StageLine(max(float(intercept), 0.0), max(float(slope), 1e-6))
        self._fitted = fitted
        return fitted

    def prefill_room(self, decode_tokens: int) -> int:
        """Prompt tokens a pass of ``decode_tokens`` decode tokens may add (see module doc)."""
        round_trip = self.round_trip_ms(decode_tokens)
        if round_trip is None:
            return DEFAULT_PREFILL_ROOM
        per_token = self._per_prompt_token_ms
        if per_token is None:
            per_token = sum(line.per_token_ms for line in self.lines().values())
        room = (self.slowdown - 1.0) * round_trip / max(per_token, 1e-3)
        return int(min(max(room + 1e-6, MIN_PREFILL_ROOM), MAX_PREFILL_ROOM))  # fit rounding


def steady_room(room: int, last: int | None) -> int:
    """``room`` rounded down to a power of two, or ``last`` (the size the previous pass gave a
    prompt) while ``room`` is not well above it. A pass of a new number of tokens costs every
    stage more than one of the previous pass's (the plugin prepares each node again for the new
    shapes; docs/performance.md), so an estimate that wavers must not change the size; a lower
    estimate is followed at once."""
    steady = 1 << (max(room, 1).bit_length() - 1)
    if last is not None and last < steady and 2 * room < 5 * last:
        return last
    return steady


def _smoothed(old: float | None, new: float, weight: float = 0.3) -> float:
    return new if old is None else old + weight * (new - old)
