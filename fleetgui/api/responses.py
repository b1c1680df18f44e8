"""The JSON objects the API answers with, shaped as OpenAI's (``chat.completion``,
``chat.completion.chunk``, ``text_completion``, ``model``)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from fleetgui.runtime.generation import FinishReason, GenerationResult
from fleetgui.runtime.tool_calls import ParsedAnswer, ToolCall

#: The pipeline's finish reasons as OpenAI names them: an end-of-turn token or a stop string
#: is "stop", the token limit or a full context is "length".
FINISH_REASONS = {
    FinishReason.EOS: "stop",
    FinishReason.STOP: "stop",
    FinishReason.MAX_TOKENS: "length",
    FinishReason.CONTEXT: "length",
}
OWNER = "fleetgui"


def finish_reason(result: GenerationResult) -> str:
    return FINISH_REASONS.get(result.finish_reason, "stop")


def usage(result: GenerationResult) -> dict[str, Any]:
    """OpenAI's usage object; ``cached_tokens``: the prompt tokens whose KV an earlier request
    left on the fleet (not computed again)."""
    completion = len(result.token_ids)
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": result.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
    }


def model_object(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


@dataclass
class Answer:
    """One request's answer: its id, creation time and model, shared by all its chunks."""

    model: str
    chat: bool
    include_usage: bool = False  # then every chunk but the usage one says "usage": null
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(12)

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    # -- whole answers ------------------------------------------------------------------------

    def complete(
        self, result: GenerationResult, parsed: ParsedAnswer | None = None
    ) -> dict[str, Any]:
        """The non-streamed answer (``parsed``: its text and calls, when tools were offered)."""
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": result.text}
            finish = finish_reason(result)
            if parsed is not None:
                message["content"] = parsed.content
                if parsed.calls:
                    message["tool_calls"] = [call.as_openai() for call in parsed.calls]
                    finish = "tool_calls"
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish,
            }
            head = self._head("chat.completion")
        else:
            choice = {
                "index": 0,
                "text": result.text,
                "logprobs": None,
                "finish_reason": finish_reason(result),
            }
            head = self._head("text_completion")
        return {**head, "choices": [choice], "usage": usage(result), "system_fingerprint": None}

    # -- chunks -------------------------------------------------------------------------------

    def chunk(self, text: str, *, first: bool = False, finish: str | None = None) -> dict[str, Any]:
        """A streamed piece of text (a chat's first chunk also carries the role)."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {}
            if not first and (text or finish is None):
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta}
            head = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text}
            head = self._head("text_completion")
        choice["logprobs"] = None
        choice["finish_reason"] = finish
        out = {**head, "choices": [choice], "system_fingerprint": None}
        if self.include_usage:
            out["usage"] = None
        return out

    def tool_call_chunk(self, index: int, call: ToolCall) -> dict[str, Any]:
        """A streamed call: its id, name and arguments in one delta (OpenAI may split the
        arguments over several; clients join them either way)."""
        delta = {"tool_calls": [{"index": index, **call.as_openai()}]}
        out = {
            **self._head("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
            "system_fingerprint": None,
        }
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, result: GenerationResult) -> dict[str, Any]:
        """``stream_options.include_usage``'s last chunk: no choices, the usage."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage(result)}
