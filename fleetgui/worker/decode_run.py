"""A worker's DECODE runs: plain decode steps chained on the worker that holds the whole model.

A whole copy of the model on one PC needs no hop between tokens, yet a coordinator asking for
each step pays a round trip per token (its message, the worker's Python, the reply) while the
worker sits idle. A DECODE names the steps ahead (one head each, so sampled tokens draw the
coordinator's random numbers exactly as step-by-step decoding would); the worker feeds each
step's token to the next and sends every step's result as it finishes, the last one flagged
FINAL. Each step takes the worker's compute lock on its own, so other streams' requests
interleave with a run instead of waiting for its end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from fleetgui.net.decode_codec import DecodeSteps
from fleetgui.net.protocol import ErrorCode, ProtocolError
from fleetgui.runtime.stage import ForwardRequest, ForwardResult

log = logging.getLogger(__name__)

#: Runs one step (the worker's stages, under its compute lock).
Step = Callable[[ForwardRequest], Awaitable[ForwardResult]]
#: Sends one step's result to the coordinator; the flag says whether it is the run's last.
Send = Callable[[ForwardResult, bool], Awaitable[None]]


@dataclass
class _Run:
    stopping: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class WorkerDecodes:
    """The DECODE runs under way on one worker, at most one per stream."""

    def __init__(self) -> None:
        self._runs: dict[int, _Run] = {}

    def __len__(self) -> int:
        return len(self._runs)

    async def run(self, steps: DecodeSteps, step: Step, send: Send) -> int:
        """Run ``steps`` to their end, a stop token or :meth:`stop`; the number of steps run.
        A stream already decoding is refused: its cache would see two writers."""
        if steps.stream_id in self._runs:
            raise ProtocolError(
                ErrorCode.BAD_FIELD, f"stream {steps.stream_id} is already decoding"
            )
        run = self._runs[steps.stream_id] = _Run()
        token = steps.token
        try:
            for index, head in enumerate(steps.heads):
                ids = np.array([[token]], dtype=np.int64)
                result = await step(ForwardRequest(steps.stream_id, ids, head=head))
                following = result.tokens[-1] if result.tokens else None
                last = (
                    index == len(steps.heads) - 1
                    or following is None
                    or following in steps.stop_ids
                    or run.stopping
                )
                await send(result, last)
                if last or following is None:
                    return index + 1
                token = following
                # a step computes on the loop's thread and a send may not suspend: yield, so
                # heartbeats and other streams' requests are served between two steps
                await asyncio.sleep(0)
            return len(steps.heads)
        finally:
            del self._runs[steps.stream_id]
            run.ended.set()

    async def stop(self, stream_id: int) -> bool:
        """End ``stream_id``'s run after its step under way; whether one was running."""
        run = self._runs.get(stream_id)
        if run is None:
            return False
        run.stopping = True
        await run.ended.wait()
        return True
