"""The Responses API's endpoints: ``POST /v1/responses`` (streamed or not),
``GET /v1/responses/{id}`` and ``DELETE /v1/responses/{id}``.

A response is generated exactly as the chat completion its request amounts to (the same
prompt, tools, grammar and stream slot; see :mod:`~fleetgui.api.responses_request`); only the
answer's shape differs.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from fleetgui.api.admission import Admission
from fleetgui.api.answer_stream import generate_whole, stream_answer
from fleetgui.api.errors import bad_request
from fleetgui.api.parsing import parse_json
from fleetgui.api.prepared import prepare, token_text
from fleetgui.api.responses_events import ResponseEventWriter
from fleetgui.api.responses_objects import ResponseObject, as_messages
from fleetgui.api.responses_request import ResponsesRequest, parse_responses
from fleetgui.api.responses_store import ResponseStore, StoredResponse
from fleetgui.api.served import ServedModel
from fleetgui.api.sse import EventStream

log = logging.getLogger(__name__)


class ResponsesRoutes:
    def __init__(self, served: ServedModel, admission: Admission, store: ResponseStore) -> None:
        self.served = served
        self.admission = admission
        self.store = store

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self.create)
        app.router.add_get("/v1/responses/{id}", self.retrieve)
        app.router.add_delete("/v1/responses/{id}", self.delete)

    async def retrieve(self, request: web.Request) -> web.Response:
        return web.json_response(self.store.get(request.match_info["id"]).body)

    async def delete(self, request: web.Request) -> web.Response:
        response_id = request.match_info["id"]
        self.store.delete(response_id)
        return web.json_response({"id": response_id, "object": "response", "deleted": True})

    async def create(self, request: web.Request) -> web.StreamResponse:
        body = parse_json(await request.read())
        history: tuple[dict[str, Any], ...] = ()
        previous = body.get("previous_response_id")
        if previous is not None:
            if not isinstance(previous, str) or not previous:
                raise bad_request(
                    "'previous_response_id' must be a response's id", param="previous_response_id"
                )
            history = self.store.get(previous, param="previous_response_id").messages
        req = parse_responses(body, self.served.name, history)
        prepared = await prepare(self.served, req.chat, request.path, prompt_param="input")
        response = ResponseObject(
            self.served.name,
            req.echo,
            token_text(self.served, prepared),
            namespaces=req.tools.namespaces,
        )
        async with self.admission.slot():
            if req.chat.stream:
                events = EventStream(request)
                writer = ResponseEventWriter(events, response)
                await stream_answer(self.served, prepared, writer, request.path)
                if writer.final is not None:
                    self._keep(req, writer.final)
                return events.response
            result = await generate_whole(self.served, prepared)
        answer = response.complete(result, prepared.parse(result.text))
        self._keep(req, answer)
        return web.json_response(answer)

    def _keep(self, req: ResponsesRequest, body: dict[str, Any]) -> None:
        """Stores the response (when asked to) with the conversation it ends."""
        if req.store:
            messages = (*req.conversation, *as_messages(body["output"]))
            self.store.put(StoredResponse(body, messages))
