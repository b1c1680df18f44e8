"""The bounds every compiled schema gets: whitespace, and a number's decimals."""

from __future__ import annotations

from typing import Any

from fleetgui.runtime.constraint import grammar_of_schema
from fleetgui.runtime.schema_bounds import JSON_WHITESPACE, NUMBER_STEP, bounded

NUMBER = {"type": "number", "minimum": 0, "maximum": 100}


def test_every_number_gets_a_step_however_deep_and_nothing_else_does() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": NUMBER,
            "b": {"type": "array", "items": {"type": ["number", "null"]}},
            "c": {"anyOf": [{"$ref": "#/$defs/price"}, {"type": "string"}]},
            "d": {"type": "integer"},
            "e": {"type": "number", "multipleOf": 0.5},
        },
        "$defs": {"price": {"type": "number"}},
        "x-guidance": {"whitespace_pattern": " ?"},
    }
    out = bounded(schema)
    props = out["properties"]
    assert props["a"]["multipleOf"] == NUMBER_STEP and props["a"]["maximum"] == 100
    assert props["b"]["items"]["multipleOf"] == NUMBER_STEP
    assert out["$defs"]["price"]["multipleOf"] == NUMBER_STEP
    assert "multipleOf" not in props["d"]  # integers end by themselves
    assert props["e"]["multipleOf"] == 0.5  # the schema's own step wins
    assert out["x-guidance"]["whitespace_pattern"] == " ?"  # so does its whitespace
    assert "multipleOf" not in schema["properties"]["a"]  # the caller's schema is unchanged
    assert bounded({"type": "object"})["x-guidance"]["whitespace_pattern"] == JSON_WHITESPACE


def test_the_grammar_refuses_a_seventh_decimal(smollm2_grammar: tuple[Any, Any]) -> None:
    engine, tokenizer = smollm2_grammar
    vocab = engine.tokenizer.vocab_size

    def allows(text: str) -> bool:
        constraint = engine.constraint(grammar_of_schema(NUMBER))
        for token in tokenizer.encode(text):
            if not constraint.mask().allowed(vocab)[0][token]:
                return False
            constraint.accept([token])
        return True

    assert allows("31.5") and allows("8.111111") and allows("0")
    assert not allows("8.1111111")  # the seventh decimal: where SmolLM2 looped
