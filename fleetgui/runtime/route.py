"""A route runs a request through every stage of the target model, in order.

``LocalRoute`` chains in-process stages. The fleet's ring transport is another route: the
coordinator runs stage 0 and the workers pass the activations along the ring themselves.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from fleetgui.runtime.lanes import Job, StageLanes
from fleetgui.runtime.stage import (
    SHORT_PASS_POSITIONS,
    BlockingStage,
    ForwardRequest,
    ForwardResult,
    HeadOp,
    Stage,
    StageError,
    fits_inline,
)


@dataclass(eq=False)  # a run is itself: compared and hashed by identity
class DecodeRun:
    """Plain decoding steps of one stream, which a route may chain by itself: each step feeds
    the token the previous one returned (the first feeds ``token``) with the head
    ``next_head()`` makes for it. The run ends after ``steps`` steps, after a token in
    ``stop_ids``, or at the first step after :meth:`stop`."""

    stream_id: int
    token: int
    steps: int
    next_head: Callable[[], HeadOp]
    stop_ids: frozenset[int] = frozenset()
    _taken: int = field(default=0, init=False)
    _stopped: threading.Event = field(default_factory=threading.Event, init=False)

    def stop(self) -> None:
        """Run no further steps (a step under way finishes)."""
        self._stopped.set()

    @property
    def remaining(self) -> int:
        """Steps the run may still take (0 once stopped)."""
        return 0 if self._stopped.is_set() else max(0, self.steps - self._taken)

    def request(self, token: int) -> ForwardRequest:
        """The next step: feed ``token`` (calls ``next_head``, so once per step, in order)."""
        return ForwardRequest(
            self.stream_id, np.array([[token]], dtype=np.int64), head=self.next_head()
        )

    def after(self, result: ForwardResult) -> int | None:
        """Count a finished step; the token the next one feeds, or None when the run ends."""
        self._taken += 1
        if self._taken >= self.steps or self._stopped.is_set() or not result.tokens:
            return None
        token = result.tokens[-1]
        return None if token in self.stop_ids else token


class Route(ABC):
    """The target model's stages, as one thing to run requests through."""

    @property
    @abstractmethod
    def n_stages(self) -> int: ...

    @property
    def pipeline_depth(self) -> int:
        """How many passes can compute at once, one on each part of the route that computes on
        its own (a stage's lane here, a process of the ring)."""
        return self.n_stages

    @abstractmethod
    async def run(self, request: ForwardRequest) -> ForwardResult:
        """Run ``request`` (token ids) through all stages; the last stage's head result."""

    async def run_batch(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        """Run several streams' requests (one each), in one pass a stage where the route can;
        this form runs them side by side, as separate passes."""
        return list(await asyncio.gather(*(self.run(request) for request in requests)))

    async def decode(self, run: DecodeRun) -> AsyncGenerator[ForwardResult, None]:
        """The results of ``run``'s steps as they finish. Closing the iterator early stops
        the run and waits for a step under way. This form runs one step at a time; a route
        that can start the next step without a trip through the event loop overrides it."""
        token: int | None = run.token if run.steps > 0 else None
        try:
            while token is not None:
                result = await self.run(run.request(token))
                token = run.after(result)
                yield result
        finally:
            run.stop()

    @abstractmethod
    async def reset(self, stream_id: int) -> None: ...

    @abstractmethod
    async def release(self, stream_id: int) -> None: ...

    @abstractmethod
    async def fork(self, source: int, stream_id: int, keep: int) -> None:
        """Start ``stream_id`` on every stage with a copy of stream ``source``'s first ``keep``
        live KV entries (:meth:`Stage.fork`); on an error nothing of ``stream_id`` is left."""

    @abstractmethod
    async def close(self) -> None: ...


_END = object()  # the last item a chain of decode steps posts


@dataclass
class _Trip:
    """One request (or decode run) on its way through the lanes."""

    post: Callable[[object], None]  # hands a result, an error or _END to the event loop
    run: DecodeRun | None = None
    compute: dict[int, float] = field(default_factory=dict)


class LocalRoute(Route):
    """Stages in this process, each a lane of :class:`~fleetgui.runtime.lanes.StageLanes`:
    a request goes from stage to stage on worker threads, and the event loop hears of it only
    at the end. A lone stream runs stage after stage on one thread (and a decode run step
    after step, never waiting for the loop); several streams overlap stage by stage. A trip
    through the event loop at every stage cost a decode step several times what this does
    (docs/design-measurements.md).
    """

    def __init__(self, stages: Sequence[Stage]) -> None:
        if not stages:
            raise ValueError("a route needs at least one stage")
        blocking: list[BlockingStage] = []
        for stage in stages:
            if not isinstance(stage, BlockingStage):
                raise TypeError(f"a local route runs in-process stages, not {stage!r}")
            blocking.append(stage)
        self.stages = blocking
        self._lanes = StageLanes(len(blocking))
        self._runs: set[DecodeRun] = set()  # decode runs under way (close stops them)
        self._short_pass_ms: float | None = None  # the last short pass's compute, all stages

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    def _stage_pass(
        self, index: int, requests: Sequence[ForwardRequest]
    ) -> tuple[list[ForwardResult], list[ForwardRequest] | None]:
        """Stage ``index``'s part of ``requests`` (one pass; the head runs on the last stage
        only); the next stage's requests, None after the last stage."""
        last = index == len(self.stages) - 1
        sent = list(requests) if last else [replace(r, head=None) for r in requests]
        stage = self.stages[index]
        if len(sent) == 1:
            results = [stage.forward_blocking(sent[0])]
        else:
            results = stage.forward_batch_blocking(sent)
        if last:
            return results, None
        following = [
            replace(request, payload=_hidden(result, index))
            for request, result in zip(requests, results, strict=True)
        ]
        return results, following

    def _job(
        self, index: int, requests: Sequence[ForwardRequest], trip: _Trip
    ) -> tuple[int, Job] | None:
        """Stage ``index``'s part of ``requests``; the next stage's (or step's) job."""
        try:
            results, following = self._stage_pass(index, requests)
            trip.compute.update(results[0].compute_ms)
            if following is not None:
                return index + 1, partial(self._job, index + 1, following, trip)
            for result in results:
                result.compute_ms = dict(trip.compute)
            trip.compute = {}
            run = trip.run
            token = None if run is None else run.after(results[0])
            trip.post(results if run is None else results[0])
            if run is None:
                return None
            if token is None:
                trip.post(_END)
                return None
            return 0, partial(self._job, 0, [run.request(token)], trip)
        except Exception as exc:
            trip.post(exc)
            if trip.run is not None:
                trip.post(_END)
            return None

    def run_blocking(self, request: ForwardRequest) -> ForwardResult:
        """Run ``request`` through every stage on the calling thread, without the lanes.

        For short passes whose caller can afford to block while the stages compute (a worker
        agent, the coordinator's stage before the ring). The caller makes sure no lane job of
        the same stream is under way; other streams' jobs may run meanwhile (each stream has its
        own requests and state)."""
        return self.run_batch_blocking([request])[0]

    def run_batch_blocking(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        """:meth:`run_blocking` for several streams' requests, one pass a stage."""
        compute: dict[int, float] = {}
        index, current = 0, list(requests)
        while True:
            results, following = self._stage_pass(index, current)
            compute.update(results[0].compute_ms)
            if following is None:
                for result in results:
                    result.compute_ms = dict(compute)
                return results
            index, current = index + 1, following

    async def run_inline_if_short(self, request: ForwardRequest, budget_ms: float) -> ForwardResult:
        """A short pass (at most :data:`~fleetgui.runtime.stage.SHORT_PASS_POSITIONS`) on the
        calling thread (:meth:`run_blocking`) once this route's last short pass took at most
        ``budget_ms`` (``math.inf``: every short pass, timed or not); anything else through the
        lanes (:meth:`run`)."""
        return (await self.run_batch_inline_if_short([request], budget_ms))[0]

    async def run_batch_inline_if_short(
        self, requests: Sequence[ForwardRequest], budget_ms: float
    ) -> list[ForwardResult]:
        """:meth:`run_inline_if_short` for one pass of several streams' requests, short when
        all of them together are."""
        short = sum(request.n_positions for request in requests) <= SHORT_PASS_POSITIONS
        if short and fits_inline(self._short_pass_ms, budget_ms):
            results = self.run_batch_blocking(requests)
        else:
            results = await self.run_batch(requests)
        if short:
            self._short_pass_ms = sum(results[0].compute_ms.values())
        return results

    async def run(self, request: ForwardRequest) -> ForwardResult:
        return (await self.run_batch([request]))[0]

    async def run_batch(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        """One pass of ``requests`` (each of another stream) through the lanes."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[object] = loop.create_future()

        def settle(outcome: object) -> None:
            if not done.done():
                done.set_result(outcome)

        trip = _Trip(partial(_post, loop, settle))
        self._lanes.submit(0, partial(self._job, 0, list(requests), trip))
        try:
            outcome = await asyncio.shield(done)
        except asyncio.CancelledError:
            # the stages still run the request and own its state: let them finish first
            await asyncio.wait([done])
            raise
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]  # the results, in the requests' order

    async def decode(self, run: DecodeRun) -> AsyncGenerator[ForwardResult, None]:
        """Each step's next one starts on the worker thread that finished it (see the class
        doc); results reach the loop as they come."""
        if run.steps < 1:
            return
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[object] = asyncio.Queue()
        ended = False
        trip = _Trip(partial(_post, loop, inbox.put_nowait), run)
        self._lanes.submit(0, partial(self._job, 0, [run.request(run.token)], trip))
        self._runs.add(run)
        try:
            while True:
                item = await inbox.get()
                if item is _END:
                    ended = True
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]
        finally:
            run.stop()
            while not ended:  # the step under way still owns the stream's state
                ended = await _shielded_get(inbox) is _END
            self._runs.discard(run)

    async def reset(self, stream_id: int) -> None:
        await asyncio.gather(*(stage.reset(stream_id) for stage in self.stages))

    async def release(self, stream_id: int) -> None:
        await asyncio.gather(*(stage.release(stream_id) for stage in self.stages))

    async def fork(self, source: int, stream_id: int, keep: int) -> None:
        if source == stream_id:  # checked before anything of either is dropped
            raise StageError(f"stream {stream_id} cannot be started from itself")
        try:
            await asyncio.gather(*(stage.fork(source, stream_id, keep) for stage in self.stages))
        except BaseException:
            await self.release(stream_id)
            raise

    async def close(self) -> None:
        """Stop decode runs after their step under way, refuse new requests, close the
        stages."""
        for run in list(self._runs):
            run.stop()
        self._lanes.close()
        await asyncio.gather(*(stage.close() for stage in self.stages))


def _post(loop: asyncio.AbstractEventLoop, deliver: Callable[[object], None], item: object) -> None:
    loop.call_soon_threadsafe(deliver, item)


async def _shielded_get(inbox: asyncio.Queue[object]) -> object:
    """The next item, even if the caller is being cancelled (it must wait for the thread)."""
    getter = asyncio.ensure_future(inbox.get())
    try:
        return await asyncio.shield(getter)
    except asyncio.CancelledError:
        await asyncio.wait([getter])
        return getter.result()


def _hidden(result: ForwardResult, index: int) -> np.ndarray:
    if result.payload is None:
        raise RuntimeError(f"stage {index} returned no hidden states")
    return result.payload
