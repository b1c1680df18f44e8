"""A chat or text completion streamed as OpenAI streams it: ``chat.completion.chunk`` (or
``text_completion``) events, then ``data: [DONE]``."""

from __future__ import annotations

from fleetgui.api.errors import ApiError
from fleetgui.api.responses import Answer, finish_reason
from fleetgui.api.sse import EventStream
from fleetgui.runtime.call_stream import CallDelta
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.token_logprobs import TokenLogprob
from fleetgui.runtime.tool_calls import ParsedAnswer, ToolCall


class ChunkWriter:
    """An :class:`~fleetgui.api.answer_stream.AnswerWriter` of completion chunks."""

    def __init__(self, events: EventStream, answer: Answer) -> None:
        self.events = events
        self.answer = answer

    async def start(self) -> None:
        await self.events.open()
        if self.answer.chat:  # the role comes first, as OpenAI's stream does
            await self.events.send(self.answer.chunk("", first=True))

    async def text(self, text: str, logprobs: list[TokenLogprob]) -> None:
        await self.events.send(self.answer.chunk(text, logprobs=logprobs))

    async def call_piece(self, piece: CallDelta) -> None:
        await self.events.send(self.answer.call_chunk(piece))

    async def call(self, index: int, call: ToolCall) -> None:
        await self.events.send(self.answer.tool_call_chunk(index, call))

    async def finish(
        self, result: GenerationResult, parsed: ParsedAnswer | None, logprobs: list[TokenLogprob]
    ) -> None:
        finish = "tool_calls" if parsed is not None and parsed.calls else finish_reason(result)
        await self.events.send(self.answer.chunk("", finish=finish, logprobs=logprobs))
        if self.answer.include_usage:
            await self.events.send(self.answer.usage_chunk(result))
        await self.events.done()

    async def fail(self, error: ApiError) -> None:
        await self.events.send(error.body())
        await self.events.done()
