"""Request bodies of ``/v1/chat/completions`` and ``/v1/completions``, checked field by field.

Each mistake is one :class:`~fleetgui.api.errors.ApiError` naming the field (``param``), as
OpenAI's API does. Fields that only tune what this server cannot do (penalties, logprobs off,
``user``) are accepted and ignored, so that editors and web UIs that send them keep working;
fields whose answer would be wrong without them (``n`` > 1, images) are refused.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleetgui.api.errors import ApiError, bad_request
from fleetgui.api.tool_fields import parse_calls, parse_tools
from fleetgui.generation_config import MAX_TOP_LOGPROBS, GenerationConfig
from fleetgui.runtime.tool_calls import ToolSpec

log = logging.getLogger(__name__)

MAX_STOP_STRINGS = 4  # as OpenAI
#: OpenAI's default temperature and nucleus: a request that sets neither samples.
DEFAULT_TEMPERATURE = 1.0
#: /v1/completions' default length in OpenAI's API (chat's default is the context's room).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}

IGNORED = (
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "user",
    "metadata",
    "store",
    "service_tier",
)


@dataclass(frozen=True)
class GenerationRequest:
    """A checked request: a chat (``messages``) or a plain completion (``prompt``), and how to
    decode it (``config``: its sampling and stop strings; the token limit is set once the
    prompt is counted)."""

    model: str
    messages: tuple[dict[str, Any], ...] | None
    prompt: str | None
    max_tokens: int | None  # None: as long as the context allows
    config: GenerationConfig
    stream: bool
    include_usage: bool
    tools: ToolSpec | None = None  # functions the model may call (chat only)
    continue_final: bool = False  # the answer continues the last (assistant) message

    @property
    def is_chat(self) -> bool:
        return self.messages is not None


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 saying what is wrong with it."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad_request(
            f"the request body is not valid JSON ({exc}): send a JSON object",
            code="invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise bad_request(
            f"the request body must be a JSON object, not {type(body).__name__}",
            code="invalid_json",
        )
    return body


def check_model(body: Mapping[str, Any], served: str) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request(f"'model' is required: this server serves {served!r}", param="model")
    if model != served:
        raise ApiError(
            f"the model {model!r} does not exist here: this server serves {served!r} "
            "(GET /v1/models lists it)",
            status=400,
            param="model",
            code="model_not_found",
        )
    return model


def parse_chat(body: Mapping[str, Any], served: str) -> GenerationRequest:
    """A ``/v1/chat/completions`` body."""
    model = check_model(body, served)
    _refuse_unsupported(body, chat=True)
    messages = _messages(body.get("messages"))
    max_tokens = _max_tokens(body, ("max_completion_tokens", "max_tokens"))
    request = _request(body, model, max_tokens, messages=messages, prompt=None)
    last = messages[-1]
    # a chat ending with the assistant's message asks for more of it (Open WebUI's "Continue
    # response"); continue_final_message (vLLM's field) says so either way
    continues = last["role"] == "assistant" and not last.get("tool_calls")
    continues = _bool(body, "continue_final_message", continues)
    if continues and (last["role"] != "assistant" or last.get("tool_calls")):
        raise bad_request(
            "'continue_final_message' needs the last message to be the assistant's text",
            param="continue_final_message",
        )
    config = replace(request.config, logprobs=_chat_logprobs(body))
    return replace(request, config=config, tools=parse_tools(body), continue_final=continues)


def parse_completion(body: Mapping[str, Any], served: str) -> GenerationRequest:
    """A ``/v1/completions`` body (``prompt``: a string, or a list of exactly one)."""
    model = check_model(body, served)
    _refuse_unsupported(body, chat=False)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad_request(
            "'prompt' must be a string (or a list of one string); token-id prompts and "
            "several prompts in one request are not supported",
            param="prompt",
        )
    if not prompt.strip():
        raise bad_request("'prompt' is empty: give some text to continue", param="prompt")
    max_tokens = _max_tokens(body, ("max_tokens",)) or COMPLETIONS_DEFAULT_MAX_TOKENS
    request = _request(body, model, max_tokens, messages=None, prompt=prompt)
    return replace(request, config=replace(request.config, logprobs=_completion_logprobs(body)))


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """Chat's ``logprobs`` (true: each token's log-probability) and ``top_logprobs`` (that many
    most likely alternatives, 0-20, with ``logprobs`` only): the head's count, None for off."""
    asked = _bool(body, "logprobs", False)
    top = body.get("top_logprobs")
    if top is None:
        return 0 if asked else None
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise bad_request(
            f"'top_logprobs' must be an integer from 0 to {MAX_TOP_LOGPROBS}", param="top_logprobs"
        )
    if not asked:
        raise bad_request("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    return top


def _completion_logprobs(body: Mapping[str, Any]) -> int | None:
    """Completions' ``logprobs``: the number of most likely alternatives to list (0: only the
    chosen tokens'), None for off."""
    value = body.get("logprobs")
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise bad_request(
            f"'logprobs' must be an integer from 0 to {MAX_TOP_LOGPROBS}", param="logprobs"
        )
    return value


# -- fields ----------------------------------------------------------------------------------


def _request(
    body: Mapping[str, Any],
    model: str,
    max_tokens: int | None,
    *,
    messages: tuple[dict[str, Any], ...] | None,
    prompt: str | None,
) -> GenerationRequest:
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise bad_request(
                "'stream_options' is only allowed with 'stream': true", param="stream_options"
            )
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object", param="stream_options")
        include_usage = _bool(options, "include_usage", False, "stream_options.include_usage")
    for name in IGNORED:
        if body.get(name) not in (None, 0, False, {}, []):
            log.debug("ignoring the request's %s", name)
    return GenerationRequest(
        model=model,
        messages=messages,
        prompt=prompt,
        max_tokens=max_tokens,
        config=_config(body),
        stream=stream,
        include_usage=include_usage,
    )


def _refuse_unsupported(body: Mapping[str, Any], *, chat: bool) -> None:
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise bad_request(f"'n' must be 1 (one choice per request), got {n!r}", param="n")
    if not chat:
        if body.get("echo"):
            raise bad_request("'echo' is not supported", param="echo")
        if body.get("suffix"):
            raise bad_request("'suffix' (insertion) is not supported", param="suffix")
        if body.get("best_of", 1) not in (1, None):
            raise bad_request("'best_of' must be 1", param="best_of")


def _messages(value: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise bad_request("'messages' must be a non-empty array of messages", param="messages")
    out = []
    for index, message in enumerate(value):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(f"{param} must be an object with 'role' and 'content'", param=param)
        role = message.get("role")
        if role not in ROLES:
            raise bad_request(
                f"{param}.role is {role!r}: use one of {', '.join(ROLES)}", param=f"{param}.role"
            )
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            content = message.get("content")
            text = "" if content is None else _content(content, param)
            out.append(
                {"role": "assistant", "content": text, "tool_calls": parse_calls(calls, param)}
            )
            continue
        item: dict[str, Any] = {
            "role": ROLES[role],
            "content": _content(message.get("content"), param),
        }
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise bad_request(
                    f"{param}.tool_call_id must name the call this is the result of",
                    param=f"{param}.tool_call_id",
                )
            item["tool_call_id"] = call_id
        out.append(item)
    return tuple(out)


def _content(value: Any, param: str) -> str:
    """A message's text: a string, or an array of text parts (joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad_request(
                    f"{param}.content has a {kind!r} part: only text parts are supported",
                    param=f"{param}.content",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(
                    f"{param}.content has a text part without a 'text' string",
                    param=f"{param}.content",
                )
            texts.append(text)
        return "".join(texts)
    raise bad_request(
        f"{param}.content must be a string or an array of text parts", param=f"{param}.content"
    )


def _max_tokens(body: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` the body sets (``max_completion_tokens`` replaced
    ``max_tokens`` in OpenAI's chat API), at least 1."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_request(f"'{name}' must be an integer, got {value!r}", param=name)
        if value < 1:
            raise bad_request(
                f"'{name}' must be at least 1, got {value}", param=name, code="invalid_value"
            )
        return value
    return None


def _number(body: Mapping[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_request(f"'{name}' must be a number, got {value!r}", param=name)
    return float(value)


def _bool(body: Mapping[str, Any], name: str, default: bool, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{param or name}' must be true or false", param=param or name)
    return value


def _config(body: Mapping[str, Any]) -> GenerationConfig:
    """The body's sampling fields and stop strings."""
    temperature = _number(body, "temperature", DEFAULT_TEMPERATURE)
    top_p = _number(body, "top_p", 1.0)
    top_k = body.get("top_k", 0)  # not OpenAI's, but llama.cpp's and vLLM's servers take it
    seed = body.get("seed")
    for name, value in (("top_k", top_k), ("seed", seed)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise bad_request(f"'{name}' must be an integer, got {value!r}", param=name)
    config = GenerationConfig(
        temperature=temperature,
        top_k=top_k or 0,
        top_p=top_p,
        seed=seed,
        stop=_stop(body.get("stop")),
        json_schema=_response_schema(body.get("response_format")),
    )
    try:
        config.check_sampling()
    except ValueError as exc:
        param = str(exc).split(" ", 1)[0]
        raise bad_request(str(exc), param=param if param in body else None) from None
    return config


#: ``response_format: {"type": "json_object"}``: any JSON object, as OpenAI's JSON mode.
ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}


def _response_schema(value: Any) -> dict[str, Any] | None:
    """The JSON schema ``response_format`` asks the answer to follow (None: plain text).
    ``strict`` is accepted either way: the answer is always constrained to the schema."""
    param = "response_format"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request(
            f'\'{param}\' must be an object such as {{"type": "json_object"}}', param=param
        )
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_JSON_OBJECT
    if kind != "json_schema":
        raise bad_request(
            f"'{param}.type' must be 'text', 'json_object' or 'json_schema', got {kind!r}",
            param=f"{param}.type",
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise bad_request(
            f"'{param}.json_schema' must be an object with the schema in 'schema'",
            param=f"{param}.json_schema",
        )
    schema = spec.get("schema", ANY_JSON_OBJECT)  # OpenAI's field is optional
    if not isinstance(schema, dict):
        raise bad_request(
            f"'{param}.json_schema.schema' must be a JSON schema object, got {schema!r}"[:300],
            param=f"{param}.json_schema.schema",
        )
    return schema


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad_request(
            "'stop' must be a non-empty string or an array of non-empty strings", param="stop"
        )
    if len(stops) > MAX_STOP_STRINGS:
        raise bad_request(
            f"'stop' has {len(stops)} strings: at most {MAX_STOP_STRINGS}", param="stop"
        )
    return tuple(stops)
