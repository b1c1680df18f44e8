"""The gate of a route: requests run side by side, but moving the route to another ring waits
until none is in flight and holds new ones back meanwhile, so no request straddles two rings."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class RouteGate:
    """Counts the requests in flight and lets one exclusive change in at a time."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._admitting = asyncio.Event()
        self._admitting.set()
        self._exclusive = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """One request in flight (waits while an exclusive change runs)."""
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

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """No request in flight, and none admitted until the block ends."""
        async with self._exclusive:
            self._admitting.clear()
            try:
                await self._idle.wait()
                yield
            finally:
                self._admitting.set()
