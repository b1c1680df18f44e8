"""Tools in a request's prompt, and the grammar that makes a call well formed where it must
be (see :mod:`~fleetgui.runtime.tool_calls` for the formats)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fleetgui.runtime.schema_bounds import bounded
from fleetgui.runtime.tool_calls import Tool, ToolFormat, ToolSpec, loads
from fleetgui.runtime.tool_signature import describe_tools

# -- the prompt ---------------------------------------------------------------------------------


def generic_instructions(spec: ToolSpec) -> str:
    """The system text that shows a model without a tool format its tools and the answer's
    shape (the grammar enforces the shape; this tells the model what it means)."""
    tools = describe_tools(spec.callable)
    calls = '{"tool_calls": [{"name": "<function name>", "arguments": {<its arguments>}}]}'
    if spec.must_call:
        how = f"Answer only with a JSON object that calls one of them: {calls}"
    else:
        how = (
            f"To call functions, answer only with the JSON object {calls}. To answer the user "
            'directly, answer only with {"response": "<your answer>"}.'
        )
    return f"You can call these functions:\n{tools}\n\n{how}"


def prompt_messages(
    messages: Sequence[Mapping[str, Any]], spec: ToolSpec, fmt: ToolFormat
) -> list[dict[str, Any]]:
    """``messages`` ready for the chat template: calls' arguments as objects (templates
    ``tojson`` them), and for the generic format the tools described in the system message,
    earlier calls and results written as the model is asked to write them."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item = dict(message)
        calls = item.get("tool_calls")
        if calls and fmt is not ToolFormat.GENERIC:
            item["tool_calls"] = [_template_call(c) for c in calls]
        elif calls:  # the generic format: a call is the JSON answer it was
            written = [
                {"name": c["function"]["name"], "arguments": loads(c["function"]["arguments"])}
                for c in calls
            ]
            item = {"role": "assistant", "content": json.dumps({"tool_calls": written})}
        elif item.get("role") == "tool" and fmt is ToolFormat.GENERIC:
            result = {"tool_call_id": item.get("tool_call_id"), "content": item.get("content")}
            item = {"role": "user", "content": json.dumps({"tool_result": result})}
        if item.get("content") is None:
            item["content"] = ""
        out.append(item)
    if fmt is ToolFormat.GENERIC and spec.active:
        instructions = generic_instructions(spec)
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{instructions}"}
        else:
            out.insert(0, {"role": "system", "content": instructions})
    return _merge_same_roles(out) if fmt is ToolFormat.GENERIC else out


def _template_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function", {}))
    function["arguments"] = loads(function.get("arguments", "{}"))
    return {**call, "function": function}


def _merge_same_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of one role as one (tool results became user turns; templates that
    check alternation refuse two in a row)."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1]["role"] == message["role"] != "system":
            merged[-1] = {**merged[-1], "content": f"{merged[-1]['content']}\n{message['content']}"}
        else:
            merged.append(message)
    return merged


# -- the grammar --------------------------------------------------------------------------------

#: llguidance's option for tool schemas: keywords it does not implement (``propertyNames``, in
#: Claude Code's tools) are left out of the constraint instead of refusing the request; tools
#: are written for models that read the schema, not for a grammar engine.
LENIENT = {"lenient": True}


def _call_schema(tool: Tool, arguments_key: str = "arguments") -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, arguments_key: closed(tool.schema)},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


def closed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A function's arguments as the call may give them: only the parameters it declares,
    unless its schema says otherwise (as OpenAI's strict mode has it). A function called with
    an argument it does not take fails (Open WebUI's do); and a small model left free to add
    arguments can write them until the context is full."""
    out = dict(schema)
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _one_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def answer_schema(
    spec: ToolSpec, response_schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The generic format's answer: calls (at least one; one only without ``parallel``), or
    with "auto" a direct response (text, or JSON of ``response_schema``)."""
    calls: dict[str, Any] = {
        "type": "array",
        "items": _one_of([_call_schema(t) for t in spec.callable]),
        "minItems": 1,
    }
    if not spec.parallel:
        calls["maxItems"] = 1
    call_answer = {
        "type": "object",
        "properties": {"tool_calls": calls},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    if spec.must_call:
        return {**call_answer, "x-guidance": LENIENT}
    response = {
        "type": "object",
        "properties": {"response": dict(response_schema or {"type": "string"})},
        "required": ["response"],
        "additionalProperties": False,
    }
    return {"anyOf": [call_answer, response], "x-guidance": LENIENT}


def call_grammar(
    spec: ToolSpec, fmt: ToolFormat, response_schema: Mapping[str, Any] | None = None
) -> tuple[str | None, Mapping[str, Any] | None]:
    """What constrains the answer: a Lark grammar (llguidance's dialect, with ``%json``), or a
    JSON schema, or neither (a native format with "auto": the model writes freely). With
    ``response_schema`` (the request's ``response_format``) an answer that is not a call must
    be JSON of that schema."""
    if not spec.active:
        return None, response_schema
    if fmt is ToolFormat.GENERIC:
        return None, answer_schema(spec, response_schema)
    if not spec.must_call and response_schema is None:
        return None, None
    answer = "" if spec.must_call else f" | %json{_embedded(response_schema or {})}"
    if fmt is ToolFormat.HERMES:
        call = _embedded(_one_of([_call_schema(t) for t in spec.callable]), lenient=True)
        calls = 'call ("\\n" call)*' if spec.parallel else "call"
        body = f'call: "<tool_call>\\n" %json{call} "\\n</tool_call>"\n'
        return f"start: {calls}{answer}\n{body}", None
    if fmt is ToolFormat.LLAMA3:  # one call a message, as its template renders them
        call = _embedded(
            _one_of([_call_schema(t, "parameters") for t in spec.callable]), lenient=True
        )
        return f"start: %json{call}{answer}\n", None
    # Mistral: the calls as a JSON array (its [TOOL_CALLS] marker is a special token)
    items = _one_of([_call_schema(t) for t in spec.callable])
    array: dict[str, Any] = {"type": "array", "items": items, "minItems": 1}
    if not spec.parallel:
        array["maxItems"] = 1
    return f"start: %json{_embedded(array, lenient=True)}{answer}\n", None


def _embedded(schema: Mapping[str, Any], *, lenient: bool = False) -> str:
    """A schema as a Lark grammar's ``%json`` embeds it, its whitespace bounded."""
    return json.dumps(bounded({**schema, "x-guidance": LENIENT} if lenient else schema))
