"""The JSON objects the API answers with, shaped as OpenAI's (``chat.completion``,
``chat.completion.chunk``, ``text_completion``, ``model``)."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgui.runtime.call_stream import CallDelta
from fleetgui.runtime.generation import FinishReason, GenerationResult
from fleetgui.runtime.token_logprobs import TokenLogprob
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


def chat_logprob(lp: TokenLogprob, text: Callable[[int], str]) -> dict[str, Any]:
    def item(token: int, logprob: float) -> dict[str, Any]:
        piece = text(token)
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}

    return {**item(lp.token, lp.logprob), "top_logprobs": [item(i, v) for i, v in lp.top]}


def model_object(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


@dataclass
class Answer:
    """One request's answer: its id, creation time and model, shared by all its chunks."""

    model: str
    chat: bool
    include_usage: bool = False  # then every chunk but the usage one says "usage": null
    # the request asked for log-probabilities: each token's text comes from this
    token_text: Callable[[int], str] | None = None
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
                "logprobs": self.logprobs(result.logprobs),
                "finish_reason": finish,
            }
            head = self._head("chat.completion")
        else:
            choice = {
                "index": 0,
                "text": result.text,
                "logprobs": self.logprobs(result.logprobs),
                "finish_reason": finish_reason(result),
            }
            head = self._head("text_completion")
        return {**head, "choices": [choice], "usage": usage(result), "system_fingerprint": None}

    # -- chunks -------------------------------------------------------------------------------

    def chunk(
        self,
        text: str,
        *,
        first: bool = False,
        finish: str | None = None,
        logprobs: Sequence[TokenLogprob] = (),
    ) -> dict[str, Any]:
        """A streamed piece of text (a chat's first chunk also carries the role), with its
        tokens' log-probabilities when they were asked for."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {}
            if not first and (text or finish is None):
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta}
            head = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text}
            head = self._head("text_completion")
        choice["logprobs"] = self.logprobs(logprobs) if logprobs else None
        choice["finish_reason"] = finish
        out = {**head, "choices": [choice], "system_fingerprint": None}
        if self.include_usage:
            out["usage"] = None
        return out

    def logprobs(self, logprobs: Sequence[TokenLogprob]) -> dict[str, Any] | None:
        """OpenAI's ``logprobs`` object for these tokens (None when not asked for): chat's
        ``content`` list, or completions' parallel lists."""
        text = self.token_text
        if text is None:
            return None
        if self.chat:
            return {"content": [chat_logprob(lp, text) for lp in logprobs], "refusal": None}
        texts = [text(lp.token) for lp in logprobs]
        offsets = list(itertools.accumulate((len(t) for t in texts[:-1]), initial=0))
        return {
            "tokens": texts,
            "token_logprobs": [lp.logprob for lp in logprobs],
            "top_logprobs": [{text(i): v for i, v in lp.top} for lp in logprobs],
            "text_offset": offsets if texts else [],
        }

    def tool_call_chunk(self, index: int, call: ToolCall) -> dict[str, Any]:
        """A call in one delta: its id, name and arguments (a model's own syntax, read at
        the answer's end; clients join deltas either way)."""
        return self._calls_chunk({"index": index, **call.as_openai()})

    def call_chunk(self, piece: CallDelta) -> dict[str, Any]:
        """A piece of a call streamed as it is written: its start (id, name, no arguments
        yet) or a fragment of its arguments."""
        if piece.call is not None:
            return self.tool_call_chunk(piece.index, piece.call)
        return self._calls_chunk({"index": piece.index, "function": {"arguments": piece.arguments}})

    def _calls_chunk(self, item: dict[str, Any]) -> dict[str, Any]:
        delta = {"tool_calls": [item]}
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
