"""The API server's lifecycle: an aiohttp application on the running event loop (the
pipeline's), its key check, its error objects and one log line per request.

The log line says method, path, status, tokens generated and milliseconds, never the prompt
(the routes log that at debug level only). aiohttp's own access log is off: it would log a
second line per request, without the tokens.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from fleetgui.addresses import format_address
from fleetgui.api import DEFAULT_HOST, DEFAULT_PORT
from fleetgui.api.admission import Admission
from fleetgui.api.errors import SERVER_ERROR, ApiError, invalid_key
from fleetgui.api.messages_events import error_body
from fleetgui.api.messages_routes import MessagesRoutes, is_messages_path
from fleetgui.api.request_note import NOTE, RequestNote, StreamOutcome
from fleetgui.api.responses_routes import ResponsesRoutes
from fleetgui.api.responses_store import ResponseStore
from fleetgui.api.routes import ApiRoutes
from fleetgui.api.served import ServedModel
from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

RATE_WINDOW_S = 10.0  # requests per second are counted over this window
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ServeError(FleetguiError):
    """The server cannot start as asked."""


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  # 0: any free port (``ApiServer.port`` says which)
    api_key: str | None = None  # None: no key asked (allowed on loopback only)
    max_streams: int = 1
    max_queued: int | None = None  # None: 4 per stream slot

    def check(self) -> None:
        """Refuse to expose an open server: a host other than loopback needs a key."""
        if self.max_streams < 1:
            raise ServeError(f"--max-streams must be at least 1, got {self.max_streams}")
        if not 0 <= self.port <= 65535:
            raise ServeError(f"--port must be 0-65535, got {self.port}")
        if self.api_key is not None and not self.api_key.strip():
            raise ServeError("the API key is empty: give a key, or leave --api-key out")
        if self.api_key is None and not is_loopback(self.host):
            raise ServeError(
                f"--host {self.host} makes the API reachable from other machines, and without "
                "--api-key anyone there could use the fleet: add --api-key KEY (or --api-key "
                "keyring), or serve on 127.0.0.1"
            )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


class ApiServer:
    """Serves ``served`` on the running event loop until :meth:`stop`."""

    def __init__(self, served: ServedModel, config: ServerConfig) -> None:
        config.check()
        self.served = served
        self.config = config
        self.admission = Admission(config.max_streams, config.max_queued)
        self.responses = ResponseStore()  # the Responses API's stored responses
        self.requests = 0  # answered, any status
        self._recent: collections.deque[float] = collections.deque()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        """The API's base URL (what an OpenAI client takes as ``base_url``)."""
        port = self.config.port if self.port is None else self.port  # the bound one once started
        return f"http://{format_address(self.config.host, port)}/v1"

    def requests_per_s(self) -> float:
        self._forget_old(time.monotonic())
        return len(self._recent) / RATE_WINDOW_S

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        ApiRoutes(self.served, self.admission).add_to(app)
        ResponsesRoutes(self.served, self.admission, self.responses).add_to(app)
        MessagesRoutes(self.served, self.admission).add_to(app)
        return app

    async def start(self) -> str:
        """Listen; the base URL."""
        # handler_cancellation: a client that leaves cancels its handler, so a non-streamed
        # generation stops too (a streamed one also stops at its next write)
        self._runner = web.AppRunner(self.application(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.config.host, self.config.port)
        try:
            await self._site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise ServeError(
                f"cannot listen on {format_address(self.config.host, self.config.port)} "
                f"({exc.strerror or exc}): "
                "choose another --port, or stop what uses it"
            ) from exc
        addresses = self._runner.addresses  # the bound sockets' names: (host, port, ...)
        self.port = int(addresses[0][1]) if addresses else self.config.port
        log.info("serving %s at %s", self.served.name, self.url)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- every request ------------------------------------------------------------------------

    def _check_key(self, request: web.Request) -> None:
        expected = self.config.api_key
        if expected is None:
            return
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":  # Anthropic's clients send the key as x-api-key
            given = request.headers.get("x-api-key", "")
        if not given.strip():
            raise invalid_key(
                "no API key given: send it as 'Authorization: Bearer KEY' (an OpenAI "
                "client's api_key) or 'x-api-key: KEY'"
            )
        if not hmac.compare_digest(given.strip().encode(), expected.encode()):
            raise invalid_key("the API key is not this server's: check the key you were given")

    def _forget_old(self, now: float) -> None:
        while self._recent and now - self._recent[0] > RATE_WINDOW_S:
            self._recent.popleft()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        note = RequestNote()
        NOTE.set(note)
        response: web.StreamResponse
        error: ApiError | None = None
        try:
            self._check_key(request)
            response = await handler(request)
        except ApiError as exc:
            error = exc
        except web.HTTPException as exc:  # the router's 404 and 405, a body over the limit
            error = ApiError(f"{exc.reason}: {request.method} {request.path}", status=exc.status)
            if exc.status >= 500:
                error.kind = SERVER_ERROR
        except FleetguiError as exc:  # the fleet failed under the request (e.g. a worker lost)
            log.warning("%s %s failed: %s", request.method, request.path, exc)
            error = ApiError(str(exc), status=503, kind=SERVER_ERROR)
        except asyncio.CancelledError:
            note.outcome = StreamOutcome.CLIENT_LEFT
            self._log(request, 499, started, note)
            raise
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.path)
            error = ApiError(f"the server failed: {exc}", status=500, kind=SERVER_ERROR)
            error.logged = True  # the traceback above says why
        if error is not None:
            if not error.logged:
                note.refused = error.message
            # each API's clients read errors in its own shape
            body = error_body(error) if is_messages_path(request.path) else error.body()
            response = web.json_response(body, status=error.status)
        self._log(request, response.status, started, note)
        return response

    def _log(self, request: web.Request, status: int, started: float, note: RequestNote) -> None:
        now = time.monotonic()
        self.requests += 1
        self._recent.append(now)
        self._forget_old(now)
        ms = (time.perf_counter() - started) * 1000
        tail = f" ({note.outcome})" if note.outcome else ""
        if note.refused:  # the operator sees why without asking the client
            tail += f": {note.refused[:300]}"
        log.info(
            "%s %s %d %d tokens %.0f ms%s",
            request.method,
            request.path,
            status,
            note.tokens,
            ms,
            tail,
        )
