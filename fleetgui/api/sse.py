"""Server-sent events on an aiohttp ``StreamResponse``: ``data: JSON`` events, then
``data: [DONE]``, as OpenAI streams completions (the Responses API names each event instead,
and ends with no ``[DONE]``)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

DONE = b"data: [DONE]\n\n"


class ClientGoneError(Exception):
    """The client closed the connection while events were being written."""


class EventStream:
    """One streamed answer."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # a reverse proxy must not hold events back
            },
        )

    async def open(self) -> None:
        await self.response.prepare(self.request)

    async def send(self, event: dict[str, Any], name: str | None = None) -> None:
        data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        await self._write(f"{head}data: {data}\n\n".encode())

    async def done(self) -> None:
        await self._write(DONE)
        await self.response.write_eof()

    async def end(self) -> None:
        """The end of a stream of named events."""
        try:
            await self.response.write_eof()
        except ConnectionResetError as exc:
            raise ClientGoneError(str(exc)) from exc

    async def _write(self, data: bytes) -> None:
        # aiohttp raises ConnectionResetError (ClientConnectionResetError in 3.10+, a subclass)
        # when the client has gone; the caller then stops generating at once
        try:
            await self.response.write(data)
        except ConnectionResetError as exc:
            raise ClientGoneError(str(exc)) from exc
