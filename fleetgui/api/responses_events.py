"""A response streamed as OpenAI's Responses API streams it: named events with a
``sequence_number``, from ``response.created`` to ``response.completed`` (``.incomplete`` at the
token limit, ``.failed`` on an error). Output items are opened, filled and closed one at a
time: the answer's text as a ``message`` (``output_text`` deltas), each call as a
``function_call`` (its arguments' deltas as the model writes them, where a grammar makes the
call sure, else whole at the end).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetgui.api.errors import ApiError
from fleetgui.api.responses_objects import ResponseObject, message_item, new_id
from fleetgui.api.sse import EventStream
from fleetgui.runtime.call_stream import CallDelta
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.token_logprobs import TokenLogprob
from fleetgui.runtime.tool_calls import ParsedAnswer, ToolCall


@dataclass
class _OpenItem:
    """The output item being written: its place in the output and what it holds so far."""

    index: int
    id: str
    text: str = ""  # a message's text, or a call's arguments
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    call: ToolCall | None = None  # a call's id and name (None: a message)


class ResponseEventWriter:
    """An :class:`~fleetgui.api.answer_stream.AnswerWriter` of Responses API events; its
    ``output`` is the response's output items once it has finished."""

    def __init__(self, events: EventStream, response: ResponseObject) -> None:
        self.events = events
        self.response = response
        self.output: list[dict[str, Any]] = []
        self.final: dict[str, Any] | None = None  # the ended response object
        self._open: _OpenItem | None = None
        self._sequence = 0

    async def _send(self, kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        await self.events.send(event, name=kind)

    async def start(self) -> None:
        await self.events.open()
        body = self.response.body([])
        await self._send("response.created", response=body)
        await self._send("response.in_progress", response=body)

    async def text(self, text: str, logprobs: list[TokenLogprob]) -> None:
        item = self._open
        if item is None or item.call is not None:
            await self._close()
            item = await self._open_message()
        entries = self.response.logprobs(logprobs) or []
        item.text += text
        item.logprobs += entries
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        await self._send("response.output_text.delta", **where, delta=text, logprobs=entries)

    async def call_piece(self, piece: CallDelta) -> None:
        if piece.call is not None:
            await self._close()
            self._open = _OpenItem(len(self.output), new_id("fc"), call=piece.call)
            item = self.response.call_item(self._open.id, piece.call, "", "in_progress")
            await self._send("response.output_item.added", output_index=self._open.index, item=item)
            if not piece.call.arguments:
                return
        open_item = self._open
        assert open_item is not None and open_item.call is not None
        delta = piece.arguments or (piece.call.arguments if piece.call else "")
        open_item.text += delta
        await self._send(
            "response.function_call_arguments.delta",
            item_id=open_item.id,
            output_index=open_item.index,
            delta=delta,
        )

    async def call(self, index: int, call: ToolCall) -> None:
        await self.call_piece(CallDelta(index, call))

    async def finish(
        self, result: GenerationResult, parsed: ParsedAnswer | None, logprobs: list[TokenLogprob]
    ) -> None:
        if logprobs and self._open is not None and self._open.call is None:
            self._open.logprobs += self.response.logprobs(logprobs) or []
        if not self.output and self._open is None:  # an empty answer is an empty message
            await self._open_message()
        await self._close()
        self.final = self.response.body(self.output, result=result)
        kind = "response.completed"
        if self.final["status"] == "incomplete":
            kind = "response.incomplete"
        await self._send(kind, response=self.final)
        await self.events.end()

    async def fail(self, error: ApiError) -> None:
        await self._close("incomplete")  # what the client got stays in the output
        await self._send("error", code=error.code or error.kind, message=error.message, param=None)
        failed = {"code": "server_error", "message": error.message}
        await self._send("response.failed", response=self.response.body(self.output, error=failed))
        await self.events.end()

    async def _open_message(self) -> _OpenItem:
        item = self._open = _OpenItem(len(self.output), new_id("msg"))
        await self._send(
            "response.output_item.added",
            output_index=item.index,
            item=message_item(item.id, "", None, "in_progress"),
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        await self._send(
            "response.content_part.added",
            item_id=item.id,
            output_index=item.index,
            content_index=0,
            part=part,
        )
        return item

    async def _close(self, status: str = "completed") -> None:
        """Closes the open item, if any: its last events, and it joins the output."""
        item, self._open = self._open, None
        if item is None:
            return
        where = {"item_id": item.id, "output_index": item.index}
        if item.call is None:
            logprobs = item.logprobs if self.response.token_text is not None else None
            done = message_item(item.id, item.text, logprobs, status)
            text = {"text": item.text, "logprobs": item.logprobs}
            await self._send("response.output_text.done", **where, content_index=0, **text)
            part = done["content"][0]
            await self._send("response.content_part.done", **where, content_index=0, part=part)
        else:
            call = item.call
            done = self.response.call_item(item.id, call, item.text, status)
            await self._send(
                "response.function_call_arguments.done",
                **where,
                name=call.name,
                arguments=item.text,
            )
        self.output.append(done)
        await self._send("response.output_item.done", output_index=item.index, item=done)
