"""Tools as short signatures in the generic tool prompt, shortened to fit a budget."""

from __future__ import annotations

import pytest

from fleetgui.runtime.tool_calls import Tool
from fleetgui.runtime.tool_signature import describe_tools, signature, type_text


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "string"}, "string"),
        ({"enum": ["c", "f"]}, '"c" | "f"'),
        ({"const": 3}, "3"),
        ({"type": "integer", "minimum": 1, "maximum": 10}, "integer 1..10"),
        ({"type": "number", "minimum": 0}, "number 0.."),
        ({"type": ["string", "null"]}, "string | null"),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "integer | null"),
        ({"type": "array", "items": {"type": "string"}}, "array<string>"),
        (
            {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name"],
            },
            "{name: string, age?: integer}",
        ),
        ({"type": "object"}, "object"),
        ({}, "any"),
        ("not a schema", "any"),
    ],
)
def test_a_schema_becomes_a_short_type(schema: object, text: str) -> None:
    assert type_text(schema) == text


def test_deep_nesting_stops_at_object() -> None:
    deep: dict[str, object] = {"type": "string"}
    for _ in range(5):
        deep = {"type": "object", "properties": {"x": deep}, "required": ["x"]}
    assert type_text(deep) == "{x: {x: {x: object}}}"


WEATHER = Tool(
    "get_weather",
    "Current weather in a city. Uses the nearest station.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city's name. In English."},
            "unit": {"enum": ["c", "f"], "default": "c"},
        },
        "required": ["city"],
    },
)


def test_a_signature_names_arguments_defaults_and_descriptions() -> None:
    assert signature(WEATHER.name, WEATHER.description, WEATHER.schema) == (
        'get_weather(city: string, unit?: "c" | "f" = "c")\n'
        "  Current weather in a city. Uses the nearest station.\n"
        "  city: The city's name. In English."
    )


def test_many_tools_are_shortened_to_the_budget_few_are_not() -> None:
    full = describe_tools([WEATHER])
    assert "Uses the nearest station." in full and "city: The city's name. In English." in full
    many = [Tool(f"{WEATHER.name}_{i}", WEATHER.description, WEATHER.schema) for i in range(8)]
    first_sentences = describe_tools(many, budget=len(full) * 8 - 60)
    assert "Uses the nearest station." not in first_sentences
    assert "city: The city's name." in first_sentences
    bare = describe_tools(many, budget=len(full) * 4)
    assert "city:" not in bare.replace("(city:", "")  # only the signature names it
    assert bare.count("get_weather_") == 8  # every tool is still there
    assert len(bare) < len(first_sentences) < len(describe_tools(many))
