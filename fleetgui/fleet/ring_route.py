"""The fleet's route: the coordinator's stages, then a ring of workers (or a hub, to compare).

In a ring the coordinator sends one FORWARD to the first worker, each worker passes its
activations to the next, and the last one sends the head's RESULT back: N hops per request. In a
hub every worker answers the coordinator, which sends the activations on: 2(N-1) hops.

Failover: the route keeps each stream's passes since its last reset (token ids, rewind,
compaction). When a worker is lost, the waiting requests fail; the first of them asks
``recover`` for a new ring (a new epoch), and every stream then rebuilds its cache by running
its passes again, as they ran, through the new ring before its request is run again. The caller
sees the same results an uninterrupted run gives: passes of other shapes compute with other
rounding (with int8 activations, the CPU default for int8/int4 weights, replaying a reply's steps
as one chunk changed the text after 5 of 8 failovers in ``benchmarks/soak_fleet.py``), so a
replay costs one ring pass per step the stream took.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace

from fleetgui.fleet.forward_codec import (
    encode_forward,
    result_from_message,
)
from fleetgui.fleet.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.fleet.protocol import Message, Op, raise_if_error
from fleetgui.fleet.secure_socket import RequestTimeoutError
from fleetgui.runtime.route import LocalRoute, Route
from fleetgui.runtime.stage import SHORT_WORK_MS, ForwardRequest, ForwardResult, Stage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ring:
    """The participants of one epoch: the coordinator's stages, then workers in ring order."""

    epoch: int
    local: tuple[Stage, ...]
    members: tuple[WorkerLink, ...]
    topology: str = "ring"  # ring | hub
    n_stages: int = 0  # stages of the model in all (the coordinator's and the workers')

    @functools.cached_property
    def local_route(self) -> LocalRoute | None:
        """The coordinator's stages chained (None if it runs none)."""
        return LocalRoute(self.local) if self.local else None


Recover = Callable[[Exception], Awaitable[Ring]]


@dataclass
class _StreamRecord:
    passes: list[ForwardRequest] = field(default_factory=list)  # since the last reset, no head
    epoch: int = -1


@dataclass(frozen=True)
class RouteConfig:
    """How the fleet route runs requests."""

    forward_timeout_s: float = 120.0  # one request through the whole ring
    max_recoveries: int = 3  # per request
    # the coordinator's one stage before the workers runs short passes on the event loop's
    # thread once one took at most this long (SHORT_WORK_MS; 0: always on its lane). Bench
    # Llama, coordinator + 1 worker, 2 streams: +9.5 %, +5.3 % and +7.9 % tok/s against 0 (15
    # of 16, 11 of 16 and 8 of 12 alternations faster); one stream: no change (0.976-1.015)
    inline_ms: float = SHORT_WORK_MS


class RingRoute(Route):
    """Runs requests through the coordinator's stages and the worker ring (see module doc)."""

    def __init__(
        self,
        ring: Ring,
        dispatcher: Dispatcher,
        *,
        recover: Recover | None = None,
        config: RouteConfig | None = None,
        on_hop: Callable[[int, float], None] | None = None,
    ) -> None:
        if not ring.local and not ring.members:
            raise ValueError("a route needs at least one stage")
        self.ring = ring
        self.dispatcher = dispatcher
        self.recover = recover
        self.config = config or RouteConfig()
        self.on_hop = on_hop  # (stream, ms): a request's time in the ring minus worker compute
        self._records: dict[int, _StreamRecord] = {}
        self._recovering = asyncio.Lock()
        self.recoveries = 0
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._admitting = asyncio.Event()
        self._admitting.set()
        self._switching = asyncio.Lock()

    @property
    def n_stages(self) -> int:
        return self.ring.n_stages or len(self.ring.local) + len(self.ring.members)

    # -- running ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _admitted(self) -> AsyncIterator[None]:
        while not self._admitting.is_set():
            await self._admitting.wait()
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def switch(self, build: Callable[[], Awaitable[Ring]]) -> Ring:
        """Move to the ring ``build`` sets up, once no request is in flight (see module doc)."""
        async with self._switching:
            self._admitting.clear()
            try:
                await self._idle.wait()
                self.ring = await build()
            finally:
                self._admitting.set()
        return self.ring

    async def run(self, request: ForwardRequest) -> ForwardResult:
        async with self._admitted():
            return await self._run(request)

    async def _run(self, request: ForwardRequest) -> ForwardResult:
        record = self._records.setdefault(request.stream_id, _StreamRecord(epoch=self.ring.epoch))
        for attempt in range(self.config.max_recoveries + 1):
            ring = self.ring
            try:
                if record.epoch != ring.epoch:
                    await self._replay(ring, request.stream_id, record.passes)
                    record.epoch = ring.epoch
                result = await self._run_once(ring, request)
            except (WorkerLostError, RequestTimeoutError) as exc:
                if self.recover is None or attempt == self.config.max_recoveries:
                    raise
                try:
                    await self._recover(ring, exc)
                except (WorkerLostError, RequestTimeoutError) as again:
                    log.warning("rebuilding the ring failed (%s); trying again", again)
                continue
            record.passes.append(replace(request, head=None))
            return result
        raise AssertionError("unreachable")

    async def _recover(self, failed: Ring, exc: Exception) -> None:
        async with self._recovering:
            if self.ring.epoch != failed.epoch:
                return  # another stream already rebuilt the ring
            if self.recover is None:
                raise exc
            log.warning("rebuilding the ring after: %s", exc)
            started = time.perf_counter()
            self.ring = await self.recover(exc)
            self.recoveries += 1
            log.warning(
                "ring epoch %d ready in %.1f s", self.ring.epoch, time.perf_counter() - started
            )

    async def _replay(self, ring: Ring, stream_id: int, passes: list[ForwardRequest]) -> None:
        for stage in ring.local:
            await stage.reset(stream_id)
        started = time.perf_counter()
        for request in passes:
            await self._run_once(ring, request)
        log.info(
            "stream %d: replayed %d passes into epoch %d in %.2f s",
            stream_id,
            len(passes),
            ring.epoch,
            time.perf_counter() - started,
        )

    async def _run_once(self, ring: Ring, request: ForwardRequest) -> ForwardResult:
        compute: dict[int, float] = {}
        current = request
        result = ForwardResult(request.stream_id)
        if ring.local_route is not None:
            local = ring.local_route
            sent = replace(request, head=None) if ring.members else request
            if len(ring.local) == 1 and ring.members:  # one stage before the workers
                result = await local.run_inline_if_short(sent, self.config.inline_ms)
            else:
                result = await local.run(sent)
            if not ring.members:
                return result
            compute.update(result.compute_ms)
            if result.payload is None:
                raise RuntimeError("the coordinator's stages returned no hidden states")
            current = replace(request, payload=result.payload)
        if ring.members:
            targets = [ring.members[0]] if ring.topology == "ring" else list(ring.members)
            for position, link in enumerate(targets):
                last = position == len(targets) - 1
                sent = current if last else replace(current, head=None)
                result = await self._remote(ring, link, sent, compute)
                compute.update(result.compute_ms)
                if not last:
                    if result.payload is None:
                        raise RuntimeError(f"worker {link.name} returned no hidden states")
                    current = replace(request, payload=result.payload)
        result.compute_ms = compute
        return result

    async def _remote(
        self, ring: Ring, link: WorkerLink, request: ForwardRequest, compute: dict[int, float]
    ) -> ForwardResult:
        request_id, future = self.dispatcher.new()
        meta = {"epoch": ring.epoch, "compute_ms": {str(k): v for k, v in compute.items()}}
        started = time.perf_counter()
        try:
            await link.send(encode_forward(request, request_id=request_id, extra_meta=meta))
            async with asyncio.timeout(self.config.forward_timeout_s):
                message = await future
        except TimeoutError:
            raise RequestTimeoutError(
                f"no result from the ring within {self.config.forward_timeout_s:g} s"
            ) from None
        finally:
            self.dispatcher.forget(request_id)
        result = result_from_message(raise_if_error(message, f"the ring (epoch {ring.epoch})"))
        if self.on_hop is not None:
            elapsed = (time.perf_counter() - started) * 1000
            remote = sum(ms for stage, ms in result.compute_ms.items() if stage not in compute)
            self.on_hop(request.stream_id, max(0.0, elapsed - remote))
        return result

    # -- stream lifecycle ---------------------------------------------------------------------

    async def _each_member(self, op: Op, stream_id: int) -> None:
        for link in self.ring.members:
            try:
                await link.call(Message(op), stream_id=stream_id)
            except (WorkerLostError, RequestTimeoutError) as exc:
                log.info("%s of stream %d skipped on %s: %s", op.name, stream_id, link.name, exc)
                self._records.setdefault(stream_id, _StreamRecord()).epoch = -1

    async def reset(self, stream_id: int) -> None:
        for stage in self.ring.local:
            await stage.reset(stream_id)
        record = self._records.setdefault(stream_id, _StreamRecord())
        record.passes, record.epoch = [], self.ring.epoch
        await self._each_member(Op.RESET, stream_id)

    async def release(self, stream_id: int) -> None:
        for stage in self.ring.local:
            await stage.release(stream_id)
        self._records.pop(stream_id, None)
        await self._each_member(Op.RELEASE, stream_id)

    async def close(self) -> None:
        for stage in self.ring.local:
            await stage.close()
