"""Anthropic's Messages API: ``POST /v1/messages`` (streamed or not) and
``POST /v1/messages/count_tokens``, for Claude Code and the ``anthropic`` SDK.

A message is generated exactly as the chat completion its request amounts to (see
:mod:`~fleetgui.api.messages_request`); only the answer's shape differs
(:mod:`~fleetgui.api.messages_events`). Errors on these paths come in Anthropic's shape (the
server's middleware asks :func:`is_messages_path`).
"""

from __future__ import annotations

from aiohttp import web

from fleetgui.api.admission import Admission
from fleetgui.api.answer_stream import generate_whole, stream_answer
from fleetgui.api.messages_events import MessageEventWriter, MessageObject
from fleetgui.api.messages_request import parse_messages
from fleetgui.api.parsing import parse_json
from fleetgui.api.prepared import prepare
from fleetgui.api.served import ServedModel
from fleetgui.api.sse import EventStream

PATH = "/v1/messages"


def is_messages_path(path: str) -> bool:
    return path == PATH or path.startswith(PATH + "/")


class MessagesRoutes:
    def __init__(self, served: ServedModel, admission: Admission) -> None:
        self.served = served
        self.admission = admission

    def add_to(self, app: web.Application) -> None:
        app.router.add_post(PATH, self.create)
        app.router.add_post(PATH + "/count_tokens", self.count_tokens)

    async def count_tokens(self, request: web.Request) -> web.Response:
        gen = parse_messages(parse_json(await request.read()), self.served.name)
        prepared = await prepare(self.served, gen, request.path)
        return web.json_response({"input_tokens": prepared.tokens})

    async def create(self, request: web.Request) -> web.StreamResponse:
        gen = parse_messages(parse_json(await request.read()), self.served.name)
        prepared = await prepare(self.served, gen, request.path)
        message = MessageObject(self.served.name, prepared.tokens)
        async with self.admission.slot():
            if gen.stream:
                events = EventStream(request)
                writer = MessageEventWriter(events, message)
                await stream_answer(self.served, prepared, writer, request.path)
                return events.response
            result = await generate_whole(self.served, prepared)
        return web.json_response(message.complete(result, prepared.parse(result.text)))
