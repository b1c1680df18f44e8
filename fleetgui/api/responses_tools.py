"""The Responses API's ``tools`` and ``tool_choice``, read as chat's function tools.

Function tools are flat (``{"type": "function", "name", "description", "parameters"}``), and a
``namespace`` groups some of them (Codex sends its sub-agent tools so); a call to one of those
comes back with its ``namespace``. Hosted tools (web search, file search, code interpreter,
...) run on OpenAI's servers: there is nothing here to run them, so they are left out of what
the model is offered, and the log says so once, rather than refusing the whole request of a
client such as Codex that offers them by default. Choosing one with ``tool_choice`` is a 400.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetgui.api.errors import bad_request

log = logging.getLogger(__name__)

_said: set[str] = set()  # hosted tool types already logged as left out


@dataclass(frozen=True)
class FunctionTools:
    """The request's functions as chat tools, and the namespace of each that came in one."""

    chat: list[dict[str, Any]] = field(default_factory=list)
    namespaces: Mapping[str, str] = field(default_factory=dict)

    def namespace_of(self, name: str) -> str | None:
        return self.namespaces.get(name)


def function_tools(value: Any) -> FunctionTools:
    if value in (None, []):
        return FunctionTools()
    if not isinstance(value, list):
        raise bad_request("'tools' must be an array of tools", param="tools")
    chat: list[dict[str, Any]] = []
    namespaces: dict[str, str] = {}
    for index, tool in enumerate(value):
        param = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or not isinstance(kind, str):
            raise bad_request(f"{param} must be an object with a 'type'", param=param)
        if kind == "function":
            chat.append(_chat_tool(tool))
        elif kind == "namespace":
            inner = tool.get("tools")
            name = tool.get("name")
            if not isinstance(inner, list) or not isinstance(name, str):
                raise bad_request(
                    f"{param} must be a namespace: a 'name' and its function 'tools'", param=param
                )
            for number, function in enumerate(inner):
                if not isinstance(function, dict) or function.get("type") != "function":
                    raise bad_request(
                        f"{param}.tools[{number}] must be a function tool",
                        param=f"{param}.tools[{number}]",
                    )
                chat.append(_chat_tool(function))
                namespaces[str(function.get("name"))] = name
        elif kind not in _said:
            _said.add(kind)
            log.info(
                "a request offered the hosted tool %r: left out, this server runs none (only "
                "the client's function tools)",
                kind,
            )
    return FunctionTools(chat, namespaces)


def tool_choice(value: Any, tools: FunctionTools) -> Any:
    """``tool_choice`` as chat's."""
    if isinstance(value, str):
        return value
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "function":
        return {"type": "function", "function": {"name": value.get("name")}}
    if kind == "allowed_tools" or not isinstance(kind, str):
        raise bad_request(
            "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}",
            param="tool_choice",
        )
    raise bad_request(
        f"'tool_choice' chooses the hosted tool {kind!r}, which this server does not run: "
        "choose a function tool, or 'auto'",
        param="tool_choice",
    )


def _chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    return {"type": "function", "function": function}
