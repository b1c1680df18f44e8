"""The fleet's route: the coordinator's stages, then a ring of workers (or a hub, to compare).

In a ring the coordinator sends one FORWARD to the first worker, each worker passes its
activations to the next, and the last one sends the head's RESULT back: N hops per request. In a
hub every worker answers the coordinator, which sends the activations on: 2(N-1) hops. One such
pass is :func:`~fleetgui.fleet.ring.forward_pass.run_pass`.

The route does not own the ring: it asks its owner (``current``: the session's deployment, which
sets up every epoch) for the ring in force at each request, and admits requests through a
:class:`~fleetgui.fleet.ring.route_gate.RouteGate` shared with that owner, which takes it
exclusively to move to another ring once the requests in flight are done.

Failover: the route keeps each stream's passes since its last reset (token ids, rewind,
compaction). When a worker is lost, the waiting requests fail; the first of them asks
``recover`` for a new ring (a new epoch), and every stream then rebuilds its cache by running
its passes again, as they ran, through the new ring before its request is run again. The caller
sees the same results an uninterrupted run gives: passes of other shapes compute with other
rounding (with int8 activations, the CPU default for int8/int4 weights, replaying a reply's steps
as one chunk changed the text after 5 of 8 failovers in ``benchmarks/soak_fleet.py``), so a
replay costs one ring pass per step the stream took.

When one worker holds the whole model, plain decode steps run as DECODE segments the worker
chains by itself (:mod:`fleetgui.worker.decode_run`): no round trip per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from fleetgui.fleet.ring.decode_client import decode_on_worker
from fleetgui.fleet.ring.forward_pass import run_batch_pass, run_pass
from fleetgui.fleet.ring.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.fleet.ring.route_gate import RouteGate
from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.net.decode_codec import MAX_DECODE_STEPS, DecodeSteps
from fleetgui.net.protocol import Message, Op, RemoteError
from fleetgui.net.secure_socket import RequestTimeoutError
from fleetgui.runtime.route import DecodeRun, LocalRoute, Route
from fleetgui.runtime.stage import (
    SHORT_WORK_MS,
    ForwardRequest,
    ForwardResult,
    GreedyHead,
    HeadOp,
    SampleHead,
    Stage,
    StageError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ring:
    """The participants of one epoch: the coordinator's stages, then workers in ring order."""

    epoch: int
    local: tuple[Stage, ...]
    members: tuple[WorkerLink, ...]
    wiring: Wiring = Wiring.RING
    n_stages: int = 0  # stages of the model in all (the coordinator's and the workers')

    @functools.cached_property
    def local_route(self) -> LocalRoute | None:
        """The coordinator's stages chained (None if it runs none)."""
        return LocalRoute(self.local) if self.local else None


Recover = Callable[[Exception], Awaitable[Ring]]
CurrentRing = Callable[[], Ring]  # the ring in force, asked of its owner at each request


class OnHop(Protocol):
    """Told of each ring pass: its time in the ring minus worker compute, and the bytes of its
    payload (what each hop but the last carries; 0 when not known)."""

    def __call__(self, stream_id: int, ms: float, nbytes: int = 0) -> None: ...


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
    # thread once one took at most this long (0: always on its lane): the hand-off costs more
    # than such a pass (docs/design-measurements.md)
    inline_ms: float = SHORT_WORK_MS
    # a worker holding the whole model chains decode steps itself (False: one request a step)
    worker_decode: bool = True


class RingRoute(Route):
    """Runs requests through the coordinator's stages and the worker ring (see module doc)."""

    def __init__(
        self,
        current: CurrentRing,
        gate: RouteGate,
        dispatcher: Dispatcher,
        *,
        recover: Recover | None = None,
        config: RouteConfig | None = None,
        on_hop: OnHop | None = None,
    ) -> None:
        ring = current()
        if not ring.local and not ring.members:
            raise ValueError("a route needs at least one stage")
        self._current = current
        self._gate = gate
        self.dispatcher = dispatcher
        self.recover = recover
        self.config = config or RouteConfig()
        self.on_hop = on_hop
        self._records: dict[int, _StreamRecord] = {}
        self._recovering = asyncio.Lock()
        self.recoveries = 0
        self.decode_segments = 0  # DECODEs sent to a worker holding the whole model

    @property
    def ring(self) -> Ring:
        """The ring in force, as its owner has it now."""
        return self._current()

    @property
    def n_stages(self) -> int:
        return self.ring.n_stages or len(self.ring.local) + len(self.ring.members)

    @property
    def pipeline_depth(self) -> int:
        """This PC's stages (one at a time each, on its lanes) and each worker (one pass at a
        time, whatever stages it holds)."""
        ring = self.ring
        return len(ring.local) + len(ring.members)

    # -- running ------------------------------------------------------------------------------

    async def run(self, request: ForwardRequest) -> ForwardResult:
        async with self._gate.admitted():
            return (await self._run([request]))[0]

    async def run_batch(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        """One pass of several streams' requests: one message a hop (:meth:`run` for each,
        failover included)."""
        async with self._gate.admitted():
            return await self._run(requests)

    async def _run(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        records = [
            self._records.setdefault(r.stream_id, _StreamRecord(epoch=self.ring.epoch))
            for r in requests
        ]
        for attempt in range(self.config.max_recoveries + 1):
            ring = self.ring
            try:
                for request, record in zip(requests, records, strict=True):
                    if record.epoch != ring.epoch:
                        await self._replay(ring, request.stream_id, record.passes)
                        record.epoch = ring.epoch
                results = await run_batch_pass(
                    ring,
                    requests,
                    dispatcher=self.dispatcher,
                    config=self.config,
                    on_hop=self.on_hop,
                )
            except (WorkerLostError, RequestTimeoutError) as exc:
                if self.recover is None or attempt == self.config.max_recoveries:
                    raise
                try:
                    await self._recover(ring, exc)
                except (WorkerLostError, RequestTimeoutError) as again:
                    log.warning("rebuilding the ring failed (%s); trying again", again)
                continue
            for request, record in zip(requests, records, strict=True):
                record.passes.append(replace(request, head=None))
            return results
        raise AssertionError("unreachable")

    async def _recover(self, failed: Ring, exc: Exception) -> None:
        async with self._recovering:
            if self.ring.epoch != failed.epoch:
                return  # another stream already rebuilt the ring
            if self.recover is None:
                raise exc
            log.warning("rebuilding the ring after: %s", exc)
            started = time.perf_counter()
            await self.recover(exc)  # the owner has the new ring in force when it returns
            self.recoveries += 1
            log.warning(
                "ring epoch %d ready in %.1f s", self.ring.epoch, time.perf_counter() - started
            )

    async def _replay(self, ring: Ring, stream_id: int, passes: list[ForwardRequest]) -> None:
        for stage in ring.local:
            await stage.reset(stream_id)
        started = time.perf_counter()
        for request in passes:
            await self._run_pass(ring, request)
        log.info(
            "stream %d: replayed %d passes into epoch %d in %.2f s",
            stream_id,
            len(passes),
            ring.epoch,
            time.perf_counter() - started,
        )

    async def _run_pass(self, ring: Ring, request: ForwardRequest) -> ForwardResult:
        return await run_pass(
            ring, request, dispatcher=self.dispatcher, config=self.config, on_hop=self.on_hop
        )

    # -- decode runs --------------------------------------------------------------------------

    def _decodes_on_worker(self, ring: Ring, stream_id: int) -> bool:
        """Whether the run can go to one worker holding the whole model, whose cache for the
        stream is current (after a failover, the step-by-step path replays it first)."""
        record = self._records.get(stream_id)
        return (
            self.config.worker_decode
            and not ring.local
            and len(ring.members) == 1
            and "DECODE" in ring.members[0].hello.get("ops", ())
            and record is not None
            and record.epoch == ring.epoch
        )

    async def decode(self, run: DecodeRun) -> AsyncGenerator[ForwardResult, None]:
        """The run's steps: on a worker holding the whole model as DECODE segments of at most
        MAX_DECODE_STEPS, otherwise one ring pass a step. Heads are drawn once, in order, and
        kept until their step ran, so a failover mid-segment samples as an unbroken run."""
        heads: deque[HeadOp] = deque()
        token: int | None = run.token if run.remaining > 0 else None
        try:
            while token is not None:
                ring = self.ring
                if not self._decodes_on_worker(ring, run.stream_id):  # one ring pass
                    head = heads.popleft() if heads else run.next_head()
                    ids = np.array([[token]], dtype=np.int64)
                    result = await self.run(ForwardRequest(run.stream_id, ids, head=head))
                    token = run.after(result)
                    yield result
                    continue
                segment = self._worker_segment(ring, run, token, heads)
                async with contextlib.aclosing(segment) as results:
                    async for result in results:
                        token = run.after(result)
                        yield result
                        if token is None:
                            break
        finally:
            run.stop()

    async def _worker_segment(
        self, ring: Ring, run: DecodeRun, token: int, heads: deque[HeadOp]
    ) -> AsyncGenerator[ForwardResult, None]:
        """One DECODE on the ring's only worker; a lost worker rebuilds the ring and ends the
        segment (the caller goes on step by step, replaying the stream first)."""
        link = ring.members[0]
        while len(heads) < min(run.remaining, MAX_DECODE_STEPS):
            heads.append(run.next_head())
        steps = DecodeSteps(run.stream_id, token, _decode_heads(heads), run.stop_ids)
        record = self._records[run.stream_id]
        self.decode_segments += 1
        timeout = self.config.forward_timeout_s
        results = decode_on_worker(
            link, self.dispatcher, steps, epoch=ring.epoch, timeout_s=timeout
        )
        async with self._gate.admitted(), contextlib.aclosing(results):
            since = time.perf_counter()
            try:
                async for result in results:
                    ids = np.array([[token]], dtype=np.int64)
                    record.passes.append(ForwardRequest(run.stream_id, ids))
                    heads.popleft()
                    now = time.perf_counter()
                    if self.on_hop is not None:
                        compute = sum(result.compute_ms.values())
                        self.on_hop(run.stream_id, max(0.0, (now - since) * 1000 - compute))
                    since = now
                    if result.tokens:
                        token = result.tokens[-1]
                    yield result
            except (WorkerLostError, RequestTimeoutError) as exc:
                if self.recover is None:
                    raise
                with contextlib.suppress(WorkerLostError, RequestTimeoutError):
                    await self._recover(ring, exc)

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

    async def fork(self, source: int, stream_id: int, keep: int) -> None:
        """:meth:`Route.fork` on this PC's stages and each worker (FORK). The new stream's
        record starts as the source's passes, so a failover replays it as it replays any
        stream (its first request keeps ``keep`` entries of them); a worker lost meanwhile
        leaves the record to replay. Raises :class:`StageError` when the source's cache is not
        current in this ring or a worker cannot fork (then the caller prefills instead)."""
        if source == stream_id:  # checked before anything of either is dropped
            raise StageError(f"stream {stream_id} cannot be started from itself")
        async with self._gate.admitted():
            ring = self.ring
            origin = self._records.get(source)
            if origin is None or origin.epoch != ring.epoch:
                raise StageError(f"stream {source} is not current in ring epoch {ring.epoch}")
            older = [link.name for link in ring.members if "FORK" not in link.hello.get("ops", ())]
            if older:
                raise StageError(f"worker(s) {', '.join(older)} cannot copy a stream (update them)")
            passes = [replace(done, stream_id=stream_id) for done in origin.passes]
            record = _StreamRecord(passes, epoch=ring.epoch)
            self._records[stream_id] = record
            try:
                for stage in ring.local:
                    await stage.fork(source, stream_id, keep)
                message = Message(Op.FORK, meta={"source": source, "keep": keep})
                for link in ring.members:
                    await link.call(message, stream_id=stream_id)
            except (WorkerLostError, RequestTimeoutError) as exc:
                log.info("stream %d: copy of %d cut (%s); it replays", stream_id, source, exc)
                record.epoch = -1
            except RemoteError as exc:  # the worker refused: the caller prefills instead
                await self.release(stream_id)
                raise StageError(str(exc)) from exc
            except BaseException:
                await self.release(stream_id)
                raise

    async def close(self) -> None:
        for stage in self.ring.local:
            await stage.close()


def _decode_heads(heads: deque[HeadOp]) -> tuple[GreedyHead | SampleHead, ...]:
    """The plain heads of a DECODE segment (a plain decode run draws no other kind)."""
    plain = tuple(head for head in heads if isinstance(head, GreedyHead | SampleHead))
    if len(plain) != len(heads):
        raise TypeError("a decode run's heads are greedy or sampled")
    return plain
