"""Anthropic's Messages API (``/v1/messages``), as the official ``anthropic`` SDK and Claude
Code use it: a message is the chat completion its request amounts to, in Anthropic's shapes.

On the real SmolLM2 (2 fp32 stages, greedy, the KV of finished requests kept): a message's
text, usage and stop reason are the equivalent chat completion's; its stream builds the same
message; tools come back as ``tool_use`` blocks whose input validates, and ``tool_result``
blocks go back in; what Claude Code sends (system blocks with cache control, system notes
among the messages, a tool schema with a keyword the grammar engine lacks) is answered;
``count_tokens`` counts the prompt; errors and the key are Anthropic's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from serve_support import in_process_server

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.slow

MODEL = "tiny"  # what in_process_server serves the export as
KEY = "messages-key"
SYSTEM = "Answer in one short sentence."
ASK = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"extra_body": {"temperature": 0}}  # this SDK has no temperature argument
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city now.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def server(smollm2_fp32_exports: dict[int, Path]) -> Iterator[Any]:
    with in_process_server(smollm2_fp32_exports[2], kv_reuse=True, api_key=KEY) as (server, _):
        yield server


@pytest.fixture
def client(server: Any) -> Any:
    return anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key=KEY, max_retries=0)


def chat(server: Any, messages: list[dict[str, Any]], max_tokens: int, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    return client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens, **extra
    ).choices[0]


def test_a_message_is_the_chat_completion_it_amounts_to(client: Any, server: Any) -> None:
    message = client.messages.create(
        model=MODEL, max_tokens=48, system=SYSTEM, messages=ASK, **GREEDY
    )
    expected = chat(server, [{"role": "system", "content": SYSTEM}, *ASK], 48)
    [block] = message.content
    assert block.type == "text" and block.text == expected.message.content
    assert message.stop_reason == "end_turn" and "Paris" in block.text
    cut = client.messages.create(model=MODEL, max_tokens=3, messages=ASK, **GREEDY)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    count = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=ASK)
    usage = message.usage
    assert count.input_tokens == usage.input_tokens + usage.cache_read_input_tokens


def test_its_stream_builds_the_same_message(client: Any) -> None:
    whole = client.messages.create(
        model=MODEL, max_tokens=48, system=SYSTEM, messages=ASK, **GREEDY
    )
    kinds = []
    with client.messages.stream(
        model=MODEL, max_tokens=48, system=SYSTEM, messages=ASK, **GREEDY
    ) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert final.content[0].text == whole.content[0].text and final.stop_reason == "end_turn"
    # the second time, the prompt's KV was still on the fleet
    assert final.usage.cache_read_input_tokens > 0


def test_tool_use_and_tool_results(client: Any, server: Any) -> None:
    ask = {
        "model": MODEL,
        "max_tokens": 80,
        "messages": [{"role": "user", "content": "What is the weather in Paris right now?"}],
        "tools": [WEATHER],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        **GREEDY,
    }
    message = client.messages.create(**ask)
    [use] = message.content
    assert message.stop_reason == "tool_use" and use.type == "tool_use" and use.id
    jsonschema.validate(use.input, WEATHER["input_schema"])
    with client.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert [(b.name, b.input) for b in streamed.content] == [(use.name, use.input)]
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "18 C, sunny"}
    messages = [
        *ask["messages"],
        {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
        {"role": "user", "content": [result]},
    ]
    answer = client.messages.create(
        model=MODEL, max_tokens=60, messages=messages, tools=[WEATHER], **GREEDY
    )
    arguments = json.dumps(use.input)
    call = {
        "id": use.id,
        "type": "function",
        "function": {"name": use.name, "arguments": arguments},
    }
    function = {"name": WEATHER["name"], "description": WEATHER["description"]}
    tools = [{"type": "function", "function": {**function, "parameters": WEATHER["input_schema"]}}]
    expected = chat(
        server,
        [
            *ask["messages"],
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": use.id, "content": "18 C, sunny"},
        ],
        60,
        tools=tools,
    ).message
    got_text = "".join(b.text for b in answer.content if b.type == "text")
    assert got_text == (expected.content or "")
    got_calls = [(b.name, b.input) for b in answer.content if b.type == "tool_use"]
    want = [(c.function.name, json.loads(c.function.arguments)) for c in expected.tool_calls or []]
    assert got_calls == want


def test_what_claude_code_sends(client: Any) -> None:
    """System blocks with cache control, a system note among the messages, and a tool whose
    schema uses ``propertyNames`` (which llguidance does not implement: left out of the
    constraint, not a 400)."""
    edit = {
        "name": "edit",
        "description": "Edit files.",
        "input_schema": {
            "type": "object",
            "properties": {
                "files": {
                    "type": "object",
                    "propertyNames": {"pattern": "^[a-z]+$"},
                    "additionalProperties": {"type": "string", "maxLength": 20},
                    "maxProperties": 2,
                }
            },
            "required": ["files"],
        },
    }
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Write hello into a.txt."}]},
        {"role": "system", "content": "The working directory is /tmp."},
        {"role": "user", "content": "Go."},
    ]
    message = client.messages.create(
        model=MODEL,
        max_tokens=80,
        system=system,
        messages=messages,
        tools=[edit],
        tool_choice={"type": "tool", "name": "edit"},
        metadata={"user_id": "someone"},
        **GREEDY,
    )
    [use] = message.content
    assert use.type == "tool_use" and use.name == "edit"
    schema = dict(edit["input_schema"])
    jsonschema.validate(use.input, {**schema, "properties": {"files": {"type": "object"}}})


def test_an_answer_in_a_json_schema(client: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    }
    message = client.messages.create(
        model=MODEL,
        max_tokens=40,
        messages=[{"role": "user", "content": "A city in Italy, as JSON."}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
        **GREEDY,
    )
    jsonschema.validate(json.loads(message.content[0].text), schema)


def test_errors_and_the_key_are_anthropics(client: Any, server: Any) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": [image]}]
        )
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "messages[0].content[0]" in refused.value.body["error"]["message"]
    stranger = anthropic.Anthropic(
        base_url=server.url.removesuffix("/v1"), api_key="wrong", max_retries=0
    )
    with pytest.raises(anthropic.AuthenticationError) as denied:
        stranger.messages.create(model=MODEL, max_tokens=8, messages=ASK)
    assert denied.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=ASK)
