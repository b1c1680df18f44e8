"""Function calling's parts on real chat templates (Qwen 2.5, Llama 3.1/3.2, Mistral v0.3,
SmolLM2): which call syntax a template teaches, the tools and earlier calls rendered into its
prompt, the grammar that makes a required call well formed (checked by llguidance token by
token on SmolLM2's vocabulary), and calls parsed back out of answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetgui.runtime.chat_template import ChatTemplate
from fleetgui.runtime.constraint import GrammarEngine, grammar_of_schema
from fleetgui.runtime.tokenizer import Tokenizer
from fleetgui.runtime.tool_calls import (
    ChoiceMode,
    Tool,
    ToolChoice,
    ToolFormat,
    ToolSpec,
    parse_answer,
    tool_format,
)
from fleetgui.runtime.tool_prompt import call_grammar, prompt_messages

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
WEATHER = Tool(
    "get_weather",
    "The weather in a city now.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
TIME = Tool("get_time", "The time in a timezone.", {"type": "object", "properties": {}})
TOOLS = (WEATHER, TIME)
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "aB3dE5fG7",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "aB3dE5fG7", "content": '{"celsius": 18}'},
]


def template(name: str) -> ChatTemplate:
    source = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    return ChatTemplate(source, {"bos_token": "<s>", "eos_token": "</s>"}, origin=name)


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("qwen2.5", ToolFormat.HERMES),
        ("llama-3.1", ToolFormat.LLAMA3),
        ("llama-3.2", ToolFormat.LLAMA3),
        ("mistral-v0.3", ToolFormat.MISTRAL),
        ("smollm2", ToolFormat.GENERIC),
        ("gemma-3", ToolFormat.GENERIC),
    ],
)
def test_the_template_says_how_its_model_calls_and_renders_tools_and_calls(
    name: str, fmt: ToolFormat
) -> None:
    chat = template(name)
    assert tool_format(chat.source) is fmt
    spec = ToolSpec(TOOLS)
    history = HISTORY if fmt is not ToolFormat.LLAMA3 else HISTORY[1:]  # its system is its own
    tools = [t.as_openai() for t in TOOLS] if fmt is not ToolFormat.GENERIC else None
    prompt = chat.render(prompt_messages(history, spec, fmt), tools=tools)
    assert "get_weather" in prompt and "The weather in a city now." in prompt
    assert "Paris" in prompt and "18" in prompt  # the earlier call and its result
    if fmt is ToolFormat.GENERIC:
        assert '"tool_calls"' in prompt and '"response"' in prompt  # the answer's shape
    none = ToolSpec(TOOLS, ToolChoice(ChoiceMode.NONE))
    plain = chat.render(prompt_messages(HISTORY[:2], none, fmt))
    assert "get_weather" not in plain  # "none": no tools shown


def follows(
    smollm2_grammar: tuple[GrammarEngine, Tokenizer], spec: ToolSpec, fmt: ToolFormat, text: str
) -> bool:
    """Whether the grammar ``call_grammar`` makes lets the model write ``text`` and end."""
    grammar_engine, tokenizer = smollm2_grammar
    lark, schema = call_grammar(spec, fmt)
    grammar = lark if lark is not None else grammar_of_schema(schema or {})
    grammar_engine.check(grammar)
    constraint = grammar_engine.constraint(grammar)
    vocab = grammar_engine.tokenizer.vocab_size
    for token in tokenizer.encode(text):
        if not constraint.mask().allowed(vocab)[0][token]:
            return False
        constraint.accept([token])
    allowed = constraint.mask().allowed(vocab)[0]
    return bool(allowed[sorted(tokenizer.eos_token_ids)].any())


def test_a_required_call_is_well_formed_in_every_format(smollm2_grammar: Any) -> None:
    required = ToolSpec(TOOLS, ToolChoice(ChoiceMode.REQUIRED))
    named = ToolSpec(TOOLS, ToolChoice(ChoiceMode.FUNCTION, "get_time"), parallel=False)
    hermes = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert follows(smollm2_grammar, required, ToolFormat.HERMES, hermes)
    assert follows(smollm2_grammar, required, ToolFormat.HERMES, f"{hermes}\n{hermes}")  # parallel
    assert not follows(smollm2_grammar, required, ToolFormat.HERMES, hermes.replace("city", "town"))
    assert not follows(smollm2_grammar, required, ToolFormat.HERMES, "Sure! " + hermes)
    llama = '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "C"}}'
    assert follows(smollm2_grammar, required, ToolFormat.LLAMA3, llama)
    assert not follows(smollm2_grammar, required, ToolFormat.LLAMA3, llama.replace('"C"', '"K"'))
    generic = '{"tool_calls": [{"name": "get_time", "arguments": {}}]}'
    assert follows(smollm2_grammar, named, ToolFormat.GENERIC, generic)
    assert not follows(
        smollm2_grammar, named, ToolFormat.GENERIC, generic.replace("get_time", "get_weather")
    )
    time_call = '{"name": "get_time", "arguments": {}}'
    two = f'{{"tool_calls": [{time_call}, {time_call}]}}'
    assert not follows(smollm2_grammar, named, ToolFormat.GENERIC, two)  # parallel_tool_calls false
    auto = ToolSpec(TOOLS)
    assert follows(smollm2_grammar, auto, ToolFormat.GENERIC, '{"response": "Hello!"}')
    assert not follows(smollm2_grammar, required, ToolFormat.GENERIC, '{"response": "Hello!"}')
    assert call_grammar(auto, ToolFormat.HERMES) == (None, None)  # free, parsed after


def test_calls_are_parsed_from_each_format_and_anything_else_stays_text() -> None:
    spec = ToolSpec(TOOLS)
    rome = '{"name": "get_weather", "arguments": {"city": "Rome"}}'
    cases = {
        ToolFormat.HERMES: f"Let me check.\n<tool_call>\n{rome}\n</tool_call>",
        ToolFormat.LLAMA3: rome.replace("arguments", "parameters"),
        ToolFormat.MISTRAL: f"[TOOL_CALLS] [{rome}]",
        ToolFormat.GENERIC: f'{{"tool_calls": [{rome}]}}',
    }
    for fmt, text in cases.items():
        parsed = parse_answer(text, spec, fmt)
        (call,) = parsed.calls
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Rome"}), fmt
        assert len(call.id) == 9 and call.id.isalnum()  # Mistral's template insists
        assert parsed.content == ("Let me check." if fmt is ToolFormat.HERMES else None)
    assert parse_answer('{"response": "It is sunny."}', spec, ToolFormat.GENERIC).content == (
        "It is sunny."
    )
    for fmt, text in [
        (ToolFormat.HERMES, "<tool_call>\n{not json}\n</tool_call>"),
        (ToolFormat.LLAMA3, '{"name": "launch_rockets", "parameters": {}}'),  # no such tool
        (ToolFormat.LLAMA3, "Rome is sunny."),
    ]:
        assert (
            parse_answer(text, spec, fmt).content == text
            and not parse_answer(text, spec, fmt).calls
        )


def test_a_call_gives_only_the_arguments_its_function_declares() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    free = Tool("get_time", "", {"type": "object", "properties": {"city": {"type": "string"}}})
    open_ended = Tool("log", "", {"type": "object", "additionalProperties": True})
    spec = ToolSpec((free, open_ended), ToolChoice(ChoiceMode.REQUIRED))
    _, schema = call_grammar(spec, ToolFormat.GENERIC)
    assert schema is not None

    def valid(name: str, arguments: dict[str, Any]) -> bool:
        answer = {"tool_calls": [{"name": name, "arguments": arguments}]}
        return jsonschema.Draft202012Validator(schema).is_valid(answer)

    assert valid("get_time", {"city": "Rome"})
    assert not valid("get_time", {"city": "Rome", "country": "Italy"})  # not declared
    assert valid("log", {"anything": 1})  # its schema allows more: kept
    assert free.schema.get("additionalProperties") is None  # the tool itself is unchanged
