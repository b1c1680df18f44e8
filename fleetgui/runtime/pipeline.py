"""The coordinator's generation API: the ``Pipeline`` behind the CLI, the app and the API.

One ``Pipeline`` serves many concurrent streams (PP+SD+MB): each ``generate`` call is a stream
with its own KV state on every stage; streams interleave across the stages because each stage
runs one request at a time while the others work on other streams. A stream's loop is
:mod:`fleetgui.runtime.generation_loop`; this class admits streams and keeps what they share.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Callable

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.auto_k import AutoK, AutoKMemory
from fleetgui.runtime.generation import (
    FinishReason,
    GenerationResult,
    TokenDelta,
    check_request,
    final_result,
    grammar_of,
)
from fleetgui.runtime.generation_loop import StreamGeneration, stream_steps
from fleetgui.runtime.kv_budget import KvHeld
from fleetgui.runtime.metrics import AggregateThroughput, MetricsBus, TokensEmitted
from fleetgui.runtime.pass_scheduler import PassScheduler
from fleetgui.runtime.resident import ParkedStream, ResidentStreams
from fleetgui.runtime.route import Route
from fleetgui.runtime.sequence import CompactionPolicy, FedTokens
from fleetgui.runtime.speculative import Drafter
from fleetgui.runtime.stage import StageError
from fleetgui.runtime.stream_limit import StreamLimit
from fleetgui.runtime.stream_state import StreamState
from fleetgui.runtime.target_passes import TargetPasses
from fleetgui.runtime.tokenizer import IncrementalText, Tokenizer

# GenerationResult stays importable from here: the LLMPipeline's docs named it here first
__all__ = ["GenerationResult", "Pipeline"]

log = logging.getLogger(__name__)

AGGREGATE_WINDOW_S = 3.0  # aggregate tokens/s is measured over this sliding window
#: Ends after which no decode step ran ahead of what was read: the run itself stops at the end
#: of turn, the token limit and the context. A stop string (or a caller that stops reading)
#: ends the stream while a run may have computed a step or more further.
EXACT_ENDS = frozenset({FinishReason.EOS, FinishReason.MAX_TOKENS, FinishReason.CONTEXT})


class _SlidingRate:
    """Tokens per second over the last ``window_s`` seconds, all streams together."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._recent_total = 0  # tokens in _recent

    def add(self, count: int, now: float) -> float | None:
        """Count ``count`` tokens at ``now``; the rate, once the window holds two steps."""
        self._recent.append((now, count))
        self._recent_total += count
        while self._recent and now - self._recent[0][0] > self.window_s:
            self._recent_total -= self._recent.popleft()[1]
        span = max(now - self._recent[0][0], 1e-3)
        return self._recent_total / span if len(self._recent) > 1 else None


class Pipeline:
    """Generates text through a route of stages, optionally with a drafter (a local draft
    model or the draft-free n-gram one)."""

    def __init__(
        self,
        route: Route,
        tokenizer: Tokenizer,
        *,
        context_limit: int,
        draft: Drafter | None = None,
        prefill_chunk: int = 256,
        metrics: MetricsBus | None = None,
        compaction: CompactionPolicy | None = None,
        new_auto_k: Callable[[], AutoK] = AutoK,
        max_streams: int | None = None,
        resident: ResidentStreams | None = None,
        batching: bool = True,
    ) -> None:
        """``new_auto_k`` makes each stream's chooser of K (for ``k="auto"``); benchmarks pass
        differently set ones to compare them. ``max_streams``: generations at once, the
        others wait their turn (None: no limit; ``streams.set`` changes it). ``resident``:
        where finished streams stay for the next request that continues them (None: every
        stream is freed as it ends, and every prompt is prefilled whole). ``batching``: several
        streams in one pass a stage (:mod:`fleetgui.runtime.pass_scheduler`)."""
        self.route = route
        # streams' requests go down the route in batched passes, or each on its own
        self.metrics = metrics or MetricsBus()
        self.passes: Route = PassScheduler(route, metrics=self.metrics) if batching else route
        self.tokenizer = tokenizer
        self.context_limit = context_limit
        self.draft = draft
        self.prefill_chunk = prefill_chunk
        self.compaction = compaction or CompactionPolicy()
        self.new_auto_k = new_auto_k
        # the K chooser of the last K-auto stream to finish, per maker: the next one starts there
        self._k_memory = AutoKMemory()
        self._ids = itertools.count(1)
        self._rate = _SlidingRate(AGGREGATE_WINDOW_S)
        self._active = 0  # streams generating now
        self.streams = StreamLimit(max_streams)
        self.resident = resident
        self.forks = 0  # new streams started from a copy of an idle stream's prefix
        self._running: dict[int, StreamState] = {}  # the streams generating now

    def _count_tokens(self, stream_id: int, count: int, step_ms: float) -> None:
        """Emit the step's tokens and the aggregate rate over the last few seconds."""
        self.metrics.emit(TokensEmitted(stream_id, count, step_ms))
        rate = self._rate.add(count, time.perf_counter())
        if rate is not None:
            self.metrics.emit(AggregateThroughput(rate, self._active))

    # -- public API ---------------------------------------------------------------------------

    async def complete(self, prompt: str, config: GenerationConfig) -> GenerationResult:
        """Generate a whole answer to ``prompt``."""
        return await final_result(self.stream(prompt, config))

    async def stream(
        self, prompt: str, config: GenerationConfig
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        """Text deltas as tokens are accepted, then the ``GenerationResult``. The request is
        checked at once, then waits for a slot (``streams``); it continues the resident stream
        that shares the longest prefix with it, if any. Closing the generator early
        (``aclose``, or leaving an ``async with aclosing(...)``) stops the generation; its
        state stays resident (or is freed on every stage, without ``resident``)."""
        prompt_ids = await asyncio.to_thread(self._check, prompt, config)  # may run a model
        async with self.streams.slot():
            # the drafter as the stream starts: benchmarks swap it between generations
            drafter = self.draft if config.speculative else None
            stream = await self._stream_for(prompt_ids, config, drafter)
            generation = self._generation(stream, drafter)
            self._active += 1
            self._running[stream.id] = stream
            ended: bool | None = None  # at a token boundary: True if no step ran ahead
            try:
                async with contextlib.aclosing(generation.deltas()) as deltas:
                    async for delta in deltas:
                        yield delta
                ended = generation.finish in EXACT_ENDS
            except GeneratorExit:  # the caller stopped reading, at a token boundary
                ended = False
                raise
            finally:
                self._active -= 1
                self._running.pop(stream.id, None)
                if (stream.ks or stream.plain_steps) and config.auto_k:
                    self._k_memory.remember(self.new_auto_k, stream.auto_k)
                await self._retire(stream, drafter, ended)
        yield generation.result(prompt, self.metrics)

    def with_streams(self, streams: StreamLimit) -> Pipeline:
        """This pipeline's stages, drafter, tokenizer, metrics and stream ids behind another
        stream limit: streams started through the twin neither wait for this one's slots nor
        take them, and setting its ``draft`` or ``new_auto_k`` leaves this one's as they are.
        The app's benchmark measures through an unlimited twin while the replies wait, held,
        on the deployed pipeline's limit. Close this one, not the twin."""
        twin = copy.copy(self)
        twin.streams = streams
        twin._active = 0
        twin._running = {}
        twin.resident = None  # measured cold, and never taking a conversation's stream
        return twin

    async def close(self) -> None:
        await self.passes.close()  # the route too (the scheduler's, or the route itself)
        if self.draft is not None:
            await self.draft.close()

    # -- resident streams ---------------------------------------------------------------------

    def kv_held(self) -> KvHeld:
        """The KV entries the streams hold on every stage now, and the idle ones' budget."""
        resident = self.resident
        idle = resident.idle_entries if resident is not None else 0
        running = sum(stream.target.entries for stream in list(self._running.values()))
        budget = resident.budget_entries if resident is not None else None
        return KvHeld(idle + running, idle, budget)

    async def _stream_for(
        self, prompt_ids: list[int], config: GenerationConfig, drafter: Drafter | None
    ) -> StreamState:
        """The resident stream the prompt continues, set to rewind to their shared prefix
        (and to drop what a run computed ahead); else a new stream, started from a copy of the
        longest prefix an idle stream shares with the prompt, if one does."""
        taken = self.resident.take(prompt_ids) if self.resident is not None else None
        stream = StreamState(
            taken[0].stream_id if taken else next(self._ids),
            prompt_ids,
            config,
            config.make_rng(),
            auto_k=self._k_memory.new_chooser(self.new_auto_k),
        )
        stream.committed = list(prompt_ids)
        grammar = grammar_of(config)
        if grammar is not None:
            stream.constraint = self.tokenizer.grammar.constraint(grammar)
        if taken is not None:
            parked, shared = taken
            if parked.drafter is not None and parked.drafter is not drafter:
                await parked.drafter.release(parked.stream_id)  # stale there from now on
            parked.target.resumed()
            stream.target = parked.target
            stream.keep = len(parked.target.fed)
            stream.compact_first = not parked.exact  # nothing ran ahead: nothing to drop
            stream.cached = min(shared, len(prompt_ids) - 1)  # the last is fed again
        elif self.resident is not None:
            await self._fork_for(stream)
        return stream

    async def _fork_for(self, stream: StreamState) -> None:
        """Start ``stream`` from a copy of the longest prefix an idle stream shares with its
        prompt (that stream stays idle, its cache whole); as a new stream if none does or the
        copy fails."""
        assert self.resident is not None
        lent = self.resident.lend(stream.prompt_ids)
        if lent is None:
            return
        parked, shared = lent
        try:
            await self.route.fork(parked.stream_id, stream.id, shared)
        except StageError as exc:
            log.info("stream %d: prefilling whole, the copy failed: %s", stream.id, exc)
            return
        finally:
            for old in self.resident.park(parked):  # idle again; the budget counts the copy
                await self._free(old)
        stream.target = FedTokens(fed=list(stream.prompt_ids[:shared]), entries=shared)
        stream.keep = shared
        stream.compact_first = False
        stream.cached = min(shared, len(stream.prompt_ids) - 1)  # the last is fed again
        self.forks += 1

    async def _retire(
        self, stream: StreamState, drafter: Drafter | None, ended: bool | None
    ) -> None:
        """Keep a stream that ended at a token boundary resident (``ended``: no decode step ran
        ahead of what was read); free it, and whatever the budget evicts, on every stage."""
        to_free = [stream.id] if ended is None or self.resident is None else []
        if not to_free and self.resident is not None:
            parked = ParkedStream(
                stream.id,
                stream.target,
                drafter,
                exact=bool(ended),
                prompt_tokens=len(stream.prompt_ids),
            )
            for old in self.resident.park(parked):
                await self._free(old)
        elif drafter is not None:
            await drafter.release(stream.id)
        for stream_id in to_free:
            await self.route.release(stream_id)

    async def _free(self, parked: ParkedStream) -> None:
        """Free an idle stream the budget evicted, on every stage and in its drafter."""
        if parked.drafter is not None:
            await parked.drafter.release(parked.stream_id)
        await self.route.release(parked.stream_id)

    async def set_resident(self, resident: ResidentStreams | None) -> None:
        """Keep finished streams in ``resident`` from now on (None: free each as it ends); the
        streams idle in the old one are freed."""
        old, self.resident = self.resident, resident
        if old is not None and old is not resident:
            for parked in old.drain():
                await self._free(parked)

    # -- admission and the per-stream loop ----------------------------------------------------

    def _check(self, prompt: str, config: GenerationConfig) -> list[int]:
        return check_request(
            prompt,
            config,
            self.tokenizer,
            context_limit=self.context_limit,
            has_drafter=self.draft is not None,
        )

    def _generation(self, stream: StreamState, drafter: Drafter | None) -> StreamGeneration:
        """The loop of an admitted stream through this pipeline's route (and ``drafter``)."""
        target = TargetPasses(
            self.passes,
            self.metrics,
            context_limit=self.context_limit,
            prefill_chunk=self.prefill_chunk,
            compaction=self.compaction,
            stop_ids=frozenset(self.tokenizer.eos_token_ids),
            streams=lambda: self._active,
        )
        return StreamGeneration(
            stream,
            stream_steps(stream, target, drafter, lambda: self._active),
            IncrementalText(self.tokenizer, stream.config.stop),
            context_limit=self.context_limit,
            eos_ids=self.tokenizer.eos_token_ids,
            count_tokens=self._count_tokens,
        )
