"""The API's endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions`` and ``GET /health`` (the Responses API's are in
:mod:`~fleetgui.api.responses_routes`).

A request is checked and its prompt counted before it takes a stream slot, so that a bad one
is answered at once and never waits behind others. A streamed answer's generator is closed as
soon as its client has gone (a write fails, or aiohttp cancels the handler): the pipeline then
frees the stream on every stage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from fleetgui.api.admission import Admission
from fleetgui.api.answer_stream import generate_whole, stream_answer
from fleetgui.api.chunk_writer import ChunkWriter
from fleetgui.api.errors import SERVER_ERROR, ApiError
from fleetgui.api.parsing import GenerationRequest, parse_chat, parse_completion, parse_json
from fleetgui.api.prepared import prepare, token_text
from fleetgui.api.responses import Answer, model_object
from fleetgui.api.served import ServedModel
from fleetgui.api.sse import EventStream
from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)


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
        prepared = await prepare(self.served, gen, request.path)
        answer = Answer(
            self.served.name,
            gen.is_chat,
            include_usage=gen.include_usage,
            token_text=token_text(self.served, prepared),
        )
        async with self.admission.slot():
            if gen.stream:
                events = EventStream(request)
                await stream_answer(
                    self.served, prepared, ChunkWriter(events, answer), request.path
                )
                return events.response
            result = await generate_whole(self.served, prepared)
        return web.json_response(answer.complete(result, prepared.parse(result.text)))
