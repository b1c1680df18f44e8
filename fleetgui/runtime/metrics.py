"""Metrics as events: the dashboard, the CLI and benchmarks subscribe to one bus."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetgui.runtime.generation import FinishReason

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StageTiming:
    stream_id: int
    stage: int
    compute_ms: float
    positions: int


@dataclass(frozen=True, slots=True)
class TokensEmitted:
    stream_id: int
    count: int
    step_ms: float  # wall time of the step that produced them (per-token latency = / count)


@dataclass(frozen=True, slots=True)
class SpeculationRound:
    stream_id: int
    k: int
    accepted: int
    draft_ms: float
    verify_ms: float


@dataclass(frozen=True, slots=True)
class TransferTiming:
    stream_id: int
    hop: int
    ms: float
    bytes_sent: int = 0  # what the pass carried into the ring (hidden states or token ids)


@dataclass(frozen=True, slots=True)
class RequestFinished:
    stream_id: int
    prompt_tokens: int
    new_tokens: int
    ttft_ms: float
    tokens_per_s: float
    acceptance_rate: float | None
    finish_reason: FinishReason


@dataclass(frozen=True, slots=True)
class PassBatched:
    """One pass of the pass scheduler: how many streams it carried, its tokens and how many
    of them were prompt tokens."""

    streams: int
    tokens: int
    prefill_tokens: int


@dataclass(frozen=True, slots=True)
class AggregateThroughput:
    tokens_per_s: float
    active_streams: int


MetricEvent = (
    StageTiming
    | TokensEmitted
    | SpeculationRound
    | TransferTiming
    | RequestFinished
    | AggregateThroughput
    | PassBatched
)
Subscriber = Callable[[MetricEvent], None]


class MetricsBus:
    """Delivers every event to every subscriber; a failing subscriber is logged, not fatal."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add ``subscriber``; returns a function that removes it."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def emit(self, event: MetricEvent) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("metrics subscriber %r failed on %r", subscriber, event)
