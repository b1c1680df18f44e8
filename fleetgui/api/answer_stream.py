"""A streamed answer, whichever shape its events take: the generation's tokens become text
and call pieces for an :class:`AnswerWriter` (chat or text-completion chunks, or the Responses
API's events), and the generator is closed as soon as the client has gone, which frees the
stream on every stage.

With tools offered, only what is surely text for the user goes out as it comes; calls go out
as they are written where a grammar makes them sure, or whole at the end.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Protocol

from fleetgui.api.errors import SERVER_ERROR, ApiError, bad_request
from fleetgui.api.prepared import PreparedPrompt
from fleetgui.api.request_note import NOTE, StreamOutcome
from fleetgui.api.served import ServedModel
from fleetgui.api.sse import ClientGoneError
from fleetgui.errors import FleetguiError
from fleetgui.runtime.call_stream import CallDelta, CallStream
from fleetgui.runtime.generation import GenerationError, GenerationResult, TokenDelta
from fleetgui.runtime.token_logprobs import TokenLogprob
from fleetgui.runtime.tool_calls import ParsedAnswer, ToolCall
from fleetgui.runtime.tool_stream import ContentStream

log = logging.getLogger(__name__)


class AnswerWriter(Protocol):
    """How one streamed answer's pieces go out to the client."""

    async def start(self) -> None:
        """The response's headers and first events, before any token."""

    async def text(self, text: str, logprobs: list[TokenLogprob]) -> None:
        """Text for the user, with its tokens' log-probabilities when they were asked for."""

    async def call_piece(self, piece: CallDelta) -> None:
        """A call's start, or a fragment of its arguments, as the model writes it."""

    async def call(self, index: int, call: ToolCall) -> None:
        """A whole call, read at the answer's end."""

    async def finish(
        self, result: GenerationResult, parsed: ParsedAnswer | None, logprobs: list[TokenLogprob]
    ) -> None:
        """The answer's end (``logprobs``: of tokens whose text went out with no event)."""

    async def fail(self, error: ApiError) -> None:
        """The generation failed after the answer began: the error as an event, and the end."""


async def generate_whole(served: ServedModel, prepared: PreparedPrompt) -> GenerationResult:
    """The answer of a request not streamed (a request the pipeline refuses is a 400)."""
    try:
        result = await served.llm.agenerate_result(prepared.text, prepared.config)
    except GenerationError as exc:
        raise bad_request(str(exc)) from exc
    NOTE.get().tokens = len(result.token_ids)
    return result


async def stream_answer(
    served: ServedModel, prepared: PreparedPrompt, writer: AnswerWriter, path: str
) -> GenerationResult | None:
    """Generates ``prepared`` and writes it through ``writer``; the result, or None when the
    generation failed mid-stream or the client left (the request's note says which)."""
    items = served.llm.astream_result(prepared.text, prepared.config)
    result: GenerationResult | None = None
    note = NOTE.get()
    content = prepared.content_stream()
    calls = prepared.call_stream()
    answered = ""
    held: list[TokenLogprob] = []  # of tokens whose text has not gone out yet
    try:
        async with contextlib.aclosing(items):
            await writer.start()
            try:
                async for item in items:
                    if not isinstance(item, TokenDelta):
                        result = item
                        continue
                    note.tokens += len(item.token_ids)
                    answered += item.text
                    held += item.logprobs
                    text = content.update(answered) if content else item.text
                    if text:
                        await writer.text(text, held)
                        held = []
                    for piece in calls.update(answered) if calls else ():
                        await writer.call_piece(piece)
            except ClientGoneError:
                raise
            except Exception as exc:  # after the headers: the error as an event
                if isinstance(exc, FleetguiError):  # e.g. a worker lost for good
                    log.warning("%s failed mid-stream: %s", path, exc)
                else:
                    log.exception("%s failed mid-stream", path)
                await writer.fail(
                    ApiError(f"generation failed: {exc}", status=500, kind=SERVER_ERROR)
                )
                note.outcome = StreamOutcome.FAILED_MID_STREAM
                return None
        assert result is not None
        note.tokens = len(result.token_ids)
        await _write_end(writer, result, prepared.parse(result.text), (content, calls), held)
        return result
    except ClientGoneError:
        note.outcome = StreamOutcome.CLIENT_LEFT
        return None


async def _write_end(
    writer: AnswerWriter,
    result: GenerationResult,
    parsed: ParsedAnswer | None,
    streams: tuple[ContentStream | None, CallStream | None],
    held: list[TokenLogprob],
) -> None:
    """With tools, the text held back and the calls not yet sent; then the answer's end."""
    content, calls = streams
    if parsed is not None and content is not None:
        rest = content.rest(parsed.content or "")
        if rest:
            await writer.text(rest, [])
        if calls is not None:
            for piece in calls.finish(list(parsed.calls)):
                await writer.call_piece(piece)
        else:
            for index, call in enumerate(parsed.calls):
                await writer.call(index, call)
    await writer.finish(result, parsed, held)
