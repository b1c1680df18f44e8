"""The API's endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions`` and ``GET /health``.

A request is checked and its prompt counted before it takes a stream slot, so that a bad one
is answered at once and never waits behind others. A streamed answer's generator is closed as
soon as its client has gone (a write fails, or aiohttp cancels the handler): the pipeline then
frees the stream on every stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from fleetgui.api.admission import Admission
from fleetgui.api.errors import SERVER_ERROR, ApiError, bad_request
from fleetgui.api.parsing import GenerationRequest, parse_chat, parse_completion, parse_json
from fleetgui.api.responses import Answer, finish_reason, model_object
from fleetgui.api.served import ServedModel
from fleetgui.api.sse import ClientGoneError, EventStream
from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.call_stream import CallStream
from fleetgui.runtime.generation import (
    GenerationError,
    GenerationResult,
    TokenDelta,
    grammar_of,
)
from fleetgui.runtime.token_logprobs import TokenLogprob
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


class StreamOutcome(enum.StrEnum):
    """How a request ended when not normally, as its log line says."""

    FAILED_MID_STREAM = "failed mid-stream"  # the generation failed after the answer began
    CLIENT_LEFT = "client left"


@dataclass
class RequestNote:
    """What the server's log line says of a request beside its status: tokens generated, how
    a streamed answer ended when not normally, and why a refused one was refused."""

    tokens: int = 0
    outcome: StreamOutcome | None = None
    refused: str = ""  # why the request got an error reply, if it did


#: the current request's note (the server's middleware sets a fresh one for each request: it
#: runs the handler in the same task, so the handler sees it)
NOTE: contextvars.ContextVar[RequestNote] = contextvars.ContextVar("fleetgui_api_note")


class ApiRoutes:
    def __init__(self, served: ServedModel, admission: Admission) -> None:
        self.served = served
        self.admission = admission

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/health", self.health)

    # -- models -------------------------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        served = self.served
        return web.json_response(
            {"object": "list", "data": [model_object(served.name, served.created)]}
        )

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.served.name:
            raise ApiError(
                f"the model {name!r} does not exist here: this server serves {self.served.name!r}",
                status=404,
                param="model",
                code="model_not_found",
            )
        return web.json_response(model_object(self.served.name, self.served.created))

    async def health(self, request: web.Request) -> web.Response:
        """Not OpenAI's: the server's load and the streams each stage holds."""
        stages: dict[str, int] = {}
        if self.served.stage_streams is not None:
            try:
                stages = await self.served.stage_streams()
            except FleetguiError as exc:
                raise ApiError(
                    f"a stage did not answer: {exc}", status=503, kind=SERVER_ERROR
                ) from exc
        admission = self.admission
        return web.json_response(
            {
                "status": "ok",
                "model": self.served.name,
                "streams": {
                    "active": admission.active,
                    "waiting": admission.waiting,
                    "max": admission.max_streams,
                    "max_waiting": admission.max_queued,
                },
                "stages": stages,
            }
        )

    # -- generation ---------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion)

    async def _generate(
        self, request: web.Request, parse: Callable[[dict[str, Any], str], GenerationRequest]
    ) -> web.StreamResponse:
        gen = parse(parse_json(await request.read()), self.served.name)
        # rendering and encoding run off the loop: a long chat takes milliseconds
        prepared = await asyncio.to_thread(self._prompt, gen)
        prompt, config, n_prompt = prepared.text, prepared.config, prepared.tokens
        log.debug("%s prompt: %r", request.path, prompt)
        llm = self.served.llm
        limit = llm.context_limit
        if n_prompt >= limit:
            raise bad_request(
                f"this model's context holds {limit} tokens, but the "
                f"{'messages come' if gen.is_chat else 'prompt comes'} to {n_prompt}: "
                f"shorten it to fewer than {limit} tokens",
                param="messages" if gen.is_chat else "prompt",
                code="context_length_exceeded",
            )
        config = replace(config, max_new_tokens=gen.max_tokens or limit - n_prompt)
        token_text = None
        if config.logprobs is not None:
            decode = llm.tokenizer.decode
            token_text = lambda token: decode([token])  # noqa: E731
        answer = Answer(
            self.served.name, gen.is_chat, include_usage=gen.include_usage, token_text=token_text
        )
        async with self.admission.slot():
            if gen.stream:
                return await self._stream(request, replace(prepared, config=config), answer)
            try:
                result = await llm.agenerate_result(prompt, config)
            except GenerationError as exc:
                raise bad_request(str(exc)) from exc
        NOTE.get().tokens = len(result.token_ids)
        return web.json_response(answer.complete(result, prepared.parse(result.text)))

    def _prompt(self, gen: GenerationRequest) -> PreparedPrompt:
        """The prompt text (a chat rendered as ``generate --chat`` renders it, with the tools
        as the model's template shows them), the request's configuration in the server's mode
        (its stop strings, then those the chat format needs; a grammar where a call must be
        well formed) and the prompt's tokens."""
        llm = self.served.llm
        config = replace(gen.config, k=self.served.k)
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
                raise bad_request(str(exc), param="messages") from exc
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

    async def _stream(
        self, request: web.Request, prepared: PreparedPrompt, answer: Answer
    ) -> web.StreamResponse:
        events = EventStream(request)
        result: GenerationResult | None = None
        tokens = 0
        note = NOTE.get()
        items = self.served.llm.astream_result(prepared.text, prepared.config)
        # with tools offered, only what is surely text for the user goes out as it comes
        content = prepared.content_stream()
        calls = prepared.call_stream()
        answered = ""
        held: list[TokenLogprob] = []  # of tokens whose text has not gone out yet
        try:
            async with contextlib.aclosing(items):
                await events.open()
                if answer.chat:
                    await events.send(answer.chunk("", first=True))
                try:
                    async for item in items:
                        if isinstance(item, TokenDelta):
                            tokens += len(item.token_ids)
                            note.tokens = tokens
                            answered += item.text
                            held += item.logprobs
                            text = content.update(answered) if content else item.text
                            if text:
                                await events.send(answer.chunk(text, logprobs=held))
                                held = []
                            for piece in calls.update(answered) if calls else ():
                                await events.send(answer.call_chunk(piece))
                        else:
                            result = item
                except Exception as exc:  # after the headers: the error as an event
                    if isinstance(exc, FleetguiError):  # e.g. a worker lost for good
                        log.warning("%s failed mid-stream: %s", request.path, exc)
                    else:
                        log.exception("%s failed mid-stream", request.path)
                    error = ApiError(f"generation failed: {exc}", status=500, kind=SERVER_ERROR)
                    await events.send(error.body())
                    await events.done()
                    note.outcome = StreamOutcome.FAILED_MID_STREAM
                    return events.response
            assert result is not None
            note.tokens = len(result.token_ids)
            parsed = prepared.parse(result.text)
            await _send_end(
                events,
                answer,
                result=result,
                parsed=parsed,
                streams=(content, calls),
                held=held,
            )
        except ClientGoneError:
            note.outcome = StreamOutcome.CLIENT_LEFT
        return events.response


async def _send_end(
    events: EventStream,
    answer: Answer,
    *,
    result: GenerationResult,
    parsed: ParsedAnswer | None,
    streams: tuple[ContentStream | None, CallStream | None],
    held: list[TokenLogprob],
) -> None:
    """A streamed answer's last chunks: with tools, the text held back and the calls; the
    finish reason, the usage if asked, and the end of the stream."""
    finish = finish_reason(result)
    content, calls = streams
    if parsed is not None and content is not None:
        rest = content.rest(parsed.content or "")
        if rest:
            await events.send(answer.chunk(rest))
        if calls is not None:
            for piece in calls.finish(list(parsed.calls)):
                await events.send(answer.call_chunk(piece))
        else:
            for index, call in enumerate(parsed.calls):
                await events.send(answer.tool_call_chunk(index, call))
        if parsed.calls:
            finish = "tool_calls"
    await events.send(answer.chunk("", finish=finish, logprobs=held))
    if answer.include_usage:
        await events.send(answer.usage_chunk(result))
    await events.done()
