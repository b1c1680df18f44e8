"""One stream's generation: the steps it takes through the target (and its drafter), and the
loop that commits their tokens, yields the text as it grows and assembles the result."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Collection

from fleetgui.runtime.generation import (
    FinishReason,
    GenerationCutError,
    GenerationError,
    GenerationResult,
    TokenDelta,
)
from fleetgui.runtime.metrics import MetricsBus, RequestFinished
from fleetgui.runtime.speculative import Drafter
from fleetgui.runtime.speculative_round import speculative_step
from fleetgui.runtime.stream_state import StreamState
from fleetgui.runtime.target_passes import TargetPasses
from fleetgui.runtime.tokenizer import IncrementalText


async def stream_steps(
    stream: StreamState,
    target: TargetPasses,
    drafter: Drafter | None,
    generating: Callable[[], int],
) -> AsyncGenerator[list[int], None]:
    """Each step's new tokens: the prompt's pass, then decode steps until closed (speculative
    rounds with ``drafter`` if the stream asks for them, else the plain decode run).
    ``generating``: how many streams are generating now, asked before each round."""
    yield await _first_tokens(stream, target, drafter)
    if stream.config.speculative:
        if drafter is None:
            raise GenerationError("speculative decoding needs a draft model")
        while True:
            yield await speculative_step(stream, target, drafter, streams=generating())
    if stream.stepwise:  # each step's mask follows the token before it, or it reports logprobs
        while True:
            yield (await target.run(stream, [], stream.plain_head())).tokens
    async with contextlib.aclosing(target.decode_run(stream)) as plain:
        async for tokens in plain:  # closed with this one: a step under way is waited for
            yield tokens


async def _first_tokens(
    stream: StreamState, target: TargetPasses, drafter: Drafter | None
) -> list[int]:
    """Prefill the target (and, overlapping it, the draft) and return the first token."""
    head = stream.plain_head()
    if not (stream.config.speculative and drafter is not None):
        return (await target.run(stream, [], head)).tokens
    async with asyncio.TaskGroup() as group:
        first = group.create_task(target.run(stream, [], head))
        group.create_task(drafter.prefill(stream.id, stream.committed))
    return first.result().tokens


class StreamGeneration:
    """The loop of one stream: commits each step's tokens and yields the text they add, until
    EOS, a stop string, the token limit or the end of the context; then its result."""

    def __init__(
        self,
        stream: StreamState,
        steps: AsyncGenerator[list[int], None],
        text: IncrementalText,
        *,
        context_limit: int,
        eos_ids: Collection[int],
        count_tokens: Callable[[int, int, float], None],
    ) -> None:
        """``count_tokens(stream_id, count, step_ms)`` is told each step's new tokens."""
        self.stream = stream
        self.steps = steps
        self.text = text
        self.context_limit = context_limit
        self.eos_ids = eos_ids
        self.count_tokens = count_tokens
        self.started = time.perf_counter()
        self.first_at: float | None = None  # when the first token was committed
        self.finish = FinishReason.MAX_TOKENS

    async def deltas(self) -> AsyncGenerator[TokenDelta, None]:
        """The text (and token ids) each step adds, as it is accepted; closing this closes
        the steps."""
        stream, text = self.stream, self.text
        step_started = self.started
        async with contextlib.aclosing(self.steps) as steps:
            async for tokens in steps:
                before = len(stream.logprobs)
                new_tokens, finish_now = stream.commit(tokens, self.eos_ids)
                now = time.perf_counter()
                if self.first_at is None and stream.generated:
                    self.first_at = now
                self.count_tokens(stream.id, len(new_tokens), (now - step_started) * 1000)
                delta = text.update(stream.generated)
                if delta or new_tokens:
                    logprobs = tuple(stream.logprobs[before:])
                    yield TokenDelta(stream.id, delta, tuple(new_tokens), logprobs)
                if text.stopped:
                    finish_now = FinishReason.STOP
                if finish_now:
                    self.finish = finish_now
                    break
                if stream.room(self.context_limit) <= 0:
                    self.finish = FinishReason.CONTEXT
                    break
                step_started = time.perf_counter()
            else:  # the steps ran out with no end reached: a closed pipeline, not an answer
                if len(stream.generated) < stream.config.max_new_tokens:
                    raise GenerationCutError(
                        f"the generation stopped after {len(stream.generated)} tokens: the "
                        "pipeline was closed under it (the model was undeployed, or the "
                        "server is stopping)"
                    )
        tail = text.flush(stream.generated)
        if tail:
            yield TokenDelta(stream.id, tail, ())

    def result(self, prompt: str, metrics: MetricsBus) -> GenerationResult:
        """The finished stream's result (also sent to ``metrics`` as :class:`RequestFinished`):
        TTFT, and the decode rate over the tokens after the first."""
        stream = self.stream
        first_at = self.started if self.first_at is None else self.first_at
        ended = time.perf_counter()
        generated = stream.generated
        decode_s = ended - first_at
        rate = (len(generated) - 1) / decode_s if len(generated) > 1 and decode_s > 0 else 0.0
        acceptance = stream.accepted / stream.drafted if stream.drafted else None
        result = GenerationResult(
            stream_id=stream.id,
            prompt=prompt,
            text=self.text.text,
            token_ids=list(generated),
            prompt_tokens=len(stream.prompt_ids),
            ttft_ms=(first_at - self.started) * 1000,
            tokens_per_s=rate,
            acceptance_rate=acceptance,
            finish_reason=self.finish,
            ks=stream.ks,
            plain_steps=stream.plain_steps,
            cached_tokens=stream.cached,
            logprobs=list(stream.logprobs),
        )
        metrics.emit(
            RequestFinished(
                stream.id,
                result.prompt_tokens,
                len(generated),
                result.ttft_ms,
                rate,
                acceptance,
                self.finish,
            )
        )
        return result
