"""One timed run of a configuration on a pipeline: its rate, TTFT, acceptance and breakdown.

A run starts its streams together and times them by the pipeline's metric events, as tokens
are emitted. Its rate is the decode throughput: the tokens after each stream's first, over the
span from the first first token to the last token (for one stream, its decode rate; prefill is
TTFT's, apart). The results' own ``tokens_per_s`` is not used: it also counts the time a
finished stream takes to free its state on every worker, a round trip per worker that the
delay lengthens and that no token waits for. The
breakdown splits a lone stream's decode time per token into the stages' compute (as the stages
timed it), the transfer (each request's time in the ring less the workers' compute: the
network, the messages and the workers' own Python), the drafts, and the rest: the coordinator's
Python (its loop, the heads' work, waiting on the event loop).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.metrics import (
    AggregateThroughput,
    MetricEvent,
    PassBatched,
    SpeculationRound,
    StageTiming,
    TokensEmitted,
    TransferTiming,
)
from fleetgui.runtime.pipeline import Pipeline


@dataclass(frozen=True)
class Breakdown:
    """Milliseconds per decoded token, by where they went (see module doc)."""

    stage_compute_ms: float
    transfer_ms: float
    draft_ms: float
    coordinator_ms: float

    @property
    def total_ms(self) -> float:
        return self.stage_compute_ms + self.transfer_ms + self.draft_ms + self.coordinator_ms


@dataclass(frozen=True)
class RunFigures:
    """What one run measured."""

    tokens_per_s: float  # decode throughput, all streams together
    new_tokens: int  # tokens generated, all streams
    ttft_ms: float  # mean over the streams
    prompt_tokens: int  # mean over the streams
    wall_s: float
    acceptance: float | None = None  # accepted / drafted, all streams
    mean_k: float | None = None  # mean drafts per speculative round
    breakdown: Breakdown | None = None  # lone streams only


@dataclass
class _Decode:
    """Sums over one stream's decode (after its first token)."""

    started: bool = False
    first_at: float = 0.0  # when its first tokens were emitted (perf_counter)
    last_at: float = 0.0  # when its last ones were
    decoded: int = 0  # tokens emitted after the first step's
    stage_ms: float = 0.0
    transfer_ms: float = 0.0
    draft_ms: float = 0.0
    rounds: int = 0
    drafts: int = 0


@dataclass
class MetricsTap:
    """Sums the pipeline's metric events per stream, leaving out each stream's prefill (events
    before its first tokens were emitted)."""

    streams: dict[int, _Decode] = field(default_factory=dict)

    def __call__(self, event: MetricEvent) -> None:
        if isinstance(event, AggregateThroughput | PassBatched):
            return
        sums = self.streams.setdefault(event.stream_id, _Decode())
        if isinstance(event, TokensEmitted):
            now = time.perf_counter()
            if sums.started:
                sums.decoded += event.count
            else:
                sums.started, sums.first_at = True, now
            sums.last_at = now
        elif not sums.started:
            return
        elif isinstance(event, StageTiming):
            sums.stage_ms += event.compute_ms
        elif isinstance(event, TransferTiming):
            sums.transfer_ms += event.ms
        elif isinstance(event, SpeculationRound):
            sums.draft_ms += event.draft_ms
            sums.rounds += 1
            sums.drafts += event.k

    def throughput(self) -> float:
        """Decode tokens a second of all streams together (see module doc); 0 when none
        decoded past its first token."""
        decoding = [s for s in self.streams.values() if s.decoded > 0]
        if not decoding:
            return 0.0
        span = max(s.last_at for s in decoding) - min(s.first_at for s in decoding)
        return sum(s.decoded for s in decoding) / span if span > 0 else 0.0

    def breakdown(self, stream_id: int) -> Breakdown | None:
        """The per-token breakdown of one stream's decode."""
        sums = self.streams.get(stream_id)
        if sums is None or sums.decoded < 1 or sums.last_at <= sums.first_at:
            return None
        decoded = sums.decoded
        per_token = 1000.0 * (sums.last_at - sums.first_at) / decoded
        stage, transfer, draft = (
            sums.stage_ms / decoded,
            sums.transfer_ms / decoded,
            sums.draft_ms / decoded,
        )
        return Breakdown(stage, transfer, draft, max(0.0, per_token - stage - transfer - draft))

    def mean_k(self) -> float | None:
        rounds = sum(s.rounds for s in self.streams.values())
        return sum(s.drafts for s in self.streams.values()) / rounds if rounds else None


async def measure(
    pipeline: Pipeline, prompts: Sequence[str], config: GenerationConfig
) -> RunFigures:
    """Run one stream per prompt, all at once, and what they measured."""
    tap = MetricsTap()
    unsubscribe = pipeline.metrics.subscribe(tap)
    started = time.perf_counter()
    try:
        results = await asyncio.gather(*(pipeline.complete(p, config) for p in prompts))
    finally:
        unsubscribe()
    wall = time.perf_counter() - started
    drafted = sum(sum(r.ks) for r in results)
    accepted = [
        r.acceptance_rate * sum(r.ks) for r in results if r.acceptance_rate is not None and r.ks
    ]
    return RunFigures(
        tokens_per_s=tap.throughput(),
        new_tokens=sum(len(r.token_ids) for r in results),
        ttft_ms=statistics.mean(r.ttft_ms for r in results),
        prompt_tokens=round(statistics.mean(r.prompt_tokens for r in results)),
        wall_s=wall,
        acceptance=sum(accepted) / drafted if config.speculative and drafted else None,
        mean_k=tap.mean_k() if config.speculative else None,
        breakdown=tap.breakdown(results[0].stream_id) if len(results) == 1 else None,
    )
