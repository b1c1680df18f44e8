"""What a generation is asked, whether it can be served, and what it gives back.

The vocabulary of :class:`~fleetgui.runtime.pipeline.Pipeline` and of the fleet's replicated
pipeline alike: the options of a request, the text deltas of a stream and its result.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleetgui.errors import FleetguiError
from fleetgui.runtime.auto_k import check_k
from fleetgui.runtime.head import SamplingParams

if TYPE_CHECKING:
    from fleetgui.runtime.tokenizer import Tokenizer


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


def check_request(
    prompt: str,
    options: GenerationOptions,
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
    if options.max_new_tokens < 1:
        raise GenerationError("max new tokens must be at least 1")
    try:
        options.sampling.validate()
    except ValueError as exc:
        raise GenerationError(str(exc)) from exc
    if options.speculative:
        if not has_drafter:
            raise GenerationError(
                "speculative decoding needs a draft model or the n-gram drafter: pass "
                "--draft DRAFT_EXPORT_DIR or --draft ngram"
            )
        if options.k is not None:
            try:
                check_k(options.k)
            except ValueError as exc:
                raise GenerationError(str(exc)) from exc
    ids = tokenizer.encode(prompt)
    if len(ids) >= context_limit:
        raise GenerationError(
            f"the prompt has {len(ids)} tokens but the model's context holds "
            f"{context_limit}: shorten it to fewer than {context_limit} tokens"
        )
    return ids
