"""The coordinator's generation loop: the ``Pipeline`` API behind the CLI, the app and the API.

One ``Pipeline`` serves many concurrent streams (PP+SD+MB): each ``generate`` call is a stream
with its own KV state on every stage; streams interleave across the stages because each stage
runs one request at a time while the others work on other streams.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

import numpy as np

from fleetgui.errors import FleetguiError
from fleetgui.runtime.head import SamplingParams
from fleetgui.runtime.metrics import (
    AggregateThroughput,
    MetricsBus,
    RequestFinished,
    SpeculationRound,
    StageTiming,
    TokensEmitted,
)
from fleetgui.runtime.route import DecodeRun, Route
from fleetgui.runtime.sequence import CompactionPolicy, FedTokens
from fleetgui.runtime.speculative import AutoK, Drafter, check_k
from fleetgui.runtime.stage import (
    ForwardRequest,
    ForwardResult,
    GreedyHead,
    HeadOp,
    SampleHead,
    VerifyGreedyHead,
    VerifySampleHead,
)
from fleetgui.runtime.stream_limit import StreamLimit
from fleetgui.runtime.tokenizer import IncrementalText, Tokenizer
from fleetgui.runtime.verification import uniforms_for_round

log = logging.getLogger(__name__)

AGGREGATE_WINDOW_S = 3.0  # aggregate tokens/s is measured over this sliding window


class GenerationError(FleetguiError):
    """A request that cannot be served as asked (the message says how to fix it)."""


@dataclass(frozen=True)
class GenerationOptions:
    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_strings: tuple[str, ...] = ()
    speculative: bool = False  # PP+SD: needs the pipeline's draft model
    k: int | None = None  # draft tokens per round; None: auto


@dataclass(frozen=True)
class TokenDelta:
    """New text of one stream, as it is accepted."""

    stream_id: int
    text: str
    token_ids: tuple[int, ...]


@dataclass
class GenerationResult:
    stream_id: int
    prompt: str
    text: str
    token_ids: list[int]
    prompt_tokens: int
    ttft_ms: float
    tokens_per_s: float  # decode rate: tokens after the first / time after the first
    acceptance_rate: float | None
    finish_reason: str  # "eos", "stop", "max_tokens" or "context"
    ks: list[int] = field(default_factory=list)  # K of each speculative round
    plain_steps: int = 0  # speculative mode's plain steps (K auto off, or nothing proposed)


async def final_result(
    items: AsyncGenerator[TokenDelta | GenerationResult, None],
) -> GenerationResult:
    """The result that ends a generation's ``items`` (which are closed after)."""
    result: GenerationResult | None = None
    async with contextlib.aclosing(items) as opened:
        async for item in opened:
            if isinstance(item, GenerationResult):
                result = item
    if result is None:
        raise RuntimeError("generation ended without a result")
    return result


@dataclass
class _Stream:
    id: int
    prompt_ids: list[int]
    options: GenerationOptions
    rng: np.random.Generator
    target: FedTokens = field(default_factory=FedTokens)
    committed: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    ks: list[int] = field(default_factory=list)
    plain_steps: int = 0
    auto_k: AutoK = field(default_factory=AutoK)

    @property
    def generated(self) -> list[int]:
        return self.committed[len(self.prompt_ids) :]


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
    ) -> None:
        """``new_auto_k`` makes each stream's chooser of K (for ``k=None``); benchmarks pass
        differently set ones to compare them. ``max_streams``: generations at once, the
        others wait their turn (None: no limit; ``streams.set`` changes it)."""
        self.route = route
        self.tokenizer = tokenizer
        self.context_limit = context_limit
        self.draft = draft
        self.prefill_chunk = prefill_chunk
        self.metrics = metrics or MetricsBus()
        self.compaction = compaction or CompactionPolicy()
        self.new_auto_k = new_auto_k
        # the K chooser of the last K-auto stream to finish, per maker: the next one starts there
        self._k_memory: dict[Callable[[], AutoK], AutoK] = {}
        self._ids = itertools.count(1)
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._recent_total = 0  # tokens in _recent
        self._active = 0
        self.streams = StreamLimit(max_streams)

    def _count_tokens(self, stream_id: int, count: int, step_ms: float) -> None:
        """Emit the step's tokens and the aggregate rate over the last few seconds."""
        self.metrics.emit(TokensEmitted(stream_id, count, step_ms))
        now = time.perf_counter()
        self._recent.append((now, count))
        self._recent_total += count
        while self._recent and now - self._recent[0][0] > AGGREGATE_WINDOW_S:
            self._recent_total -= self._recent.popleft()[1]
        span = max(now - self._recent[0][0], 1e-3)
        if len(self._recent) > 1:
            self.metrics.emit(AggregateThroughput(self._recent_total / span, self._active))

    # -- public API ---------------------------------------------------------------------------

    async def complete(self, prompt: str, options: GenerationOptions) -> GenerationResult:
        """Generate a whole answer to ``prompt``."""
        return await final_result(self._generate(prompt, options))

    async def stream(
        self, prompt: str, options: GenerationOptions
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        """Text deltas as tokens are accepted, then the ``GenerationResult``. Closing the
        generator early (``aclose``, or leaving an ``async with aclosing(...)``) stops the
        generation and frees the stream's state on every stage at once."""
        async with contextlib.aclosing(self._generate(prompt, options)) as items:
            async for item in items:
                yield item

    async def close(self) -> None:
        await self.route.close()
        if self.draft is not None:
            await self.draft.close()

    # -- checks -------------------------------------------------------------------------------

    def _check(self, prompt: str, options: GenerationOptions) -> list[int]:
        if not prompt or not prompt.strip():
            raise GenerationError("the prompt is empty: give some text to continue")
        if options.max_new_tokens < 1:
            raise GenerationError("max new tokens must be at least 1")
        try:
            options.sampling.validate()
        except ValueError as exc:
            raise GenerationError(str(exc)) from exc
        if options.speculative:
            if self.draft is None:
                raise GenerationError(
                    "speculative decoding needs a draft model or the n-gram drafter: pass "
                    "--draft DRAFT_EXPORT_DIR or --draft ngram"
                )
            if options.k is not None:
                try:
                    check_k(options.k)
                except ValueError as exc:
                    raise GenerationError(str(exc)) from exc
        ids = self.tokenizer.encode(prompt)
        if len(ids) >= self.context_limit:
            raise GenerationError(
                f"the prompt has {len(ids)} tokens but the model's context holds "
                f"{self.context_limit}: shorten it to fewer than {self.context_limit} tokens"
            )
        return ids

    # -- the loop -----------------------------------------------------------------------------

    async def _target(self, stream: _Stream, drafts: list[int], head: HeadOp) -> ForwardResult:
        """Bring the target's cache to the committed tokens plus ``drafts``; run ``head``."""
        rewind, pending = stream.target.plan(stream.committed)
        feed = pending + drafts
        result = ForwardResult(stream.id)
        for start in range(0, len(feed), self.prefill_chunk):
            chunk = feed[start : start + self.prefill_chunk]
            last = start + self.prefill_chunk >= len(feed)
            stream.target.applied(rewind, [])
            compact = self.compaction.should_compact(stream.target, len(chunk), self.context_limit)
            result = await self.route.run(
                ForwardRequest(
                    stream.id,
                    np.array([chunk], dtype=np.int64),
                    rewind=rewind,
                    compact=compact,
                    head=head if last else None,
                )
            )
            if compact:
                stream.target.compacted()
            stream.target.applied(0, chunk)
            rewind = 0
            self._emit_stage_timings(stream.id, result, len(chunk))
        return result

    def _emit_stage_timings(self, stream_id: int, result: ForwardResult, positions: int) -> None:
        for stage, ms in sorted(result.compute_ms.items()):
            self.metrics.emit(StageTiming(stream_id, stage, ms, positions))

    def _plain_head(self, stream: _Stream) -> HeadOp:
        params = stream.options.sampling
        return GreedyHead() if params.greedy else SampleHead(params, float(stream.rng.random()))

    def _auto_k_for_new_stream(self) -> AutoK:
        """The last finished stream's K chooser carried over, or a new one."""
        previous = self._k_memory.get(self.new_auto_k)
        return previous.carried_over() if previous is not None else self.new_auto_k()

    def _room(self, stream: _Stream) -> int:
        """Positions left in the context for this stream."""
        return self.context_limit - len(stream.committed)

    async def _speculative_step(self, stream: _Stream) -> list[int]:
        if self.draft is None:
            raise GenerationError("speculative decoding needs a draft model")
        options = stream.options
        auto = stream.auto_k
        probe = options.k is None and auto.off  # a round now probes speculation again
        if options.k is not None:
            k = options.k
        else:  # OFF (0) while speculation does not pay: a plain step
            predictable = probe and self.draft.predictable(stream.id, stream.committed)
            k = auto.choose(self._active, predictable=predictable)
        k = min(k, options.max_new_tokens - len(stream.generated), self._room(stream) - 1)
        if k < 1:
            return await self._plain_step(stream)
        params = options.sampling
        proposal = await self.draft.propose(stream.id, stream.committed, k, params, stream.rng)
        if not proposal.drafts:  # e.g. no n-gram match: nothing to verify, not a round
            return await self._plain_step(stream)
        k = len(proposal.drafts)  # a drafter may propose fewer than asked
        head: HeadOp
        if params.greedy:
            head = VerifyGreedyHead(tuple(proposal.drafts))
        else:
            u_accept, u_resample = uniforms_for_round(stream.rng, k)
            head = VerifySampleHead(
                params,
                tuple(proposal.drafts),
                tuple(proposal.dists),
                tuple(float(u) for u in u_accept),
                float(u_resample),
            )
        started = time.perf_counter()
        result = await self._target(stream, proposal.drafts, head)
        verify_ms = (time.perf_counter() - started) * 1000
        stream.drafted += k
        stream.accepted += result.accepted
        stream.ks.append(k)
        # a stream's first round also warms its fresh state up, and a probe's draft model
        # catches up on the plain steps' tokens: their times would mark K as dear
        timed = len(stream.ks) > 1 and not probe
        compute = sum(result.compute_ms.values()) if result.compute_ms else None
        stream.auto_k.update(
            k, result.accepted, proposal.ms, verify_ms, timed=timed, compute_ms=compute
        )
        self.metrics.emit(SpeculationRound(stream.id, k, result.accepted, proposal.ms, verify_ms))
        return result.tokens

    async def _plain_step(self, stream: _Stream) -> list[int]:
        """One plain decoding step in speculative mode, timed for K auto's comparison."""
        started = time.perf_counter()
        result = await self._target(stream, [], self._plain_head(stream))
        stream.auto_k.record_plain((time.perf_counter() - started) * 1000)
        stream.plain_steps += 1
        return result.tokens

    async def _generate(
        self, prompt: str, options: GenerationOptions
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        """Checks the request at once, then waits for a slot (``streams``) to generate."""
        prompt_ids = await asyncio.to_thread(self._check, prompt, options)  # may run a model
        async with self.streams.slot():
            generated = self._generate_checked(prompt, prompt_ids, options)
            async with contextlib.aclosing(generated) as items:
                async for item in items:
                    yield item

    async def _generate_checked(
        self, prompt: str, prompt_ids: list[int], options: GenerationOptions
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        stream = _Stream(
            next(self._ids),
            prompt_ids,
            options,
            np.random.default_rng(options.sampling.seed),
            auto_k=self._auto_k_for_new_stream(),
        )
        stream.committed = list(prompt_ids)
        text = IncrementalText(self.tokenizer, options.stop_strings)
        started = time.perf_counter()
        first_at: float | None = None
        finish = "max_tokens"
        self._active += 1
        try:
            steps = self._steps(stream)
            step_started = started
            async with contextlib.aclosing(steps):
                async for tokens in steps:
                    new_tokens, finish_now = self._commit(stream, tokens)
                    now = time.perf_counter()
                    if first_at is None and stream.generated:
                        first_at = now
                    self._count_tokens(stream.id, len(new_tokens), (now - step_started) * 1000)
                    delta = text.update(stream.generated)
                    if delta or new_tokens:
                        yield TokenDelta(stream.id, delta, tuple(new_tokens))
                    if text.stopped:
                        finish_now = "stop"
                    if finish_now:
                        finish = finish_now
                        break
                    if self._room(stream) <= 0:
                        finish = "context"
                        break
                    step_started = time.perf_counter()
            tail = text.flush()
            if tail:
                yield TokenDelta(stream.id, tail, ())
        finally:
            self._active -= 1
            if (stream.ks or stream.plain_steps) and options.k is None:
                self._k_memory[self.new_auto_k] = stream.auto_k
            await self.route.release(stream.id)
            if self.draft is not None and options.speculative:
                await self.draft.release(stream.id)
        yield self._finish(
            stream,
            prompt=prompt,
            text=text,
            started=started,
            first_at=started if first_at is None else first_at,
            finish=finish,
        )

    async def _steps(self, stream: _Stream) -> AsyncGenerator[list[int], None]:
        """Each step's new tokens: the prompt's pass, then decode steps until closed."""
        yield await self._first_tokens(stream)
        if stream.options.speculative:
            while True:
                yield await self._speculative_step(stream)
        async with contextlib.aclosing(self._plain_steps(stream)) as plain:
            async for tokens in plain:  # closed with this one: a step under way is waited for
                yield tokens

    async def _plain_steps(self, stream: _Stream) -> AsyncGenerator[list[int], None]:
        """Plain decode steps as one run the route chains itself (no trip through this loop
        between two tokens), up to the token limit and the context."""
        rewind, pending = stream.target.plan(stream.committed)
        if rewind or len(pending) != 1:
            raise RuntimeError(f"stream {stream.id}: the cache is not one token behind")
        run = DecodeRun(
            stream.id,
            pending[0],
            steps=min(stream.options.max_new_tokens - len(stream.generated), self._room(stream)),
            next_head=functools.partial(self._plain_head, stream),
            stop_ids=frozenset(self.tokenizer.eos_token_ids),
        )
        fed = pending[0]
        async with contextlib.aclosing(self.route.decode(run)) as results:
            async for result in results:
                stream.target.applied(0, [fed])
                self._emit_stage_timings(stream.id, result, 1)
                if result.tokens:
                    fed = result.tokens[-1]
                yield result.tokens

    async def _first_tokens(self, stream: _Stream) -> list[int]:
        """Prefill the target (and, overlapping it, the draft) and return the first token."""
        head = self._plain_head(stream)
        if not (stream.options.speculative and self.draft is not None):
            return (await self._target(stream, [], head)).tokens
        async with asyncio.TaskGroup() as group:
            target = group.create_task(self._target(stream, [], head))
            group.create_task(self.draft.prefill(stream.id, stream.committed))
        return target.result().tokens

    def _commit(self, stream: _Stream, tokens: list[int]) -> tuple[list[int], str]:
        """Append ``tokens`` up to EOS, the token limit and the context; the finish reason."""
        taken: list[int] = []
        limit = stream.options.max_new_tokens
        for token in tokens:
            if token in self.tokenizer.eos_token_ids:
                stream.committed += taken
                return taken, "eos"
            taken.append(token)
            if len(stream.generated) + len(taken) >= limit:
                stream.committed += taken
                return taken, "max_tokens"
        stream.committed += taken
        return taken, ""

    def _finish(
        self,
        stream: _Stream,
        *,
        prompt: str,
        text: IncrementalText,
        started: float,
        first_at: float,
        finish: str,
    ) -> GenerationResult:
        ended = time.perf_counter()
        generated = stream.generated
        decode_s = ended - first_at
        rate = (len(generated) - 1) / decode_s if len(generated) > 1 and decode_s > 0 else 0.0
        acceptance = stream.accepted / stream.drafted if stream.drafted else None
        result = GenerationResult(
            stream_id=stream.id,
            prompt=prompt,
            text=text.text,
            token_ids=list(generated),
            prompt_tokens=len(stream.prompt_ids),
            ttft_ms=(first_at - started) * 1000,
            tokens_per_s=rate,
            acceptance_rate=acceptance,
            finish_reason=finish,
            ks=stream.ks,
            plain_steps=stream.plain_steps,
        )
        self.metrics.emit(
            RequestFinished(
                stream.id,
                result.prompt_tokens,
                len(generated),
                result.ttft_ms,
                rate,
                acceptance,
                finish,
            )
        )
        return result
