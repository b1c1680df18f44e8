"""How a ``/v1/messages`` body is read as the chat request it amounts to, and what is refused
(each a 400 naming the field)."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgui.api.errors import ApiError
from fleetgui.api.messages_request import parse_messages

SERVED = "m"
USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}


def test_blocks_become_chat_messages() -> None:
    gen = parse_messages(
        {
            "model": SERVED,
            "max_tokens": 9,
            "system": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}],
            "messages": [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "...", "signature": "x"},
                    {"type": "text", "text": "Let me look."}, USE]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "R1"},
                    {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                     "content": [{"type": "text", "text": "boom"}]},
                    {"type": "text", "text": "And now?"}]},
            ],
            "stop_sequences": ["END"],
            "tools": [{"name": "f", "input_schema": {"type": "object"}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        },
        SERVED,
    )  # fmt: skip
    assert gen.messages is not None
    roles = [m["role"] for m in gen.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    assert gen.messages[0]["content"] == "S1\n\nS2"
    assert gen.messages[2]["content"] == "Let me look."
    assert gen.messages[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert [m["content"] for m in gen.messages[3:]] == ["R1", "Error: boom", "And now?"]
    assert gen.max_tokens == 9 and gen.config.stop == ("END",)
    assert gen.tools is not None and [t.name for t in gen.tools.tools] == ["f"]
    assert gen.tools.must_call and not gen.tools.parallel


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "document"}]}]},
         "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
         "messages[0].content[0].tool_use_id"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "stop_sequences": ["a"] * 5},
         "stop_sequences"),
        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "some"}},
         "tool_choice"),
        ({"messages": [{"role": "user", "content": "x"}], "output_config": {"format": "json"}},
         "output_config.format"),
    ],
)  # fmt: skip
def test_refused_with_the_field_named(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_messages({"model": SERVED, **body}, SERVED)
    assert refused.value.status == 400 and refused.value.param == param, refused.value.message
