"""Tool calls streamed as they are written, as OpenAI streams them: a call's first delta gives
its index, id and name as soon as the name is complete, and the next ones its arguments' JSON
text as it grows.

Only for answers a grammar constrains (the generic format, ``tool_choice`` "required" or a
named function): there every call is well formed and in order (``name`` before its arguments,
as the schema lists them), so what is sent early is never taken back. A model writing its own
syntax freely may turn out not to call at all; its calls are sent whole at the end instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from fleetgui.runtime.tool_calls import ToolCall

#: a call's name, then the key of its arguments (generic, Hermes, Mistral) or parameters
#: (Llama 3), up to where the arguments' object begins
NAME_THEN_ARGUMENTS = re.compile(
    r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)'
)
#: the generic format's answer is calls only when it starts so (else a direct response)
GENERIC_CALLS = re.compile(r'\s*\{\s*"tool_calls"\s*:')


@dataclass
class CallDelta:
    """One streamed piece of call ``index``: its start (``call`` given: id and name, empty
    arguments) or a fragment of its arguments."""

    index: int
    call: ToolCall | None = None
    arguments: str = ""


@dataclass
class _Streamed:
    call: ToolCall
    sent: int = 0  # characters of the arguments' text sent


class CallStream:
    """Follows an answer in progress and says what of its calls is new (see module doc)."""

    def __init__(self, *, generic: bool) -> None:
        self.generic = generic
        self.calls: list[_Streamed] = []
        self.complete = 0  # calls whose arguments are complete
        self.complete_end = 0  # where the last of them ends in the answer

    def update(self, text: str) -> list[CallDelta]:
        """The new pieces of calls in ``text`` (the whole answer so far)."""
        if self.generic and not GENERIC_CALLS.match(text):
            return []
        out: list[CallDelta] = []
        # calls already complete are not read again: the scan goes on after the last one
        index, pos = self.complete, self.complete_end
        while found := NAME_THEN_ARGUMENTS.search(text, pos):
            start = found.end()
            end = json_object_end(text, start)
            if index == len(self.calls):
                call = ToolCall.new(json.loads(f'"{found.group(1)}"'), "")
                self.calls.append(_Streamed(call))
                out.append(CallDelta(index, call))
            streamed = self.calls[index]
            raw = text[start : end if end is not None else len(text)]
            if len(raw) > streamed.sent:
                out.append(CallDelta(index, arguments=raw[streamed.sent :]))
                streamed.sent = len(raw)
            if end is None:
                break
            index, pos = index + 1, end
            self.complete, self.complete_end = index, end
        return out

    def finish(self, calls: list[ToolCall]) -> list[CallDelta]:
        """What of the answer's parsed ``calls`` was not streamed, at its end (a call not
        begun is sent whole)."""
        out: list[CallDelta] = []
        for index, call in enumerate(calls):
            if index < len(self.calls) and self.calls[index].call.name == call.name:
                continue
            out.append(CallDelta(index, ToolCall(call.id, call.name, "")))
            out.append(CallDelta(index, arguments=call.arguments))
        return out


def json_object_end(text: str, start: int) -> int | None:
    """Where the JSON object starting at ``text[start]`` ends (the index after its ``}``), or
    None while it is not complete."""
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        char = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None
