"""Request bodies of ``POST /v1/responses`` (OpenAI's Responses API), checked field by field and
read as the chat request they amount to.

The Responses API is what OpenAI's newer agent tooling speaks (the Agents SDK by default,
Codex): ``input`` is a string or a list of items (messages, the function calls the model made
and their outputs), ``instructions`` a system message, ``tools`` flat function definitions and
``text.format`` the answer's JSON schema. Each is checked here under its own name, then turned
into the equivalent chat body and read by :func:`~fleetgui.api.parsing.parse_chat`, so sampling,
tools and schemas mean exactly what they mean on ``/v1/chat/completions``.

Only function tools exist here (the client runs them; see
:mod:`~fleetgui.api.responses_tools`). Background runs, the Conversations API and reusable
prompts are refused by name. ``previous_response_id`` continues
a response this server stored (see :mod:`~fleetgui.api.responses_store`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetgui.api.errors import bad_request
from fleetgui.api.parsing import GenerationRequest, check_model, parse_chat
from fleetgui.api.responses_tools import FunctionTools, function_tools, tool_choice

log = logging.getLogger(__name__)

#: roles an input message may have (``developer`` is the newer name of ``system``)
ROLES = ("user", "assistant", "system", "developer")
#: content parts that carry text (``output_text``: an earlier answer sent back)
TEXT_PARTS = ("input_text", "output_text", "text")
#: the ``include`` value that asks for the answer's log-probabilities
LOGPROBS = "message.output_text.logprobs"
#: fields whose feature this server does not have, and what to do instead
REFUSED = {
    "background": "background responses are not supported: leave 'background' false",
    "conversation": (
        "the Conversations API is not supported: send the whole conversation in 'input' or "
        "continue a stored response with 'previous_response_id'"
    ),
    "prompt": "reusable prompts are not supported: send the prompt's text in 'input'",
}
#: chat fields with the same name and meaning, passed through as they are
SHARED = ("temperature", "top_p", "top_k", "seed", "stop", "parallel_tool_calls")


@dataclass(frozen=True)
class ResponsesRequest:
    """A checked Responses request: the chat it amounts to (``chat.messages`` starts with
    ``instructions``, then the stored conversation it continues, then ``input``), and what
    the response object repeats back."""

    chat: GenerationRequest
    #: the stored conversation it continues, then its input, as chat messages (no
    #: instructions): what a response continuing this one starts from
    conversation: tuple[dict[str, Any], ...]
    store: bool
    echo: dict[str, Any]  # the request's settings as the response object shows them
    tools: FunctionTools  # the functions offered, and the namespace each came in


def parse_responses(
    body: Mapping[str, Any], served: str, history: tuple[dict[str, Any], ...] = ()
) -> ResponsesRequest:
    """A ``/v1/responses`` body; ``history``: the chat messages of the stored response named
    by ``previous_response_id`` (the caller looks it up)."""
    model = check_model(body, served)
    for name, why in REFUSED.items():
        if body.get(name) not in (None, False):
            raise bad_request(why, param=name)
    messages = input_messages(body.get("input"))
    instructions = _optional_text(body, "instructions")
    chat: dict[str, Any] = {"model": model, "continue_final_message": False}
    chat["messages"] = [
        *([{"role": "system", "content": instructions}] if instructions else []),
        *history,
        *messages,
    ]
    chat.update({name: body[name] for name in SHARED if name in body})
    chat["stream"] = body.get("stream", False)
    limit = body.get("max_output_tokens")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise bad_request(
                f"'max_output_tokens' must be an integer of at least 1, got {limit!r}",
                param="max_output_tokens",
            )
        chat["max_completion_tokens"] = limit
    tools = function_tools(body.get("tools"))
    if tools.chat:
        chat["tools"] = tools.chat
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = tool_choice(body["tool_choice"], tools)
    text = body.get("text")
    if text is not None:
        chat["response_format"] = _format(text)
    include = body.get("include") or []
    if not isinstance(include, list):
        raise bad_request("'include' must be an array of strings", param="include")
    if LOGPROBS in include or body.get("top_logprobs") is not None:
        chat["logprobs"] = True
        chat["top_logprobs"] = body.get("top_logprobs") or 0
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise bad_request("'store' must be true or false", param="store")
    return ResponsesRequest(
        chat=parse_chat(chat, served),
        conversation=(*history, *messages),
        store=store,
        echo=_echo(body, instructions),
        tools=tools,
    )


def input_messages(value: Any) -> tuple[dict[str, Any], ...]:
    """``input`` as chat messages: a string is one user message; in a list, each function
    call joins the assistant message before it (as chat's ``tool_calls``) and each call's
    output is a ``tool`` message. Reasoning items are skipped (this server writes none)."""
    if isinstance(value, str):
        if not value.strip():
            raise bad_request("'input' is empty: give the text to answer", param="input")
        return ({"role": "user", "content": value},)
    if not isinstance(value, list) or not value:
        raise bad_request(
            "'input' must be a string or a non-empty array of input items", param="input"
        )
    out: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        param = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad_request(f"{param} must be an object (a message or a call)", param=param)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, param))
        elif kind == "function_call":
            _add_call(out, item, param)
        elif kind == "function_call_output":
            # Codex also sends outputs no call asked for (its own context), with only a name
            named = not item.get("call_id") and isinstance(item.get("name"), str)
            call_id = item["name"] if named else _field(item, "call_id", param)
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{param}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "reasoning":
            log.debug("skipping %s, a reasoning item", param)
        elif kind == "item_reference":
            raise bad_request(
                f"{param} is an item reference: send the item itself, or continue a stored "
                "response with 'previous_response_id'",
                param=param,
            )
        else:
            raise bad_request(
                f"{param}.type is {kind!r}: use 'message', 'function_call' or "
                "'function_call_output'",
                param=f"{param}.type",
            )
    if not out:
        raise bad_request("'input' has no message or call output to answer", param="input")
    return tuple(out)


def _message(item: Mapping[str, Any], param: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise bad_request(
            f"{param}.role is {role!r}: use one of {', '.join(ROLES)}", param=f"{param}.role"
        )
    content = item.get("content")
    text = content if isinstance(content, str) else _text(content, f"{param}.content")
    return {"role": role, "content": text}


def _add_call(out: list[dict[str, Any]], item: Mapping[str, Any], param: str) -> None:
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise bad_request(
            f"{param}.arguments must be the call's arguments as a JSON string",
            param=f"{param}.arguments",
        )
    call = {
        "id": _field(item, "call_id", param),
        "type": "function",
        "function": {"name": _field(item, "name", param), "arguments": arguments},
    }
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    elif last is not None and last["role"] == "assistant":
        last["tool_calls"] = [call]  # the text the model wrote before its calls
    else:
        out.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _text(value: Any, param: str) -> str:
    """The text of an array of content parts (only text parts exist here)."""
    if not isinstance(value, list):
        raise bad_request(f"{param} must be a string or an array of text parts", param=param)
    texts = []
    for part in value:
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "refusal":
            continue
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise bad_request(
                f"{param} has a {kind!r} part: only text parts ('input_text') are supported",
                param=param,
            )
        texts.append(part["text"])
    return "".join(texts)


def _field(item: Mapping[str, Any], name: str, param: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise bad_request(f"{param}.{name} must be a non-empty string", param=f"{param}.{name}")
    return value


def _optional_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise bad_request(f"'{name}' must be a string", param=name)
    return value or None


def _format(text: Any) -> dict[str, Any]:
    """``text.format`` as chat's ``response_format``."""
    form = text.get("format") if isinstance(text, dict) else None
    if form is None:
        return {"type": "text"}
    kind = form.get("type") if isinstance(form, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind != "json_schema":
        raise bad_request(
            "'text.format.type' must be 'text', 'json_object' or 'json_schema'",
            param="text.format.type",
        )
    assert isinstance(form, dict)
    schema = form.get("schema")
    if not isinstance(schema, dict):
        raise bad_request(
            "'text.format.schema' must be a JSON schema object", param="text.format.schema"
        )
    return {"type": "json_schema", "json_schema": {"name": form.get("name"), "schema": schema}}


def _echo(body: Mapping[str, Any], instructions: str | None) -> dict[str, Any]:
    """The request's settings as OpenAI's response object repeats them."""
    text = body.get("text")
    if not isinstance(text, dict):
        text = {}
    return {
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "text": {"format": text.get("format") or {"type": "text"}},
        "truncation": body.get("truncation") or "disabled",
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "previous_response_id": body.get("previous_response_id"),
    }
