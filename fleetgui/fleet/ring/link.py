"""The coordinator's connection to one worker: requests, replies and heartbeats.

Every link reads its socket in one task and hands each message to a :class:`Dispatcher` shared
by all links, keyed by request id: a FORWARD goes out on the first worker's link, and its RESULT
comes back on the last worker's. A heartbeat every ``interval_s`` proves the worker alive; when
none is answered for ``lost_after_s``, the link is lost: its own requests fail with
:class:`WorkerLostError` and ``on_lost`` is told (without one, every waiting request fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import (
    Flags,
    FrameLike,
    Message,
    Op,
    ProtocolError,
    encode,
    raise_if_error,
)
from fleetgui.net.secure_socket import RequestTimeoutError, SecureClient

log = logging.getLogger(__name__)


class WorkerLostError(FleetguiError):
    """A worker stopped answering (or its link failed) while the fleet needed it."""

    def __init__(self, worker: str, reason: str) -> None:
        super().__init__(f"worker {worker!r} was lost: {reason}")
        self.worker = worker
        self.reason = reason


@dataclass(frozen=True)
class WorkerEndpoint:
    """A worker to connect to: its name, ``tcp://host:port`` and pinned public key."""

    name: str
    endpoint: str
    public_key: str


@dataclass(frozen=True)
class LinkConfig:
    """Timeouts of a worker link."""

    connect_timeout_s: float = 10.0  # TCP connect and CURVE handshake
    request_timeout_s: float = 30.0  # a control request's reply
    heartbeat_interval_s: float = 0.5  # how often a live worker is asked
    lost_after_s: float = 3.0  # no heartbeat answered for this long: the worker is lost


class Dispatcher:
    """Request ids and the futures waiting for their replies, shared by a fleet's links.

    Each future has an owner (a link for its control requests, ``RING`` for requests through
    the ring) so that losing one worker fails only what depended on it."""

    RING = "ring"

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Message], object]] = {}
        self._streams: dict[int, tuple[asyncio.Queue[Message | BaseException], object]] = {}

    def new(self, owner: object = RING) -> tuple[int, asyncio.Future[Message]]:
        request_id = next(self._ids)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (future, owner)
        return request_id, future

    def new_stream(
        self, owner: object = RING
    ) -> tuple[int, asyncio.Queue[Message | BaseException]]:
        """A request answered by several messages (a DECODE's results): they arrive in the
        queue until one flagged FINAL or an error; a failure of ``owner`` arrives as its
        exception."""
        request_id = next(self._ids)
        queue: asyncio.Queue[Message | BaseException] = asyncio.Queue()
        self._streams[request_id] = (queue, owner)
        return request_id, queue

    def forget(self, request_id: int) -> None:
        self._pending.pop(request_id, None)
        self._streams.pop(request_id, None)

    def resolve(self, message: Message) -> None:
        stream = self._streams.get(message.request_id)
        if stream is not None:
            if message.flags & Flags.FINAL or message.op is Op.ERROR:
                del self._streams[message.request_id]
            stream[0].put_nowait(message)
            return
        entry = self._pending.pop(message.request_id, None)
        if entry is None:
            log.debug("dropping a reply to request %d nobody waits for", message.request_id)
        elif not entry[0].done():
            entry[0].set_result(message)

    def fail(self, exc: BaseException, owner: object | None = None) -> None:
        """Fail the futures of ``owner`` (None: all of them) with ``exc``."""
        for request_id, (future, who) in list(self._pending.items()):
            if owner is None or who is owner or who == owner:
                del self._pending[request_id]
                if not future.done():
                    future.set_exception(exc)
        for request_id, (queue, who) in list(self._streams.items()):
            if owner is None or who is owner or who == owner:
                del self._streams[request_id]
                queue.put_nowait(exc)


class WorkerLink:
    """One worker, connected and watched (see module doc)."""

    def __init__(
        self,
        name: str,
        endpoint: str,
        public_key: str,
        identity: KeyPair,
        dispatcher: Dispatcher,
        *,
        config: LinkConfig | None = None,
        on_lost: Callable[[WorkerLink, str], None] | None = None,
    ) -> None:
        self.name, self.endpoint, self.public_key = name, endpoint, public_key
        self.config = config or LinkConfig()
        self.dispatcher = dispatcher
        self.on_lost = on_lost
        self.client = SecureClient(
            identity, public_key, name=name, timeout_s=self.config.request_timeout_s
        )
        self.hello: dict[str, Any] = {}
        self.lost: str | None = None  # why, once lost
        self.last_seen = 0.0
        self.last_status: dict[str, Any] = {}
        self.rtt_ms: float | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> dict[str, Any]:
        """Connect, start reading and heartbeats; returns the worker's HELLO reply meta."""
        await self.client.connect(self.endpoint, self.config.connect_timeout_s)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._read()))
        reply = await self.call(Message(Op.HELLO))
        self.hello = dict(reply.meta)
        self.last_seen = time.monotonic()
        self._tasks.append(loop.create_task(self._heartbeats()))
        return self.hello

    async def call(
        self, message: Message, timeout_s: float | None = None, *, stream_id: int | None = None
    ) -> Message:
        """Send a control request and wait for its reply; an ERROR reply raises
        :class:`~fleetgui.net.protocol.RemoteError`."""
        if self.lost:
            raise WorkerLostError(self.name, self.lost)
        request_id, future = self.dispatcher.new(owner=self)
        fields: dict[str, Any] = {"request_id": request_id}
        if stream_id is not None:
            fields["stream_id"] = stream_id
        try:
            await self.client.send(encode(replace(message, **fields)))
            async with asyncio.timeout(timeout_s or self.config.request_timeout_s):
                reply = await future
        except TimeoutError:
            raise RequestTimeoutError(
                f"worker {self.name!r} did not answer {message.op.name} in time"
            ) from None
        finally:
            self.dispatcher.forget(request_id)
        return raise_if_error(reply, f"worker {self.name!r}")

    async def send(self, frames: Sequence[FrameLike]) -> None:
        """Send a message whose reply the caller awaits through the dispatcher."""
        if self.lost:
            raise WorkerLostError(self.name, self.lost)
        await self.client.send(frames)

    async def _read(self) -> None:
        while True:
            try:
                message = await self.client.recv(timeout_s=3600.0)
            except RequestTimeoutError:
                continue
            except ProtocolError as exc:
                log.warning("bad message from worker %s: %s", self.name, exc)
                continue
            self.last_seen = time.monotonic()
            self.dispatcher.resolve(message)

    async def _heartbeats(self) -> None:
        interval, lost_after = self.config.heartbeat_interval_s, self.config.lost_after_s
        while self.lost is None:
            started = time.monotonic()
            try:
                reply = await self.call(Message(Op.HEARTBEAT), timeout_s=lost_after)
            except (RequestTimeoutError, FleetguiError):
                if self.lost:
                    return
                silent = time.monotonic() - self.last_seen
                if silent >= lost_after:
                    self.mark_lost(f"no heartbeat for {silent:.1f} s")
                    return
                await asyncio.sleep(interval)
                continue
            self.last_status = dict(reply.meta)
            self.rtt_ms = (time.monotonic() - started) * 1000
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    def mark_lost(self, reason: str) -> None:
        """Declare the worker lost: fail what waits on the fleet, tell ``on_lost``."""
        if self.lost:
            return
        self.lost = reason
        log.warning("worker %s lost: %s", self.name, reason)
        error = WorkerLostError(self.name, reason)
        self.dispatcher.fail(error, owner=self)
        if self.on_lost is not None:
            self.on_lost(self, reason)  # decides whether requests through the ring must fail
        else:
            self.dispatcher.fail(error)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self.client.close()
