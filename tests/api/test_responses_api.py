"""OpenAI's Responses API (``/v1/responses``), as the official ``openai`` client and its stream
helper use it: the agent tooling that speaks it (OpenAI's Agents SDK, Codex) sends requests
that the server answers as the chat completions they amount to.

On the real SmolLM2 (2 fp32 stages, greedy, the KV of finished requests kept): a response's
text, usage and finish are the equivalent chat completion's; its stream (every event, in
order, numbered) builds the same response; ``previous_response_id`` continues a stored
response as the resent history would, reusing its KV; function calls come back as
``function_call`` items whose arguments validate, and their outputs go back in as input items;
``text.format`` gives JSON of the schema; log-probabilities are chat's. Bad requests are 400s
naming the field.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from serve_support import in_process_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

MODEL = "tiny"  # what in_process_server serves the export as
INSTRUCTIONS = "Answer in one short sentence."
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
CITY = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40}, "country": {"type": "string"}},
    "required": ["name", "country"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(smollm2_fp32_exports: dict[int, Path]) -> Iterator[Any]:
    with in_process_server(smollm2_fp32_exports[2], kv_reuse=True) as (server, _):
        yield server


@pytest.fixture
def client(server: Any) -> Any:
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)


def chat(client: Any, messages: list[dict[str, Any]], max_tokens: int, **extra: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens, **extra
    )


def respond(client: Any, max_tokens: int, **fields: Any) -> Any:
    return client.responses.create(
        model=MODEL, temperature=0, max_output_tokens=max_tokens, **fields
    )


def test_a_response_is_the_chat_completion_it_amounts_to(client: Any) -> None:
    question = "What is the capital of France?"
    response = respond(client, 48, instructions=INSTRUCTIONS, input=question)
    completion = chat(
        client,
        [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": question}],
        48,
    )
    choice = completion.choices[0]
    assert response.output_text == choice.message.content and "Paris" in response.output_text
    assert response.status == "completed" and choice.finish_reason == "stop"
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert response.usage.input_tokens == completion.usage.prompt_tokens
    assert response.usage.output_tokens == completion.usage.completion_tokens
    assert response.instructions == INSTRUCTIONS and response.max_output_tokens == 48


def test_its_stream_builds_the_same_response_event_by_event(client: Any) -> None:
    fields = {"instructions": INSTRUCTIONS, "input": "Name a large city in Japan."}
    whole = respond(client, 48, **fields)
    events = list(respond(client, 48, stream=True, **fields))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == whole.output_text
    final = events[-1].response
    assert final.output_text == whole.output_text and final.usage.output_tokens > 0
    assert {e.response.id for e in events if e.type.count(".") == 1} == {final.id}
    with client.responses.stream(model=MODEL, temperature=0, **fields) as stream:
        assert stream.get_final_response().output_text == whole.output_text  # the SDK's helper


def test_a_response_cut_at_the_token_limit_is_incomplete(client: Any) -> None:
    whole = respond(client, 4, input="Tell me about the Moon.")
    assert whole.status == "incomplete" and whole.usage.output_tokens == 4
    assert whole.incomplete_details.reason == "max_output_tokens"
    last = list(respond(client, 4, input="Tell me about the Moon.", stream=True))[-1]
    assert last.type == "response.incomplete" and last.response.output_text == whole.output_text


def test_previous_response_id_continues_the_stored_conversation(client: Any) -> None:
    first = respond(client, 48, input="What is the capital of France?")
    second = respond(client, 48, input="And of Germany?", previous_response_id=first.id)
    history = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And of Germany?"},
    ]
    assert second.output_text == chat(client, history, 48).choices[0].message.content
    # the first turn's KV stayed on the stages: only the new turn was computed
    assert second.usage.input_tokens_details.cached_tokens > first.usage.input_tokens
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(second.id).output_text == second.output_text
    client.responses.delete(second.id)
    for gone in (second.id, "resp_unknown"):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(gone)
    with pytest.raises(openai.NotFoundError) as missing:
        respond(client, 8, input="Go on.", previous_response_id=second.id)
    assert missing.value.body["param"] == "previous_response_id"
    unstored = respond(client, 4, input="Hello!", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_function_calls_and_their_outputs(client: Any) -> None:
    ask = {
        "input": "What is the weather in Paris right now?",
        "tools": [WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }
    [call] = respond(client, 80, **ask).output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    events = list(respond(client, 80, stream=True, **ask))
    added = next(e.item for e in events if e.type == "response.output_item.added")
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    [streamed] = events[-1].response.output
    assert added.type == "function_call" and added.call_id == streamed.call_id
    assert deltas == done.arguments == streamed.arguments
    assert json.loads(streamed.arguments) == json.loads(call.arguments)
    # the call and its output go back as input items, as an agent sends them
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}
    items = [{"role": "user", "content": ask["input"]}, call.model_dump(), result]
    answer = respond(client, 60, input=items, tools=[WEATHER])
    function = {"name": call.name, "arguments": call.arguments}
    calls = [{"id": call.call_id, "type": "function", "function": function}]
    messages = [
        {"role": "user", "content": ask["input"]},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": call.call_id, "content": "18 C, sunny"},
    ]
    tools = [{"type": "function", "function": {k: WEATHER[k] for k in WEATHER if k != "type"}}]
    expected = chat(client, messages, 60, tools=tools).choices[0].message
    assert answer.output_text == (expected.content or "")
    got = [(o.name, o.arguments) for o in answer.output if o.type == "function_call"]
    want = [(c.function.name, c.function.arguments) for c in expected.tool_calls or []]
    assert got == want


def test_namespaced_functions_and_hosted_tools_as_codex_offers_them(client: Any) -> None:
    """Codex offers some functions in a namespace, and OpenAI's hosted web search: a call to a
    namespaced function says its namespace; the hosted tool, which nothing here can run, is
    left out of what the model is offered rather than refusing the request."""
    weather = {"type": "namespace", "name": "weather_v1", "description": "", "tools": [WEATHER]}
    ask = {
        "input": "What is the weather in Paris right now?",
        "tools": [weather, {"type": "web_search"}],
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }
    [call] = respond(client, 80, **ask).output
    assert (call.type, call.name, call.namespace) == ("function_call", "get_weather", "weather_v1")
    [streamed] = list(respond(client, 80, stream=True, **ask))[-1].response.output
    assert (streamed.name, streamed.namespace) == ("get_weather", "weather_v1")
    question = "What is the capital of France?"
    offered = respond(client, 48, input=question, tools=[{"type": "web_search"}]).output_text
    assert offered == respond(client, 48, input=question).output_text


def test_a_json_schema_answer(client: Any) -> None:
    form = {"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}}
    response = respond(client, 60, input="Give me a city in Italy as JSON.", text=form)
    jsonschema.validate(json.loads(response.output_text), CITY)
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str
        country: str

    parsed = client.responses.parse(
        model=MODEL, input="A city in Spain, as JSON.", text_format=City, max_output_tokens=60
    )
    assert isinstance(parsed.output_parsed, City) and parsed.output_parsed.name


def test_log_probabilities_are_chats(client: Any) -> None:
    question = [{"role": "user", "content": "Say hello."}]
    response = respond(
        client, 6, input=question, include=["message.output_text.logprobs"], top_logprobs=2
    )
    expected = chat(client, question, 6, logprobs=True, top_logprobs=2).choices[0].logprobs
    got = response.output[0].content[0].logprobs
    assert [(g.token, len(g.top_logprobs)) for g in got] == [
        (e.token, len(e.top_logprobs)) for e in expected.content
    ]
    # the second request reuses the first one's prompt KV, computed in other passes: f32 sums
    # in another order, so equal to f32 rounding, not bit for bit
    assert [g.logprob for g in got] == pytest.approx(
        [e.logprob for e in expected.content], abs=1e-4
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": "Hi", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}},
         "tool_choice"),
        ({"input": "Hi", "tools": [{"type": "namespace", "name": "n", "tools": [{"type": "x"}]}]},
         "tools[0].tools[0]"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content",
        ),
        ({"input": "Hi", "background": True}, "background"),
        ({"input": []}, "input"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
         "input[0].call_id"),
        ({"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
         "text.format.schema"),
        ({"input": "Hi", "tool_choice": "required"}, "tool_choice"),
        ({"input": "Hi", "temperature": "hot"}, "temperature"),
        ({"input": "word " * 5000}, "input"),  # over the context
    ],
)  # fmt: skip
def test_bad_requests_name_the_field(client: Any, fields: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, **fields)
    assert refused.value.body["param"] == param, refused.value.message


def test_openai_agents_sdk_runs_an_agent_with_a_tool(server: Any) -> None:
    """OpenAI's Agents SDK as it is, on its default (Responses) model: the agent calls the
    Python function, streamed or not, and a plain agent answers."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)  # it would send traces to OpenAI
    client = openai.AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0)
    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        asked.append(city)
        return f"18 C and sunny in {city}"

    settings = agents.ModelSettings(
        temperature=0, tool_choice="required", parallel_tool_calls=False, max_tokens=80
    )
    weather = agents.Agent(
        name="weather",
        instructions="Answer the user's question about the weather.",
        model=model,
        tools=[get_weather],
        model_settings=settings,
        tool_use_behavior="stop_on_first_tool",  # a 135M model is no agent: one call is the test
    )
    plain = agents.Agent(
        name="plain",
        instructions=INSTRUCTIONS,
        model=model,
        model_settings=agents.ModelSettings(temperature=0, max_tokens=48),
    )

    async def run() -> tuple[Any, Any, set[str], Any]:  # one loop: the client is bound to it
        ran = await agents.Runner.run(weather, "What is the weather in Paris?")
        streamed = agents.Runner.run_streamed(weather, "What is the weather in Rome?")
        kinds = {event.type async for event in streamed.stream_events()}
        answer = await agents.Runner.run(plain, "What is the capital of France?")
        return ran, streamed, kinds, answer

    ran, streamed, kinds, answer = asyncio.run(run())
    assert ran.final_output == "18 C and sunny in Paris"
    assert streamed.final_output == "18 C and sunny in Rome" and "raw_response_event" in kinds
    assert asked == ["Paris", "Rome"]
    sync = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
    question = "What is the capital of France?"
    expected = respond(sync, 48, instructions=INSTRUCTIONS, input=question).output_text
    assert answer.final_output == expected and "Paris" in expected


def test_a_pipeline_closed_mid_answer_fails_the_answer_rather_than_ending_it(
    smollm2_fp32_exports: dict[int, Path],
) -> None:
    """The model undeployed (or the server stopping) under a streamed answer: the client
    gets an error, on chat as on the Responses API, not an answer that looks finished; the
    text it got stays in the failed response."""
    ask = "Tell me a long story about the sea."
    with in_process_server(smollm2_fp32_exports[2]) as (server, call):
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        events = []
        stream = respond(client, 200, input=ask, stream=True)
        for event in stream:
            events.append(event)
            if event.type == "response.output_text.delta" and len(events) == 6:
                call(server.served.pipeline.close())
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
    failed = events[-1].response
    assert failed.status == "failed" and "closed" in failed.error.message
    [item] = failed.output
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert item.status == "incomplete" and item.content[0].text == text != ""
    with in_process_server(smollm2_fp32_exports[2]) as (server, call):
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        chunks = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": ask}], max_tokens=200, stream=True
        )
        with pytest.raises(openai.APIError, match="closed"):
            for number, _ in enumerate(chunks):
                if number == 4:
                    call(server.served.pipeline.close())
