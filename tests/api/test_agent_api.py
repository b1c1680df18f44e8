"""What agents ask of ``fleetgui serve``, with the official ``openai`` client: function calling,
continuing the assistant's message and log-probabilities.

The real SmolLM2 (2 fp32 stages, the last on a real worker process) has no tool syntax in its
chat template, so it gets the generic tool prompt and a grammar: its calls always parse and
their arguments validate against the function's schema, with ``tool_choice`` "required", a
named function and "auto", streamed or not, and a conversation goes on after a tool's result. A
tiny model given Qwen 2.5's template answers in Hermes ``<tool_call>`` blocks, and given
Llama 3.1's as a JSON object with "parameters", parsed into the same calls. Bad tools are
400s naming the field. A chat that ends with the assistant's message gets that message
continued (Open WebUI's "Continue response"). Log-probabilities, streamed
or not, on chat and completions, are the unsplit transformers model's within 1e-4.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fleet_support import running_workers
from runtime_support import export
from serve_support import KEY, Served, fleet_args, in_process_server, serving

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
N_TOKENS = 80


@pytest.fixture(scope="module")
def served(
    smollm2_fp32_exports: dict[int, Path], root: Path, authorized_keys: Path, identity_dir: Path
) -> Iterator[Served]:
    with running_workers(root / "tool-workers", ["t1"], authorized_keys) as workers:
        args = [*fleet_args(workers, identity_dir), "--mode", "pp+mb", "--api-key", KEY]
        with serving(root / "tools-serve", smollm2_fp32_exports[2], *args) as server:
            yield server


def ask(
    served: Served,
    messages: list[dict[str, Any]] = ASK,
    max_tokens: int = N_TOKENS,
    **extra: Any,
) -> Any:
    return served.client().chat.completions.create(
        model=served.name, messages=messages, temperature=0, max_tokens=max_tokens, **extra
    )


def check_calls(calls: Any, names: set[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Each call's name and arguments, which must validate against its function's schema."""
    out = []
    for call in calls:
        assert call.type == "function" and call.id
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        out.append((call.function.name, arguments))
    assert out and (names is None or {n for n, _ in out} <= names)
    return out


def streamed(stream: Any) -> tuple[str, list[dict[str, Any]], str | None, int]:
    """A streamed answer's text, its calls joined from their deltas as clients join them (with
    how many deltas each came in), its finish reason, and how many chunks carried text."""
    text, calls, finish, pieces = "", {}, None, 0
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                text += choice.delta.content
                pieces += 1
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(
                    delta.index, {"id": "", "name": "", "arguments": "", "deltas": 0}
                )
                call["id"] += delta.id or ""
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
                call["deltas"] += 1
            finish = choice.finish_reason or finish
    return text, [calls[i] for i in sorted(calls)], finish, pieces


def test_required_and_named_calls_are_well_formed_streamed_or_not(served: Served) -> None:
    required = ask(served, tools=TOOLS, tool_choice="required")
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    check_calls(choice.message.tool_calls)
    named = ask(
        served,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=False,
    )
    (call,) = named.choices[0].message.tool_calls  # one call, not parallel
    assert check_calls([call], {"get_time"})
    text, calls, finish, _ = streamed(ask(served, tools=TOOLS, tool_choice="required", stream=True))
    assert finish == "tool_calls" and text == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == check_calls(
        choice.message.tool_calls
    )
    # as OpenAI streams them: the id and name first, then the arguments as they are written
    assert all(c["deltas"] > 3 and len(c["id"]) == 9 for c in calls), calls


def test_auto_answers_or_calls_and_the_conversation_goes_on_after_a_result(
    served: Served,
) -> None:
    first = ask(served, tools=TOOLS)
    message = first.choices[0].message
    if message.tool_calls:
        check_calls(message.tool_calls)
        calls = [c.model_dump() for c in message.tool_calls]
    else:  # it answered in words: the next turn still carries an earlier call
        assert message.content and first.choices[0].finish_reason == "stop"
        calls = [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ]
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": c["id"], "content": '{"celsius": 18, "sky": "clear"}'}
            for c in calls
        ),
    ]
    second = ask(served, history, tools=TOOLS)
    answer = second.choices[0].message
    assert answer.content or answer.tool_calls
    if answer.tool_calls:
        check_calls(answer.tool_calls)
    # streamed, "auto" sends the same answer, and words as they come
    text, streamed_calls, finish, pieces = streamed(ask(served, history, tools=TOOLS, stream=True))
    if answer.content:
        assert text == answer.content and finish == "stop" and pieces > 1
    else:
        assert [c["name"] for c in streamed_calls] == [c.function.name for c in answer.tool_calls]
    # "none": the tools are not shown, the answer is the one without tools
    none = ask(served, tools=TOOLS, tool_choice="none")
    without = ask(served)
    assert none.choices[0].message.content == without.choices[0].message.content
    assert not none.choices[0].message.tool_calls


def test_bad_tools_are_400s_naming_the_field(served: Served) -> None:
    cases = [
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]},
         "tools[0].function.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
    ]  # fmt: skip
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            ask(served, **extra)
        assert refused.value.body["param"] == param, refused.value.message


@pytest.fixture(scope="module", params=["qwen2.5", "llama-3.1"])
def tool_template_export(
    request: pytest.FixtureRequest, tiny_models: Callable[..., Path], root: Path
) -> Path:
    """The tiny Llama given Qwen 2.5's template (a model that calls in <tool_call> blocks) or
    Llama 3.1's (a JSON object with "parameters" as its whole answer)."""
    name = request.param
    model = root / f"{name}-model"
    shutil.copytree(tiny_models("llama"), model)
    shutil.copy(TEMPLATES / f"{name}.jinja", model / "chat_template.jinja")
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 2048  # room for a long tool prompt
    (model / "config.json").write_text(json.dumps(config))
    return export(model, root / f"{name}-2s", stages=2)


def test_a_model_with_a_tool_template_calls_in_its_own_syntax(tool_template_export: Path) -> None:
    with in_process_server(tool_template_export) as (server, _):
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        body = {"model": "tiny", "messages": ASK, "temperature": 0, "max_tokens": 400}
        tools = [TIME]
        one = {"tools": tools, "tool_choice": "required", "parallel_tool_calls": False}
        whole = client.chat.completions.create(**body, **one)
        _, calls, finish, _ = streamed(client.chat.completions.create(**body, **one, stream=True))
    choice = whole.choices[0]
    assert choice.finish_reason == finish == "tool_calls"
    named = check_calls(choice.message.tool_calls)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == named


def test_a_chat_ending_with_the_assistants_message_continues_it(served: Served) -> None:
    question = [{"role": "user", "content": "Tell me about the Eiffel Tower."}]
    whole = ask(served, question, max_tokens=32).choices[0].message.content
    words = whole.split(" ")
    head = " ".join(words[: len(words) // 2])  # cut before a word: the tokens stay the same
    go_on = ask(served, [*question, {"role": "assistant", "content": head}], max_tokens=32)
    rest = go_on.choices[0].message.content
    assert (head + rest).startswith(whole[: len(head) + 20]), (head, rest, whole)
    assert go_on.usage.prompt_tokens_details.cached_tokens > 0  # the first answer's KV
    new_turn = ask(
        served,
        [*question, {"role": "assistant", "content": head}],
        max_tokens=8,
        extra_body={"continue_final_message": False},
    )  # asked not to continue: a new assistant turn after it
    assert not (head + new_turn.choices[0].message.content).startswith(whole[: len(head) + 8])


@pytest.fixture(scope="module")
def unsplit(smollm2_gguf: Path, smollm2_fp32_exports: dict[int, Path]) -> Callable[..., Any]:
    """The unsplit model's (transformers, fp32) greedy answer to a chat: each token's text,
    log-probability and top 3, as OpenAI lists them."""
    import torch
    from transformers import AutoModelForCausalLM

    from fleetgui.export.transformers_gguf import load_gguf_model
    from fleetgui.runtime.chat_prompt import ChatPrompter
    from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

    model = load_gguf_model(AutoModelForCausalLM, smollm2_gguf, dtype=torch.float32)
    tokenizer = Tokenizer(tokenizer_dir_of(smollm2_fp32_exports[2]))
    prompter = ChatPrompter.for_tokenizer(tokenizer)

    def answer(messages: list[dict[str, Any]], n: int) -> list[tuple[str, float, list[str]]]:
        ids = torch.tensor([tokenizer.encode(prompter.text(messages))])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=[2])
            logits = model(out).logits[0, ids.shape[1] - 1 : -1].double()
        logp = torch.log_softmax(logits, -1)
        tokens = out[0, ids.shape[1] :].tolist()
        if tokens[-1] == 2:  # the end of the turn is not a token of the answer
            tokens.pop()
        return [
            (
                tokenizer.decode([t]),
                float(logp[i, t]),
                [tokenizer.decode([int(j)]) for j in logp[i].topk(3).indices],
            )
            for i, t in enumerate(tokens)
        ]

    return answer


def test_logprobs_are_the_unsplit_models_streamed_or_not(
    served: Served, unsplit: Callable[..., Any]
) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    want = unsplit(question, 12)
    whole = ask(served, question, max_tokens=12, logprobs=True, top_logprobs=3)
    got = whole.choices[0].logprobs.content
    assert [g.token for g in got] == [w[0] for w in want]
    for entry, (_, logprob, top) in zip(got, want, strict=True):
        assert entry.logprob == pytest.approx(logprob, abs=1e-4)
        assert [t.token for t in entry.top_logprobs] == top  # most likely first
        assert entry.top_logprobs[0].token == entry.token  # greedy took the most likely
        assert bytes(entry.bytes).decode() == entry.token
    stream = ask(served, question, max_tokens=12, logprobs=True, top_logprobs=3, stream=True)
    pieces = [c.choices[0].logprobs for c in stream if c.choices and c.choices[0].logprobs]
    streamed = [entry for piece in pieces for entry in piece.content]
    assert [e.token for e in streamed] == [g.token for g in got]
    # the second ask reuses the first's KV, so its first pass differs in shape: same 1e-4
    assert [e.logprob for e in streamed] == pytest.approx([g.logprob for g in got], abs=1e-4)
    # completions: the parallel lists, the text's offsets
    completion = served.client().completions.create(
        model=served.name, prompt="The capital of France is", max_tokens=6, temperature=0,
        logprobs=2,
    )  # fmt: skip
    lists = completion.choices[0].logprobs
    assert "".join(lists.tokens) == completion.choices[0].text
    assert lists.text_offset == [sum(map(len, lists.tokens[:i])) for i in range(len(lists.tokens))]
    assert all(len(top) == 2 and max(top.values()) <= 0 for top in lists.top_logprobs)
    without = ask(served, question, max_tokens=12)
    assert without.choices[0].logprobs is None
    assert without.choices[0].message.content == whole.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as refused:
        ask(served, question, top_logprobs=3)  # without logprobs: true
    assert refused.value.body["param"] == "top_logprobs"
