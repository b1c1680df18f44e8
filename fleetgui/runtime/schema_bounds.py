"""Bounds a JSON schema leaves open that a small model can run into forever.

A constrained answer must end, but a JSON schema lets whitespace run between any two tokens and
a number's fraction go on digit after digit: SmolLM2 wrote ``"population_millions":
8.1111111...`` until its token limit, under a schema with a minimum and a maximum. So every
schema the grammar engine compiles gets, unless it says otherwise, the whitespace llama.cpp's
JSON grammar allows (at most 20 characters between tokens) and numbers with at most six
decimals (``multipleOf: 1e-6``, which llguidance enforces on the digits). Every answer is still
valid against the schema as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The whitespace a JSON answer may put between its tokens.
JSON_WHITESPACE = r"[ \t\n\r]{0,20}"
#: A number's finest step where its schema gives none: six decimals.
NUMBER_STEP = 1e-6

# keywords whose value is a schema, a list of schemas, or a name -> schema map
_ONE = ("additionalProperties", "items", "not", "if", "then", "else", "contains")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions")


def bounded(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with bounded whitespace (llguidance's option; one the schema sets wins) and
    every number's decimals bounded (see module doc)."""
    options = schema.get("x-guidance")
    options = dict(options) if isinstance(options, Mapping) else {}
    out = _bounded_numbers(schema)
    return {**out, "x-guidance": {"whitespace_pattern": JSON_WHITESPACE, **options}}


def _bounded_numbers(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    kinds = out.get("type")
    if (kinds == "number" or (isinstance(kinds, list) and "number" in kinds)) and (
        "multipleOf" not in out
    ):
        out["multipleOf"] = NUMBER_STEP
    for key in _ONE:
        if isinstance(out.get(key), Mapping):
            out[key] = _bounded_numbers(out[key])
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [_bounded_numbers(item) for item in out[key]]
    if isinstance(out.get("items"), list):  # draft-04 tuples
        out["items"] = [_bounded_numbers(item) for item in out["items"]]
    for key in _NAMED:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: _bounded_numbers(sub) for name, sub in out[key].items()}
    return out
