"""How a ``/v1/responses`` body is read as the chat request it amounts to: input items as chat
messages (calls joined to the assistant's turn, their outputs as tool messages, what Codex
sends as it sends it), tools and namespaces, the answer's format, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgui.api.errors import ApiError
from fleetgui.api.responses_request import parse_responses

SERVED = "m"
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def read(**body: Any) -> Any:
    return parse_responses({"model": SERVED, **body}, SERVED)


def test_calls_join_the_assistants_turn_and_outputs_are_tool_messages() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    request = read(
        instructions="Be brief.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Let me look."}]},
            call,
            {**call, "call_id": "c2"},
            {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
            {"type": "function_call_output", "call_id": "c2",
             "output": [{"type": "input_text", "text": "19 C"}]},
        ],
        tools=[WEATHER],
    )  # fmt: skip
    messages = request.chat.messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assert messages[0]["content"] == "Be brief." and messages[1]["content"] == "Weather?"
    assistant = messages[2]
    assert assistant["content"] == "Let me look."
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert [(m["tool_call_id"], m["content"]) for m in messages[3:]] == [
        ("c1", "18 C"),
        ("c2", "19 C"),
    ]
    assert request.conversation == messages[1:]  # what a continuation inherits


def test_what_codex_sends() -> None:
    """Developer messages, a namespace of functions, OpenAI's hosted web search, an output no
    call asked for (only a name), reasoning settings and cache keys."""
    namespace = {"type": "namespace", "name": "agents_v1", "tools": [WEATHER]}
    request = read(
        input=[
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "You are a coding agent."}]},
            {"type": "function_call_output", "name": "goal", "namespace": "agent",
             "output": "ship it"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        ],
        tools=[{"type": "function", "name": "exec_command"}, namespace, {"type": "web_search"}],
        tool_choice="auto",
        reasoning={"summary": "auto"},
        include=["reasoning.encrypted_content"],
        store=False,
        prompt_cache_key="k",
        stream=True,
    )  # fmt: skip
    # a developer message is chat's system message
    assert [m["role"] for m in request.chat.messages] == ["system", "tool", "user"]
    assert request.chat.messages[1]["tool_call_id"] == "goal"
    assert request.chat.tools is not None
    assert [t.name for t in request.chat.tools.tools] == ["exec_command", "get_weather"]
    assert request.tools.namespace_of("get_weather") == "agents_v1"
    assert request.tools.namespace_of("exec_command") is None
    assert not request.store and request.chat.stream


def test_the_answers_format_and_limits() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    form = {"format": {"type": "json_schema", "name": "x", "schema": schema}}
    request = read(input="Hi", text=form, max_output_tokens=7, temperature=0.5, top_p=0.9)
    assert request.chat.config.json_schema == schema and request.chat.max_tokens == 7
    assert (request.chat.config.temperature, request.chat.config.top_p) == (0.5, 0.9)
    assert read(input="Hi", text={"format": {"type": "json_object"}}).chat.config.json_schema
    assert read(input="Hi").chat.config.json_schema is None
    logprobs = read(input="Hi", include=["message.output_text.logprobs"], top_logprobs=3)
    assert logprobs.chat.config.logprobs == 3
    continued = parse_responses(
        {"model": SERVED, "input": "And Germany?", "instructions": "Brief."},
        SERVED,
        history=({"role": "user", "content": "France?"}, {"role": "assistant", "content": "P"}),
    )
    assert [m["content"] for m in continued.chat.messages] == [
        "Brief.",
        "France?",
        "P",
        "And Germany?",
    ]
    assert not continued.chat.continue_final
    assert [m["content"] for m in continued.conversation] == ["France?", "P", "And Germany?"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "Hi", "model": "other"}, "model"),
        ({"input": "  "}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
         "input[0].arguments"),
        ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, "input[0].type"),
        ({"input": "Hi", "conversation": "conv_1"}, "conversation"),
        ({"input": "Hi", "prompt": {"id": "p"}}, "prompt"),
        ({"input": "Hi", "tools": [WEATHER], "tool_choice": {"type": "allowed_tools"}},
         "tool_choice"),
        ({"input": "Hi", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "Hi", "store": "yes"}, "store"),
    ],
)  # fmt: skip
def test_refused_with_the_field_named(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_responses({"model": SERVED, **body}, SERVED)
    assert refused.value.status == 400 and refused.value.param == param, refused.value.message
