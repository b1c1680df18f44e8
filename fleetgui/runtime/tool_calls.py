"""Function calling: tools in the prompt, the answer constrained where it must be a call, and
the calls parsed out of the answer.

A model whose chat template knows tools gets them the way it was trained to see them, and its
own call syntax is parsed: Hermes/Qwen ``<tool_call>{...}</tool_call>``, Llama 3.x's bare
``{"name": ..., "parameters": ...}``, Mistral's ``[TOOL_CALLS] [...]``. Any other model (SmolLM2,
a GGUF without a template) gets a generic tool prompt, and its whole answer is constrained to
JSON: ``{"tool_calls": [{"name": ..., "arguments": {...}}]}`` or ``{"response": "..."}`` (with
``tool_choice`` "required" or a named function, only calls), so a call from a model that was
never taught tools is still well formed.

With "required", a named function, or the generic format, each call's arguments are constrained
by the function's parameter schema (llguidance), so they always parse and validate. With "auto"
and a native format the model writes freely and what parses as a call is a call.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: OpenAI's call ids are opaque; Mistral's template insists on 9 letters and digits.
ID_ALPHABET = string.ascii_letters + string.digits
ANY_OBJECT: dict[str, Any] = {"type": "object"}


class ToolFormat(enum.StrEnum):
    """How a model writes a call (from its chat template)."""

    HERMES = "hermes"  # <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call> (Qwen, Hermes)
    LLAMA3 = "llama3"  # {"name": ..., "parameters": ...} as the whole answer (Llama 3.1+)
    MISTRAL = "mistral"  # [TOOL_CALLS] [{"name": ..., "arguments": ...}, ...]
    GENERIC = "generic"  # fleetgui's JSON answer, for models whose template has no tools


def tool_format(template_source: str, *, is_fallback: bool = False) -> ToolFormat:
    """The call syntax a chat template teaches (GENERIC when it has none)."""
    if is_fallback or "tools" not in template_source:
        return ToolFormat.GENERIC
    if "<tool_call>" in template_source:
        return ToolFormat.HERMES
    if "[TOOL_CALLS]" in template_source:
        return ToolFormat.MISTRAL
    if '"parameters"' in template_source or "<|python_tag|>" in template_source:
        return ToolFormat.LLAMA3
    return ToolFormat.GENERIC


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, what it does, and its arguments' schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | None = None  # a JSON schema of the arguments object

    @property
    def schema(self) -> Mapping[str, Any]:
        return self.parameters if self.parameters is not None else ANY_OBJECT

    def as_openai(self) -> dict[str, Any]:
        """The tool as chat templates take it (OpenAI's ``{"type": "function", ...}``)."""
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.schema)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


class ChoiceMode(enum.StrEnum):
    AUTO = "auto"  # the model decides between an answer and calls
    NONE = "none"  # no call: the tools are not shown
    REQUIRED = "required"  # at least one call, of any tool
    FUNCTION = "function"  # a call of the one named function


@dataclass(frozen=True)
class ToolChoice:
    mode: ChoiceMode = ChoiceMode.AUTO
    name: str | None = None  # FUNCTION: which


@dataclass(frozen=True)
class ToolSpec:
    """What a request says about tools: which, which may be called, and if several at once."""

    tools: tuple[Tool, ...]
    choice: ToolChoice = ToolChoice()
    parallel: bool = True

    @property
    def active(self) -> bool:
        """Whether the model is shown tools and may call them."""
        return bool(self.tools) and self.choice.mode is not ChoiceMode.NONE

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools a call may name (just the one, for a named function)."""
        if self.choice.mode is ChoiceMode.FUNCTION:
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return self.tools

    @property
    def must_call(self) -> bool:
        return self.choice.mode in (ChoiceMode.REQUIRED, ChoiceMode.FUNCTION)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object, as OpenAI sends it

    @classmethod
    def new(cls, name: str, arguments: Any) -> ToolCall:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls("".join(secrets.choice(ID_ALPHABET) for _ in range(9)), name, text)

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def loads(text: Any) -> Any:
    """``text`` parsed as JSON, or as it is when it is not JSON (or not text)."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


# -- the answer ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedAnswer:
    content: str | None  # text for the user (None: only calls)
    calls: tuple[ToolCall, ...] = ()


HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_answer(text: str, spec: ToolSpec, fmt: ToolFormat) -> ParsedAnswer:
    """The answer's text and calls. A call that does not parse, or names no known tool, stays
    text: nothing the model wrote is dropped."""
    if not spec.active:
        return ParsedAnswer(text)
    known = {t.name for t in spec.callable}
    if fmt is ToolFormat.GENERIC:
        data = loads(text.strip())
        if isinstance(data, dict) and "response" in data and "tool_calls" not in data:
            response = data["response"]  # text, or JSON of the response_format's schema
            return ParsedAnswer(response if isinstance(response, str) else json.dumps(response))
        calls = _calls(data.get("tool_calls") if isinstance(data, dict) else None, known)
        return ParsedAnswer(None, calls) if calls else ParsedAnswer(text)
    if fmt is ToolFormat.HERMES:
        found = [loads(m.group(1)) for m in HERMES_CALL.finditer(text)]
        calls = _calls(found, known)
        if not calls:
            return ParsedAnswer(text)
        rest = HERMES_CALL.sub("", text).strip()
        return ParsedAnswer(rest or None, calls)
    body = text.strip().removeprefix("<|python_tag|>").removeprefix("[TOOL_CALLS]").strip()
    data = loads(body)
    calls = _calls(data if isinstance(data, list) else [data], known, "parameters")
    return ParsedAnswer(None, calls) if calls else ParsedAnswer(text)


def _calls(items: Any, known: set[str], alt_key: str = "arguments") -> tuple[ToolCall, ...]:
    if not isinstance(items, list) or not items:
        return ()
    calls = []
    for item in items:
        if not isinstance(item, dict) or item.get("name") not in known:
            return ()
        arguments = item.get("arguments", item.get(alt_key, {}))
        if isinstance(arguments, str):
            arguments = loads(arguments)
        if not isinstance(arguments, dict):
            return ()
        calls.append(ToolCall.new(item["name"], arguments))
    return tuple(calls)
