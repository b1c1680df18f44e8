"""Tool calls streamed as they are written: the pieces joined are the calls."""

from __future__ import annotations

import json
import re

import pytest

from fleetgui.runtime.call_stream import CallDelta, CallStream, json_object_end
from fleetgui.runtime.tool_calls import ToolCall

GENERIC = (
    '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris \\"}{\\" x", '
    '"days": [1, {"a": 2}]}}, {"name": "get_time", "arguments": {}}]}'
)
HERMES = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call>'
)
LLAMA3 = '{"name": "get_time", "parameters": {"city": "Rome"}}'


def joined(pieces: list[CallDelta]) -> list[dict[str, str]]:
    """The calls as a client joins their deltas."""
    calls: dict[int, dict[str, str]] = {}
    for piece in pieces:
        call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
        if piece.call is not None:
            assert not call["id"], "a call starts once"
            call.update(id=piece.call.id, name=piece.call.name)
            assert piece.call.arguments == ""
        call["arguments"] += piece.arguments
    return [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize(("text", "generic"), [(GENERIC, True), (HERMES, False), (LLAMA3, False)])
def test_char_by_char_the_pieces_join_into_the_calls(text: str, generic: bool) -> None:
    stream = CallStream(generic=generic)
    pieces: list[CallDelta] = []
    name_seen_at = []
    for end in range(1, len(text) + 1):
        new = stream.update(text[:end])
        pieces += new
        name_seen_at += [end for p in new if p.call is not None]
    calls = joined(pieces)
    expected = [(m["name"], m.get("arguments", m.get("parameters"))) for m in _objects(text)]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == expected
    # a call starts as soon as its name is written, before its arguments are
    assert all(
        text.find(c["name"]) + len(c["name"]) < at
        for c, at in zip(calls, name_seen_at, strict=True)
    )
    assert len(pieces) > 2 * len(calls)  # the arguments came in many fragments
    assert stream.finish([ToolCall(c["id"], c["name"], c["arguments"]) for c in calls]) == []


def _objects(text: str) -> list[dict[str, object]]:
    if text.startswith('{"tool_calls"'):
        return list(json.loads(text)["tool_calls"])
    if text.startswith("<tool_call>"):
        return [json.loads(body) for body in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text)]
    return [json.loads(text)]


def test_a_generic_direct_response_is_no_call_even_if_it_quotes_one() -> None:
    text = '{"response": "say {\\"name\\": \\"x\\", \\"arguments\\": {}} to call"}'
    stream = CallStream(generic=True)
    assert all(stream.update(text[:end]) == [] for end in range(len(text) + 1))


def test_calls_not_streamed_are_sent_whole_at_the_end() -> None:
    stream = CallStream(generic=False)
    assert stream.update('{"name": "get_ti') == []  # the name is not complete yet
    late = ToolCall("abcdefghi", "get_time", '{"city": "Rome"}')
    pieces = stream.finish([late])
    assert joined(pieces) == [
        {"id": "abcdefghi", "name": "get_time", "arguments": '{"city": "Rome"}'}
    ]


@pytest.mark.parametrize(
    ("text", "end"),
    [('{"a": "}"}', 10), ('{"a": {"b": [1, {}]}} tail', 21), ('{"a": "\\"}"', None), ("{", None)],
)
def test_where_a_json_object_ends(text: str, end: int | None) -> None:
    assert json_object_end(text, 0) == end
