"""The fields of a chat request that offer tools: ``tools``, ``tool_choice``,
``parallel_tool_calls``, and the calls an assistant message made earlier, checked field by
field (see :mod:`~fleetgui.api.parsing`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fleetgui.api.errors import bad_request
from fleetgui.runtime.tool_calls import ChoiceMode, Tool, ToolChoice, ToolSpec

#: OpenAI's rule for a function's name.
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def parse_calls(value: Any, param: str) -> list[dict[str, Any]]:
    """An assistant message's earlier calls, as OpenAI sends them back."""
    where = f"{param}.tool_calls"
    if not isinstance(value, list):
        raise bad_request(f"{where} must be an array of calls", param=where)
    calls = []
    for index, call in enumerate(value):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments", "{}") if isinstance(function, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise bad_request(
                f"{where}[{index}] must be {{'id', 'type': 'function', 'function': {{'name', "
                "'arguments' (a JSON string)}}}",
                param=f"{where}[{index}]",
            )
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call{index}"
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    return calls


def parse_tools(body: Mapping[str, Any]) -> ToolSpec | None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` (None: no tools)."""
    value = body.get("tools")
    choice_value = body.get("tool_choice")
    if value in (None, []):
        if choice_value not in (None, "none", "auto"):
            raise bad_request("'tool_choice' needs 'tools' to choose from", param="tool_choice")
        return None
    if not isinstance(value, list):
        raise bad_request("'tools' must be an array of functions", param="tools")
    tools = []
    for index, item in enumerate(value):
        param = f"tools[{index}]"
        function = item.get("function") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or item.get("type", "function") != "function"
            or not (isinstance(function, dict))
        ):
            raise bad_request(
                f"{param} must be {{'type': 'function', 'function': {{'name', 'description', "
                "'parameters'}}}",
                param=param,
            )
        name = function.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
            raise bad_request(
                f"{param}.function.name must be 1-64 letters, digits, '_' or '-', got {name!r}",
                param=f"{param}.function.name",
            )
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise bad_request(
                f"{param}.function.parameters must be a JSON schema object",
                param=f"{param}.function.parameters",
            )
        description = function.get("description") or ""
        tools.append(Tool(name, str(description), parameters))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise bad_request("'tools' names a function twice", param="tools")
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad_request(
            "'parallel_tool_calls' must be true or false", param="parallel_tool_calls"
        )
    return ToolSpec(tuple(tools), _tool_choice(choice_value, names), parallel)


def _tool_choice(value: Any, names: list[str]) -> ToolChoice:
    if value is None or value == "auto":
        return ToolChoice()
    if value in ("none", "required"):
        return ToolChoice(ChoiceMode(value))
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise bad_request(
            "'tool_choice' must be 'auto', 'none', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}",
            param="tool_choice",
        )
    if name not in names:
        raise bad_request(
            f"'tool_choice' names {name!r}, which is not in 'tools' ({', '.join(names)})",
            param="tool_choice",
        )
    return ToolChoice(ChoiceMode.FUNCTION, name)
