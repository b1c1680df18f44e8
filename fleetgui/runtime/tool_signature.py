"""Tools as short signatures for a model without a tool format of its own.

The generic tool prompt shows each function as a TypeScript-like signature and its
description, not its JSON schema: as indented JSON, Open WebUI's 36 built-in tools alone
overflow a 4,096-token context; as signatures with first sentences they take a third of it.
The model needs each
function's name, meaning and arguments; the grammar that constrains its calls still enforces
the full schema. So the text is as detailed as a budget allows: every description when the
tools are few (an agent's usual handful), first sentences when many, and then no argument
descriptions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fleetgui.runtime.tool_calls import Tool

#: nesting shown in full; deeper objects are just ``object``
MAX_DEPTH = 3
#: characters of tool text (about 4 a token) before descriptions are shortened
BUDGET_CHARS = 8_000

_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)")


def describe_tools(tools: Sequence[Tool], budget: int = BUDGET_CHARS) -> str:
    """The tools' signatures, one block each, as detailed as ``budget`` characters allow."""
    text = ""
    for brief, arguments in ((False, True), (True, True), (True, False)):
        text = "\n".join(
            signature(t.name, t.description, t.schema, brief=brief, arguments=arguments)
            for t in tools
        )
        if len(text) <= budget:
            break
    return text


def signature(
    name: str,
    description: str,
    parameters: Mapping[str, Any],
    *,
    brief: bool = False,
    arguments: bool = True,
) -> str:
    """``name(arg: type, opt?: type = default)`` then the description and the arguments'
    descriptions, each on its own indented line (``brief``: first sentences only;
    ``arguments=False``: no argument descriptions)."""
    props = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    args = ", ".join(_argument(key, value, key in required) for key, value in props.items())
    lines = [f"{name}({args})"]
    if description:
        lines.append("  " + _words(description, brief))
    for key, value in props.items() if arguments else ():
        text = value.get("description") if isinstance(value, Mapping) else None
        if text:
            lines.append(f"  {key}: {_words(str(text), brief)}")
    return "\n".join(lines)


def _words(text: str, brief: bool) -> str:
    flat = " ".join(text.split())
    first = _SENTENCE.match(flat) if brief else None
    return first.group(1) if first else flat


def _argument(key: str, schema: Any, required: bool) -> str:
    text = f"{key}{'' if required else '?'}: {type_text(schema)}"
    if isinstance(schema, Mapping) and "default" in schema:
        text += f" = {json.dumps(schema['default'])}"
    return text


def type_text(schema: Any, depth: int = 0) -> str:
    """A JSON schema as a short type: ``string``, ``"a" | "b"``, ``integer 1..10``,
    ``array<string>``, ``{name: string, age?: integer}``."""
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema or "const" in schema:
        return " | ".join(json.dumps(v) for v in schema.get("enum", [schema.get("const")]))
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(type_text(s, depth) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(type_text({**schema, "type": k}, depth) for k in kind)
    if kind == "object" or "properties" in schema:
        return _object_text(schema, depth)
    return _scalar_text(schema, kind, depth)


def _object_text(schema: Mapping[str, Any], depth: int) -> str:
    props = schema.get("properties")
    if not props or depth >= MAX_DEPTH:
        return "object"
    required = set(schema.get("required") or ())
    inner = ", ".join(
        f"{k}{'' if k in required else '?'}: {type_text(v, depth + 1)}" for k, v in props.items()
    )
    return "{" + inner + "}"


def _scalar_text(schema: Mapping[str, Any], kind: Any, depth: int) -> str:
    if kind == "array":
        return f"array<{type_text(schema.get('items'), depth + 1)}>"
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None or high is not None:
            return f"{kind} {'' if low is None else low}..{'' if high is None else high}"
    return kind if isinstance(kind, str) else "any"
