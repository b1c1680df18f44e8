"""Answers in the shape of Anthropic's Messages API: the ``message`` object (``text`` and
``tool_use`` content blocks, a ``stop_reason``, usage), and its stream of named events
(``message_start``, each block's ``content_block_start``/``_delta``/``_stop``,
``message_delta`` with the stop reason and usage, ``message_stop``; ``error`` on a failure).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from fleetgui.api.errors import ApiError
from fleetgui.api.sse import EventStream
from fleetgui.runtime.call_stream import CallDelta
from fleetgui.runtime.generation import FinishReason, GenerationResult
from fleetgui.runtime.token_logprobs import TokenLogprob
from fleetgui.runtime.tool_calls import ParsedAnswer, ToolCall, loads

#: the pipeline's finish reasons as Anthropic names them
STOP_REASONS = {
    FinishReason.EOS: "end_turn",
    FinishReason.STOP: "stop_sequence",
    FinishReason.MAX_TOKENS: "max_tokens",
    FinishReason.CONTEXT: "max_tokens",
}
#: the API's error kinds as Anthropic names them
ERROR_TYPES = {"server_error": "api_error"}


def error_body(error: ApiError) -> dict[str, Any]:
    kind = "not_found_error" if error.status == 404 else ERROR_TYPES.get(error.kind, error.kind)
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def stop_reason(result: GenerationResult, parsed: ParsedAnswer | None) -> str:
    if parsed is not None and parsed.calls:
        return "tool_use"
    return STOP_REASONS.get(result.finish_reason, "end_turn")


def usage(result: GenerationResult) -> dict[str, Any]:
    """``cache_read_input_tokens``: prompt tokens whose KV an earlier request left on the fleet
    (Anthropic counts them apart from ``input_tokens``)."""
    return {
        "input_tokens": result.prompt_tokens - result.cached_tokens,
        "cache_read_input_tokens": result.cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": len(result.token_ids),
    }


def tool_use(call: ToolCall) -> dict[str, Any]:
    arguments = loads(call.arguments)
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": arguments if isinstance(arguments, dict) else {},
    }


@dataclass
class MessageObject:
    model: str
    prompt_tokens: int
    id: str = field(default_factory=lambda: f"msg_{secrets.token_hex(12)}")

    def body(
        self, content: list[dict[str, Any]], stop: str | None, usage: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def complete(self, result: GenerationResult, parsed: ParsedAnswer | None) -> dict[str, Any]:
        """The answer of a request not streamed: its text, then its calls."""
        text = result.text if parsed is None else parsed.content
        calls = () if parsed is None else parsed.calls
        content = [{"type": "text", "text": text}] if text or not calls else []
        content += [tool_use(call) for call in calls]
        return self.body(content, stop_reason(result, parsed), usage(result))


class MessageEventWriter:
    """An :class:`~fleetgui.api.answer_stream.AnswerWriter` of Messages API events: blocks
    are opened, filled and closed one at a time."""

    def __init__(self, events: EventStream, message: MessageObject) -> None:
        self.events = events
        self.message = message
        self._blocks = 0  # blocks opened so far
        self._open: str | None = None  # the open block's type

    async def _send(self, kind: str, **fields: Any) -> None:
        await self.events.send({"type": kind, **fields}, name=kind)

    async def start(self) -> None:
        await self.events.open()
        usage = {"input_tokens": self.message.prompt_tokens, "output_tokens": 0}
        await self._send("message_start", message=self.message.body([], None, usage))

    async def text(self, text: str, logprobs: list[TokenLogprob]) -> None:
        if self._open != "text":
            await self._start_block({"type": "text", "text": ""})
        delta = {"type": "text_delta", "text": text}
        await self._send("content_block_delta", index=self._blocks - 1, delta=delta)

    async def call_piece(self, piece: CallDelta) -> None:
        if piece.call is not None:
            block = {"type": "tool_use", "id": piece.call.id, "name": piece.call.name, "input": {}}
            await self._start_block(block)
        arguments = piece.arguments or (piece.call.arguments if piece.call else "")
        if arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            await self._send("content_block_delta", index=self._blocks - 1, delta=delta)

    async def call(self, index: int, call: ToolCall) -> None:
        await self.call_piece(CallDelta(index, call))

    async def finish(
        self, result: GenerationResult, parsed: ParsedAnswer | None, logprobs: list[TokenLogprob]
    ) -> None:
        if self._blocks == 0:  # an empty answer is an empty text block
            await self._start_block({"type": "text", "text": ""})
        await self._stop_block()
        delta = {"stop_reason": stop_reason(result, parsed), "stop_sequence": None}
        await self._send("message_delta", delta=delta, usage=usage(result))
        await self._send("message_stop")
        await self.events.end()

    async def fail(self, error: ApiError) -> None:
        await self._stop_block()
        await self.events.send(error_body(error), name="error")
        await self.events.end()

    async def _start_block(self, block: dict[str, Any]) -> None:
        await self._stop_block()
        await self._send("content_block_start", index=self._blocks, content_block=block)
        self._blocks += 1
        self._open = block["type"]

    async def _stop_block(self) -> None:
        if self._open is not None:
            await self._send("content_block_stop", index=self._blocks - 1)
            self._open = None
