"""A route runs a request through every stage of the target model, in order.

``LocalRoute`` chains in-process stages. The fleet's ring transport is another route: the
coordinator runs stage 0 and the workers pass the activations along the ring themselves.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace

from fleetgui.runtime.stage import ForwardRequest, ForwardResult, Stage


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
    overlap: while one stream is on stage k, another can be on stage k+1."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        if not stages:
            raise ValueError("a route needs at least one stage")
        self.stages = list(stages)

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    async def run(self, request: ForwardRequest) -> ForwardResult:
        compute: dict[int, float] = {}
        result = ForwardResult(request.stream_id)
        current = request
        for index, stage in enumerate(self.stages):
            last = index == len(self.stages) - 1
            result = await stage.forward(current if last else replace(current, head=None))
            compute.update(result.compute_ms)
            if not last:
                if result.payload is None:
                    raise RuntimeError(f"stage {index} returned no hidden states")
                current = replace(request, payload=result.payload)
        result.compute_ms = compute
        return result

    async def reset(self, stream_id: int) -> None:
        await asyncio.gather(*(stage.reset(stream_id) for stage in self.stages))

    async def release(self, stream_id: int) -> None:
        await asyncio.gather(*(stage.release(stream_id) for stage in self.stages))

    async def close(self) -> None:
        await asyncio.gather(*(stage.close() for stage in self.stages))
