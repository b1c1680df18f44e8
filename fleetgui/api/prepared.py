"""A checked request made ready to generate: the prompt as the model sees it, its decoding
configuration and token count, and the tools it offered. Shared by every generating endpoint
(chat and text completions, the Responses API)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from fleetgui.api.errors import bad_request
from fleetgui.api.parsing import GenerationRequest
from fleetgui.api.served import ServedModel
from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.call_stream import CallStream
from fleetgui.runtime.generation import grammar_of
from fleetgui.runtime.tool_calls import (
    ParsedAnswer,
    ToolFormat,
    ToolSpec,
    parse_answer,
    tool_format,
)
from fleetgui.runtime.tool_prompt import call_grammar, prompt_messages
from fleetgui.runtime.tool_stream import ContentStream

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedPrompt:
    """A request made ready to generate: the prompt, its configuration and token count, and
    the tools it offered (how the answer's calls are read)."""

    text: str
    config: GenerationConfig
    tokens: int
    tools: ToolSpec | None = None
    tool_format: ToolFormat = ToolFormat.GENERIC

    @property
    def offers_tools(self) -> bool:
        return self.tools is not None and self.tools.active

    def parse(self, text: str) -> ParsedAnswer | None:
        """The answer's text and calls (None without tools: the text as it is)."""
        if self.tools is None or not self.offers_tools:
            return None
        return parse_answer(text, self.tools, self.tool_format)

    def content_stream(self) -> ContentStream | None:
        if self.tools is None or not self.offers_tools:
            return None
        return ContentStream(self.tools, self.tool_format)

    def call_stream(self) -> CallStream | None:
        """Calls streamed as written, where a grammar makes them sure (see CallStream)."""
        if self.tools is None or not self.offers_tools:
            return None
        generic = self.tool_format is ToolFormat.GENERIC
        return CallStream(generic=generic) if generic or self.tools.must_call else None


async def prepare(
    served: ServedModel, gen: GenerationRequest, path: str, *, prompt_param: str | None = None
) -> PreparedPrompt:
    """``gen`` ready to generate, its token limit set (the request's, or the context's room),
    or a 400 when the prompt does not fit the context or the template refuses it (naming
    ``prompt_param``: by default chat's ``messages`` or the completion's ``prompt``)."""
    param = prompt_param or ("messages" if gen.is_chat else "prompt")
    # rendering and encoding run off the loop: a long chat takes milliseconds
    prepared = await asyncio.to_thread(_prompt, served, gen, param)
    log.debug("%s prompt: %r", path, prepared.text)
    limit = served.llm.context_limit
    if prepared.tokens >= limit:
        raise bad_request(
            f"this model's context holds {limit} tokens, but the "
            f"{'messages come' if gen.is_chat else 'prompt comes'} to {prepared.tokens}: "
            f"shorten it to fewer than {limit} tokens (the server's --context raises the "
            "limit, up to the model's own)",
            param=param,
            code="context_length_exceeded",
        )
    config = replace(prepared.config, max_new_tokens=gen.max_tokens or limit - prepared.tokens)
    return replace(prepared, config=config)


def token_text(served: ServedModel, prepared: PreparedPrompt) -> Callable[[int], str] | None:
    """Each token's text, when the request asked for log-probabilities (None: it did not)."""
    if prepared.config.logprobs is None:
        return None
    decode = served.llm.tokenizer.decode
    return lambda token: decode([token])


def _prompt(served: ServedModel, gen: GenerationRequest, prompt_param: str) -> PreparedPrompt:
    """The prompt text (a chat rendered as ``generate --chat`` renders it, with the tools as
    the model's template shows them), the request's configuration in the server's mode (its
    stop strings, then those the chat format needs; a grammar where a call must be well
    formed) and the prompt's tokens."""
    llm = served.llm
    config = replace(gen.config, k=served.k)
    text = gen.prompt or ""
    spec, fmt = gen.tools, ToolFormat.GENERIC
    if gen.messages is not None:
        template = llm.prompter.template
        fmt = tool_format(template.source, is_fallback=template.is_fallback)
        messages = prompt_messages(gen.messages, spec or ToolSpec(()), fmt)
        shown = None
        if spec is not None and spec.active and fmt is not ToolFormat.GENERIC:
            shown = [tool.as_openai() for tool in spec.callable]
        try:
            text, config = llm.chat_prompt(
                messages, config, tools=shown, continue_final=gen.continue_final
            )
        except FleetguiError as exc:  # the template refused the conversation
            raise bad_request(str(exc), param=prompt_param) from exc
        if spec is not None and spec.active:
            grammar, schema = call_grammar(spec, fmt, config.json_schema)
            config = replace(config, grammar=grammar, json_schema=schema)
    try:  # a schema the grammar engine cannot use is the client's mistake, said up front
        grammar = grammar_of(config)
        if grammar is not None:
            llm.tokenizer.grammar.check(grammar)
    except FleetguiError as exc:
        param = "tools" if spec is not None and spec.active else "response_format"
        raise bad_request(str(exc), param=param) from exc
    return PreparedPrompt(text, config, len(llm.tokenizer.encode(text)), spec, fmt)
