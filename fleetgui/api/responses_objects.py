"""The JSON objects of OpenAI's Responses API: the ``response`` object, its output items (an
assistant ``message`` with ``output_text``, a ``function_call``), its usage; and an answer's
output read back as the chat messages a later turn continues from."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgui.api.responses import chat_logprob
from fleetgui.runtime.generation import FinishReason, GenerationResult
from fleetgui.runtime.token_logprobs import TokenLogprob
from fleetgui.runtime.tool_calls import ParsedAnswer, ToolCall


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def message_item(
    item_id: str, text: str, logprobs: list[dict[str, Any]] | None, status: str = "completed"
) -> dict[str, Any]:
    """A ``message`` item: ``in_progress`` (no content yet), ``completed``, or ``incomplete``
    (the text so far, of an answer that failed)."""
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [] if status == "in_progress" else [part],
    }


def call_item(
    item_id: str, call: ToolCall, arguments: str, namespace: str | None, status: str
) -> dict[str, Any]:
    """A ``function_call`` item (``namespace``: the one its function came in, if any)."""
    item = {
        "type": "function_call",
        "id": item_id,
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def usage(result: GenerationResult) -> dict[str, Any]:
    """``cached_tokens``: prompt tokens whose KV an earlier request left on the fleet."""
    output = len(result.token_ids)
    return {
        "input_tokens": result.prompt_tokens,
        "input_tokens_details": {"cached_tokens": result.cached_tokens},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": result.prompt_tokens + output,
    }


def as_messages(output: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An answer's output items as chat messages: one assistant message, its calls as chat's
    ``tool_calls``."""
    text = "".join(
        part["text"] for item in output if item["type"] == "message" for part in item["content"]
    )
    calls = [
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        for item in output
        if item["type"] == "function_call"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return [message]


@dataclass
class ResponseObject:
    """One response: its id, creation time, model and the request's settings, shared by the
    object's every state (in progress, completed, incomplete, failed)."""

    model: str
    echo: dict[str, Any]
    #: the request asked for log-probabilities: each token's text comes from this
    token_text: Callable[[int], str] | None = None
    #: the namespace of each offered function that came in one
    namespaces: Mapping[str, str] = field(default_factory=dict)
    id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))

    def logprobs(self, logprobs: Sequence[TokenLogprob]) -> list[dict[str, Any]] | None:
        text = self.token_text
        return None if text is None else [chat_logprob(lp, text) for lp in logprobs]

    def body(
        self,
        output: Sequence[dict[str, Any]],
        *,
        result: GenerationResult | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The object in progress (no ``result``), ended (``result``), or failed (``error``)."""
        status, incomplete = "in_progress", None
        if error is not None:
            status = "failed"
        elif result is not None:
            status = "completed"
            if result.finish_reason in (FinishReason.MAX_TOKENS, FinishReason.CONTEXT):
                status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": list(output),
            "error": error,
            "incomplete_details": incomplete,
            "usage": usage(result) if result is not None else None,
            **self.echo,
        }

    def call_item(
        self, item_id: str, call: ToolCall, arguments: str, status: str = "completed"
    ) -> dict[str, Any]:
        return call_item(item_id, call, arguments, self.namespaces.get(call.name), status)

    def complete(self, result: GenerationResult, parsed: ParsedAnswer | None) -> dict[str, Any]:
        """The ended response of a request not streamed: its text, then its calls
        (``parsed``: the answer read for calls, None when no tools were offered)."""
        content = result.text if parsed is None else parsed.content
        calls = () if parsed is None else parsed.calls
        output = []
        if content or not calls:
            logprobs = self.logprobs(result.logprobs)
            output.append(message_item(new_id("msg"), content or "", logprobs))
        for call in calls:
            output.append(self.call_item(new_id("fc"), call, call.arguments))
        return self.body(output, result=result)
