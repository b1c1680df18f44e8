"""A route runs a request through every stage of the target model, in order.

``LocalRoute`` chains in-process stages. The fleet's ring transport is another route: the
coordinator runs stage 0 and the workers pass the activations along the ring themselves.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from fleetgui.runtime.stage import (
    BlockingStage,
    ForwardRequest,
    ForwardResult,
    Stage,
    run_holding,
)

#: Longest pass :class:`LocalRoute` runs on one thread: decode and verify passes (K + 1).
MAX_ONE_THREAD_POSITIONS = 32


class Route(ABC):
    """The target model's stages, as one thing to run requests through."""

    @property
    @abstractmethod
    def n_stages(self) -> int: ...

    @abstractmethod
    async def run(self, request: ForwardRequest) -> ForwardResult:
        """Run ``request`` (token ids) through all stages; the last stage's head result."""

    @abstractmethod
    async def reset(self, stream_id: int) -> None: ...

    @abstractmethod
    async def release(self, stream_id: int) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...


class LocalRoute(Route):
    """Stages in this process, run one after another per request. Requests of different streams
    overlap: while one stream is on stage k, another can be on stage k+1.

    A decode or verify pass of the only stream these stages hold, with nothing else in flight,
    runs through all of them on one worker thread
    (:class:`~fleetgui.runtime.stage.BlockingStage`): there is nothing to overlap it with, and
    it saves two thread wake-ups per extra stage. Measured on the bench Llama, 2 stages, one
    stream, decode interleaved with a synchronous loop over the model in one piece: 0.95-0.96
    of its speed on one thread, 0.90-0.92 stage by stage.
    """

    def __init__(self, stages: Sequence[Stage]) -> None:
        if not stages:
            raise ValueError("a route needs at least one stage")
        self.stages = list(stages)
        self._in_flight = 0
        self._threadable = [s for s in self.stages if isinstance(s, BlockingStage)]
        if len(self.stages) < 2 or len(self._threadable) != len(self.stages):
            self._threadable = []

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    def _alone(self, request: ForwardRequest) -> bool:
        """Whether ``request`` is a decode or verify pass of the only stream these stages hold,
        with nothing else running. With another stream about, taking every stage at once would
        stall it; and a stream that arrives while a long pass holds every stage would wait for
        all of it instead of following it stage by stage. So a stream's first pass (its prompt)
        and passes longer than :data:`MAX_ONE_THREAD_POSITIONS` go stage by stage."""
        if (
            self._in_flight
            or not self._threadable
            or request.n_positions > MAX_ONE_THREAD_POSITIONS
        ):
            return False
        # == : the stream's first pass (its prompt) also goes stage by stage
        return all(stage.stream_ids() == [request.stream_id] for stage in self._threadable)

    async def run(self, request: ForwardRequest) -> ForwardResult:
        alone = self._alone(request)
        self._in_flight += 1
        try:
            if alone:
                return await self._run_in_one_thread(request)
            return await self._run_stage_by_stage(request)
        finally:
            self._in_flight -= 1

    async def _run_in_one_thread(self, request: ForwardRequest) -> ForwardResult:
        return await run_holding(self._threadable, self._run_blocking, request)

    def _run_blocking(self, request: ForwardRequest) -> ForwardResult:
        return self._chain(request, [stage.forward_blocking for stage in self._threadable])

    async def _run_stage_by_stage(self, request: ForwardRequest) -> ForwardResult:
        compute: dict[int, float] = {}
        result = ForwardResult(request.stream_id)
        current = request
        for index, stage in enumerate(self.stages):
            last = index == len(self.stages) - 1
            result = await stage.forward(current if last else replace(current, head=None))
            compute.update(result.compute_ms)
            if not last:
                current = replace(request, payload=_hidden(result, index))
        result.compute_ms = compute
        return result

    @staticmethod
    def _chain(
        request: ForwardRequest, forwards: Sequence[Callable[[ForwardRequest], ForwardResult]]
    ) -> ForwardResult:
        compute: dict[int, float] = {}
        result = ForwardResult(request.stream_id)
        current = request
        for index, forward in enumerate(forwards):
            last = index == len(forwards) - 1
            result = forward(current if last else replace(current, head=None))
            compute.update(result.compute_ms)
            if not last:
                current = replace(request, payload=_hidden(result, index))
        result.compute_ms = compute
        return result

    async def reset(self, stream_id: int) -> None:
        await asyncio.gather(*(stage.reset(stream_id) for stage in self.stages))

    async def release(self, stream_id: int) -> None:
        await asyncio.gather(*(stage.release(stream_id) for stage in self.stages))

    async def close(self) -> None:
        await asyncio.gather(*(stage.close() for stage in self.stages))


def _hidden(result: ForwardResult, index: int) -> np.ndarray:
    if result.payload is None:
        raise RuntimeError(f"stage {index} returned no hidden states")
    return result.payload
