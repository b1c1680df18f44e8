"""What a generation gives back, whether it can be served, and what serves it.

The vocabulary of :class:`~fleetgui.runtime.pipeline.Pipeline` and of the fleet's replicated
pipeline alike: the text deltas of a stream and its result, the check of a request (its
:class:`~fleetgui.generation_config.GenerationConfig` and prompt), and :class:`Runtime`, what
the ``LLMPipeline`` asks of either.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.constraint import ConstraintError, grammar_of_schema
from fleetgui.runtime.token_logprobs import TokenLogprob

if TYPE_CHECKING:
    from fleetgui.runtime.metrics import MetricsBus
    from fleetgui.runtime.speculative import Drafter
    from fleetgui.runtime.stream_limit import StreamLimit
    from fleetgui.runtime.tokenizer import Tokenizer


class GenerationError(FleetguiError):
    """A request that cannot be served as asked (the message says how to fix it)."""


class GenerationCutError(FleetguiError):
    """A generation whose steps ended before any of its ends (EOS, a stop string, the token
    limit, a full context): the pipeline was closed under it. Not the request's fault."""


@dataclass(frozen=True)
class TokenDelta:
    """New text of one stream, as it is accepted."""

    stream_id: int
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] = ()  # of ``token_ids``, when the request asked


class FinishReason(enum.StrEnum):
    """Why a generation ended."""

    EOS = "eos"  # an end-of-sequence (end-of-turn) token
    STOP = "stop"  # one of the request's stop strings
    MAX_TOKENS = "max_tokens"  # the request's token limit
    CONTEXT = "context"  # the model's context is full


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
    finish_reason: FinishReason
    ks: list[int] = field(default_factory=list)  # K of each speculative round
    plain_steps: int = 0  # speculative mode's plain steps (K auto off, or nothing proposed)
    cached_tokens: int = 0  # prompt tokens whose KV an earlier request left (not prefilled)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of token_ids, when asked


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


def grammar_of(config: GenerationConfig) -> str | None:
    """The grammar ``config`` constrains its answer with (None: unconstrained)."""
    if config.grammar is not None:
        return config.grammar
    if config.json_schema is None:
        return None
    try:
        return grammar_of_schema(config.json_schema)
    except ConstraintError as exc:
        raise GenerationError(str(exc)) from exc


def check_request(
    prompt: str,
    config: GenerationConfig,
    tokenizer: Tokenizer,
    *,
    context_limit: int,
    has_drafter: bool,
) -> list[int]:
    """The prompt's token ids, if a pipeline with this context (and a drafter, or none) can
    serve the request; else :class:`GenerationError` saying how to fix it. Encoding may run a
    model: callers on the event loop run this on a thread."""
    if not prompt or not prompt.strip():
        raise GenerationError("the prompt is empty: give some text to continue")
    try:
        config.check()
    except ValueError as exc:
        raise GenerationError(str(exc)) from exc
    if config.speculative and not has_drafter:
        raise GenerationError(
            "speculative decoding needs a draft model or the n-gram drafter: pass "
            "--draft DRAFT_EXPORT_DIR or --draft ngram"
        )
    grammar = grammar_of(config)
    if grammar is not None:
        try:
            tokenizer.grammar.check(grammar)
        except ConstraintError as exc:
            raise GenerationError(str(exc)) from exc
    ids = tokenizer.encode(prompt)
    if len(ids) >= context_limit:
        raise GenerationError(
            f"the prompt has {len(ids)} tokens but the context holds {context_limit}: "
            f"shorten it to fewer than {context_limit} tokens, or raise the context (--context "
            "N, or the app's Context setting) up to the model's own limit"
        )
    return ids


class Runtime(Protocol):
    """What generates behind the ``LLMPipeline``: a
    :class:`~fleetgui.runtime.pipeline.Pipeline` (stages here or on a fleet's ring) or the
    fleet's :class:`~fleetgui.fleet.session.replicas.ReplicatedPipeline`."""

    tokenizer: Tokenizer
    context_limit: int
    draft: Drafter | None  # the drafter speculative answers need (None: none deployed)
    metrics: MetricsBus  # every stage's and stream's events, for the dashboard and benchmarks
    streams: StreamLimit  # generations at once; more wait their turn

    def stream(
        self, prompt: str, config: GenerationConfig
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        """Text deltas as tokens are accepted, then the result; closing it early stops the
        generation and frees its state everywhere."""
        ...

    async def complete(self, prompt: str, config: GenerationConfig) -> GenerationResult:
        """The whole answer to ``prompt``."""
        ...

    async def close(self) -> None:
        """Free the stages (and the drafter)."""
        ...
