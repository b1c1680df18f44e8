"""At most ``max_streams`` generations at once; up to ``max_queued`` more wait their turn in
arrival order, and any beyond that are refused (429) rather than piling up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fleetgui.api.errors import too_many_streams

QUEUE_FACTOR = 4  # requests that may wait, per stream slot


class Admission:
    def __init__(self, max_streams: int, max_queued: int | None = None) -> None:
        if max_streams < 1:
            raise ValueError(f"max_streams must be at least 1, got {max_streams}")
        self.max_streams = max_streams
        self.max_queued = QUEUE_FACTOR * max_streams if max_queued is None else max_queued
        self._slots = asyncio.Semaphore(max_streams)
        self.active = 0
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a stream slot for the block; raises the 429 ``ApiError`` when the queue is
        full. A request cancelled while it waits leaves the queue."""
        must_wait = self._slots.locked() or self.waiting > 0
        if must_wait and self.waiting >= self.max_queued:
            raise too_many_streams(self.max_streams, self.waiting)
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            self._slots.release()
