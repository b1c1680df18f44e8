"""Continuous batching across the pipeline: each pass is formed from the streams ready for it.

Streams hand their requests (decode steps, verify windows, prompt chunks) to the scheduler,
which sends them down the route as passes of several streams (:meth:`Route.run_batch`: one
OpenVINO pass a stage on paged stages, one message a hop). Up to one pass per stage is in
flight, so while stage 1 computes one group of streams stage 0 computes the next (the paper's
micro-batches, each now a batch); a pass takes at most its share of the active streams.

- Decode steps first. A prompt chunk joins a pass beside them with only as many tokens as keep
  that pass within :data:`~fleetgui.runtime.pass_costs.SLOWDOWN` of its cost without them (the
  stages' measured cost lines, :class:`~fleetgui.runtime.pass_costs.PassCosts`), in parts of
  one size while the estimate wavers (:func:`~fleetgui.runtime.pass_costs.steady_room`); the
  rest waits for the next pass. Alone, a prompt goes in the chunks its stream sent.
- A pass is formed once the streams of the last pass to come back have sent their next
  request, or after half that pass's time (:data:`GATHER_S`): streams that came back together
  go on together.
- A lone stream's plain decode run goes to the route whole (a local route chains its steps on
  its threads); it goes on step by step, batched, once another stream needs the stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field, replace

from fleetgui.runtime.metrics import MetricsBus, PassBatched
from fleetgui.runtime.pass_costs import PassCosts, steady_room
from fleetgui.runtime.route import DecodeRun, Route
from fleetgui.runtime.stage import ForwardRequest, ForwardResult

log = logging.getLogger(__name__)

# how long a pass waits for the streams that came back together: half the last pass (waiting
# longer than that costs more than a pass of its own), within these bounds
GATHER_S = (0.002, 0.05)
STEP_POSITIONS = 16  # a request with a head and at most this many positions is a step


@dataclass(eq=False)
class _Waiting:
    request: ForwardRequest  # what is still to run (a prompt chunk may run in parts)
    future: asyncio.Future[ForwardResult]
    done_ms: dict[int, float] = field(default_factory=dict)  # parts already run

    @property
    def is_step(self) -> bool:
        return self.request.head is not None and self.request.n_positions <= STEP_POSITIONS


@dataclass(frozen=True, slots=True)
class PassFormed:
    """What one pass carried (for the dashboard and tests)."""

    streams: tuple[int, ...]
    tokens: int
    prefill_tokens: int


class PassScheduler(Route):
    """Runs streams' requests on ``route`` as batched passes (see module doc)."""

    def __init__(
        self, route: Route, *, costs: PassCosts | None = None, metrics: MetricsBus | None = None
    ) -> None:
        """``metrics``: told of each pass (:class:`~fleetgui.runtime.metrics.PassBatched`)."""
        self.route = route
        self.metrics = metrics
        self.costs = costs or PassCosts()
        self._pending: deque[_Waiting] = deque()
        self._in_flight: dict[int, int] = {}  # stream -> its requests in passes under way
        self._passes = 0  # passes under way
        self._returning: dict[int, float] = {}  # came back: stream -> deadline to re-join
        self._solo: dict[int, DecodeRun] = {}  # lone decode runs handed to the route whole
        self._handed_over: set[int] = set()  # solo runs this stopped to go on batched
        self._wake: asyncio.TimerHandle | None = None
        self._room: int | None = None  # prompt tokens the last pass carried beside steps
        self._tasks: set[asyncio.Task[None]] = set()
        self.formed: deque[PassFormed] = deque(maxlen=256)

    @property
    def n_stages(self) -> int:
        return self.route.n_stages

    @property
    def pipeline_depth(self) -> int:
        return self.route.pipeline_depth

    # -- requests -----------------------------------------------------------------------------

    async def run(self, request: ForwardRequest) -> ForwardResult:
        future: asyncio.Future[ForwardResult] = asyncio.get_running_loop().create_future()
        waiting = _Waiting(request, future)
        self._pending.append(waiting)
        self._returning.pop(request.stream_id, None)
        self._stop_solo_runs(besides=request.stream_id)
        self._form()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if waiting in self._pending:  # not started: nothing of it ran
                self._pending.remove(waiting)
                raise
            await asyncio.wait([future])  # a pass under way owns the stream's state
            raise

    async def run_batch(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        return list(await asyncio.gather(*(self.run(request) for request in requests)))

    async def decode(self, run: DecodeRun) -> AsyncGenerator[ForwardResult, None]:
        """The run whole on the route while its stream is alone, then step by step."""
        token: int | None = run.token if run.remaining > 0 else None
        try:
            while token is not None:
                if self._alone(run.stream_id):
                    whole = DecodeRun(
                        run.stream_id, token, run.remaining, run.next_head, run.stop_ids
                    )
                    self._solo[run.stream_id] = whole
                    try:
                        async with contextlib.aclosing(self.route.decode(whole)) as results:
                            since = time.perf_counter()
                            async for result in results:
                                now = time.perf_counter()  # a lone step's round trip
                                self.costs.record_decode(1, (now - since) * 1000)
                                token = run.after(result)
                                yield result
                                since = time.perf_counter()
                                if token is None:
                                    break
                    finally:
                        self._solo.pop(run.stream_id, None)
                        with contextlib.suppress(RuntimeError):  # no loop: nobody waits
                            self._form()  # a prompt may have waited to join its next step
                    if run.stream_id not in self._handed_over:
                        return  # the route ended the run (closing): so does this one
                    self._handed_over.discard(run.stream_id)
                    continue
                result = await self.run(run.request(token))
                token = run.after(result)
                yield result
        finally:
            run.stop()

    def _alone(self, stream_id: int) -> bool:
        others = (
            {w.request.stream_id for w in self._pending}
            | set(self._in_flight)
            | set(self._returning)
        ) - {stream_id}
        return not others and not self._solo

    def _stop_solo_runs(self, besides: int) -> None:
        for stream_id, whole in self._solo.items():
            if stream_id != besides and stream_id not in self._handed_over:
                self._handed_over.add(stream_id)
                whole.stop()  # it ends after its step under way and goes on batched

    # -- forming passes -----------------------------------------------------------------------

    def _form(self) -> None:
        """Send passes while a stage is free and requests wait (see module doc)."""
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._returning = {s: t for s, t in self._returning.items() if t > now}
        depth = max(1, self.route.pipeline_depth)
        while self._pending and self._passes < depth:
            if self._returning and not self._share_ready(depth):
                # the rest of the last pass back is still on its way: it joins this one
                self._wake = loop.call_at(min(self._returning.values()), self._form)
                return
            batch = self._take(depth)
            if not batch:
                return
            self._passes += 1
            for _, part in batch:  # in flight from now: no stream may think itself alone
                self._in_flight[part.stream_id] = self._in_flight.get(part.stream_id, 0) + 1
            task = asyncio.ensure_future(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _share_ready(self, depth: int) -> bool:
        """Whether a pass's share of the active streams' steps already waits (then waiting
        for the streams still coming back would only put them in this pass, not the next)."""
        pending = {w.request.stream_id for w in self._pending}
        steps = {w.request.stream_id for w in self._pending if w.is_step}
        active = pending | set(self._in_flight) | set(self._returning)
        ready = steps - set(self._in_flight) - set(self._solo)
        return len(ready) >= math.ceil(len(active) / depth)

    def _take(self, depth: int) -> list[tuple[_Waiting, ForwardRequest]]:
        """The next pass: steps first, up to this pass's share of the active streams, then
        prompt tokens as the cost lines allow beside them."""
        active = {w.request.stream_id for w in self._pending} | set(self._in_flight)
        share = max(1, math.ceil(len(active) / depth))
        busy = set(self._in_flight) | set(self._solo)  # a lone run's next step comes here
        ready = [w for w in self._pending if w.request.stream_id not in busy]
        steps = [w for w in ready if w.is_step][:share]
        chunks = [w for w in ready if not w.is_step]
        if not steps and chunks and (busy or self._returning):
            return []  # a prompt chunk joins the running streams' next pass
        batch = [(w, w.request) for w in steps]
        if steps and chunks:  # one prompt beside the steps, as many tokens as keep them quick
            room = steady_room(
                self.costs.prefill_room(sum(w.request.n_positions for w in steps)), self._room
            )
            self._room = room
            batch.append((chunks[0], self._part(chunks[0], room)))
        elif not steps:  # nobody decodes: prompts in the chunks their streams sent
            batch += [(w, w.request) for w in chunks[:share]]
        for waiting, _ in batch:
            self._pending.remove(waiting)
        return batch

    @staticmethod
    def _part(waiting: _Waiting, room: int) -> ForwardRequest:
        """The first ``room`` positions of a prompt chunk (all of it if it fits); what
        remains is left in ``waiting``, after them."""
        request = waiting.request
        # the head reads the last positions (a verify window's drafts and the one before)
        tail = len(getattr(request.head, "drafts", ())) + 1 if request.head is not None else 0
        room = min(room, request.n_positions - tail)
        if room <= 0 or request.n_positions <= room:
            return request
        first = replace(request, payload=request.payload[:, :room], head=None)
        waiting.request = replace(
            request, payload=request.payload[:, room:], rewind=0, compact=False, keep=None
        )
        return first

    async def _send(self, batch: list[tuple[_Waiting, ForwardRequest]]) -> None:
        requests = [part for _, part in batch]
        tokens = sum(request.n_positions for request in requests)
        prefill = sum(r.n_positions for (w, r) in batch if not w.is_step)
        self.formed.append(PassFormed(tuple(r.stream_id for r in requests), tokens, prefill))
        if self.metrics is not None:
            self.metrics.emit(PassBatched(len(requests), tokens, prefill))
        started = time.perf_counter()
        try:
            results = await self.route.run_batch(requests)
        except Exception as exc:  # every stream of the pass hears of it
            for waiting, _ in batch:
                if not waiting.future.done():
                    waiting.future.set_exception(exc)
            results = []
        finally:
            self._passes -= 1
            for request in requests:
                left = self._in_flight.pop(request.stream_id) - 1
                if left:
                    self._in_flight[request.stream_id] = left
        round_trip_ms = (time.perf_counter() - started) * 1000
        log.debug(
            "pass: %d stream(s), %d tokens (%d a prompt's), %.1f ms",
            len(requests),
            tokens,
            prefill,
            round_trip_ms,
        )
        if results:
            self.costs.record(tokens, results[0].compute_ms, round_trip_ms, prefill)
        self._deliver(batch, results, round_trip_ms / 1000)
        self._form()

    def _deliver(
        self,
        batch: list[tuple[_Waiting, ForwardRequest]],
        results: list[ForwardResult],
        took_s: float,
    ) -> None:
        """Hand each stream its result (a prompt chunk's first part: queue the rest first)."""
        low, high = GATHER_S
        deadline = asyncio.get_running_loop().time() + min(max(0.5 * took_s, low), high)
        for (waiting, part), result in zip(batch, results, strict=False):
            for stage, ms in result.compute_ms.items():
                waiting.done_ms[stage] = waiting.done_ms.get(stage, 0.0) + ms
            if part is not waiting.request:
                self._pending.appendleft(waiting)
                continue
            result.compute_ms = waiting.done_ms
            if not waiting.future.done():
                waiting.future.set_result(result)
                self._returning[part.stream_id] = deadline

    # -- the rest goes to the route -----------------------------------------------------------

    async def reset(self, stream_id: int) -> None:
        await self.route.reset(stream_id)

    async def release(self, stream_id: int) -> None:
        self._returning.pop(stream_id, None)
        await self.route.release(stream_id)

    async def fork(self, source: int, stream_id: int, keep: int) -> None:
        await self.route.fork(source, stream_id, keep)

    async def close(self) -> None:
        for whole in self._solo.values():
            whole.stop()
        await self.route.close()
