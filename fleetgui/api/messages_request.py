"""Request bodies of ``POST /v1/messages`` (Anthropic's Messages API, what Claude Code and the
``anthropic`` SDK speak), checked field by field and read as the chat request they amount to.

``system`` becomes the system message; each message's content blocks become chat's: text as
text, ``tool_use`` blocks as the assistant's ``tool_calls``, ``tool_result`` blocks as ``tool``
messages (before the user's text that follows them); thinking blocks are skipped. ``tools``
(``name``, ``description``, ``input_schema``), ``tool_choice``, ``stop_sequences`` and
``output_config.format`` (a JSON schema) mean what chat's tools, stop strings and
``response_format`` mean. Server tools (Anthropic's web search, code execution, ...) run on
Anthropic's servers: they are left out of what the model is offered, as the Responses API's
hosted tools are.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fleetgui.api.errors import bad_request
from fleetgui.api.parsing import MAX_STOP_STRINGS, GenerationRequest, check_model, parse_chat

log = logging.getLogger(__name__)

#: Anthropic's roles; Claude Code also sends system notes among the messages
ROLES = ("user", "assistant", "system")
#: fields with chat's name and meaning, passed through as they are
SHARED = ("temperature", "top_p", "top_k", "stream")
SKIPPED_BLOCKS = ("thinking", "redacted_thinking")


def parse_messages(body: Mapping[str, Any], served: str) -> GenerationRequest:
    """A ``/v1/messages`` (or ``/v1/messages/count_tokens``) body."""
    model = check_model(body, served)
    chat: dict[str, Any] = {"model": model, "continue_final_message": False}
    system = _system(body.get("system"))
    chat["messages"] = [
        *([{"role": "system", "content": system}] if system else []),
        *_messages(body.get("messages")),
    ]
    chat.update({name: body[name] for name in SHARED if name in body})
    limit = body.get("max_tokens")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise bad_request(
                f"'max_tokens' must be an integer of at least 1, got {limit!r}", param="max_tokens"
            )
        chat["max_completion_tokens"] = limit
    stops = body.get("stop_sequences")
    if stops:
        if not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS:
            raise bad_request(
                f"'stop_sequences' must be an array of at most {MAX_STOP_STRINGS} strings",
                param="stop_sequences",
            )
        chat["stop"] = stops
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if choice is not None:
        chat.update(_tool_choice(choice))
    config = body.get("output_config") or {}
    form = config.get("format") if isinstance(config, dict) else config
    if form is not None:
        schema = form.get("schema") if isinstance(form, dict) else None
        if not isinstance(schema, dict) or form.get("type") != "json_schema":
            raise bad_request(
                "'output_config.format' must be {'type': 'json_schema', 'schema': {...}}",
                param="output_config.format",
            )
        chat["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
    return parse_chat(chat, served)


def _system(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    return _text_blocks(value, "system")


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise bad_request("'messages' must be a non-empty array of messages", param="messages")
    out: list[dict[str, Any]] = []
    for index, message in enumerate(value):
        param = f"messages[{index}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            raise bad_request(
                f"{param}.role is {role!r}: use 'user' or 'assistant' (the system prompt goes "
                "in 'system')",
                param=f"{param}.role",
            )
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif role == "system":
            out.append({"role": role, "content": _text_blocks(content, f"{param}.content")})
        elif role == "user":
            out += _user_blocks(content, f"{param}.content")
        else:
            out.append(_assistant_blocks(content, f"{param}.content"))
    return out


def _blocks(value: Any, param: str) -> list[tuple[str, dict[str, Any], str]]:
    """The content blocks, each with its type and its param name."""
    if not isinstance(value, list):
        raise bad_request(f"{param} must be a string or an array of content blocks", param=param)
    out = []
    for index, block in enumerate(value):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"{param}[{index}]"
        if not isinstance(block, dict) or not isinstance(kind, str):
            raise bad_request(f"{where} must be a content block", param=where)
        out.append((kind, block, where))
    return out


def _user_blocks(value: Any, param: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    for kind, block, where in _blocks(value, param):
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise bad_request(
                    f"{where}.tool_use_id must name the tool_use this is the result of",
                    param=f"{where}.tool_use_id",
                )
            content = block.get("content", "")
            text = content if isinstance(content, str) else _text_blocks(content, where)
            if block.get("is_error"):
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind not in SKIPPED_BLOCKS:
            raise _unsupported(kind, where)
    if texts or not results:
        results.append({"role": "user", "content": "\n\n".join(texts)})
    return results


def _assistant_blocks(value: Any, param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for kind, block, where in _blocks(value, param):
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            name, call_id = block.get("name"), block.get("id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise bad_request(f"{where} needs 'id' and 'name'", param=where)
            arguments = json.dumps(block.get("input") or {})
            function = {"name": name, "arguments": arguments}
            calls.append({"id": call_id, "type": "function", "function": function})
        elif kind not in SKIPPED_BLOCKS:
            raise _unsupported(kind, where)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _text_blocks(value: Any, param: str) -> str:
    texts = []
    for kind, block, where in _blocks(value, param):
        if kind != "text":
            raise _unsupported(kind, where)
        texts.append(str(block.get("text", "")))
    return "\n\n".join(texts)


def _unsupported(kind: str, where: str) -> Exception:
    return bad_request(
        f"{where} is a {kind!r} block: only text, tool_use and tool_result blocks are supported",
        param=where,
    )


def _tools(value: Any) -> list[dict[str, Any]]:
    if value in (None, []):
        return []
    if not isinstance(value, list):
        raise bad_request("'tools' must be an array of tools", param="tools")
    out = []
    for index, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise bad_request(f"tools[{index}] must be an object", param=f"tools[{index}]")
        if tool.get("type", "custom") != "custom" or "input_schema" not in tool:
            log.debug("tools[%d] (%s) is a server tool: left out", index, tool.get("type"))
            continue
        function = {"name": tool.get("name"), "description": tool.get("description", "")}
        function["parameters"] = tool["input_schema"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(value: Any) -> dict[str, Any]:
    kind = value.get("type") if isinstance(value, dict) else None
    chat: dict[str, Any] = {}
    if value.get("disable_parallel_tool_use") if isinstance(value, dict) else False:
        chat["parallel_tool_calls"] = False
    if kind in ("auto", "none"):
        chat["tool_choice"] = kind
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "tool" and isinstance(value, dict):
        chat["tool_choice"] = {"type": "function", "function": {"name": value.get("name")}}
    else:
        raise bad_request(
            "'tool_choice' must be {'type': 'auto' | 'any' | 'none'} or {'type': 'tool', "
            "'name': ...}",
            param="tool_choice",
        )
    return chat
