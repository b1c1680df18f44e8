"""How many generations a pipeline runs at once; the others wait their turn, first come first
served.

The limit belongs to the pipeline, not to its callers: the app, ``fleetgui generate``, the Python
Python API and the HTTP API all generate through one, and each had kept a semaphore of its own. The
limit can change while requests wait (the app's stream count); a waiter cancelled just as it was
granted a slot passes the slot on. A hold keeps every new generation waiting until it is resumed,
once the running ones have ended (the app's fleet benchmark has the stages to itself meanwhile).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator


class StreamLimit:
    """At most ``limit`` generations at once (None: no limit)."""

    def __init__(self, limit: int | None = None) -> None:
        self._check(limit)
        self._limit = limit
        self.active = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._held = False
        self._idle: list[asyncio.Future[None]] = []  # hold()s waiting for none to run

    @staticmethod
    def _check(limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"a stream limit is at least 1 (or None for none), not {limit}")

    @property
    def limit(self) -> int | None:
        return self._limit

    @property
    def waiting(self) -> int:
        """Generations waiting for a slot."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    def set(self, limit: int | None) -> None:
        """Change the limit; waiters start at once if it grew. Running generations beyond a
        lowered limit finish; new ones wait until fewer run."""
        self._check(limit)
        self._limit = limit
        self._wake()

    @property
    def held(self) -> bool:
        """New generations wait until :meth:`resume` (see :meth:`hold`)."""
        return self._held

    async def hold(self) -> None:
        """Keep every new generation waiting, and return once the running ones have ended:
        the stages are the caller's alone until :meth:`resume` (it generates meanwhile through
        something with a limit of its own, e.g. ``Pipeline.with_streams``). Cancelled while
        it waits, the hold is let go."""
        self._held = True
        try:
            while self.active > 0:
                idle = asyncio.get_running_loop().create_future()
                self._idle.append(idle)
                try:
                    await idle
                finally:
                    with contextlib.suppress(ValueError):
                        self._idle.remove(idle)
        except BaseException:
            self.resume()
            raise

    def resume(self) -> None:
        """End a hold: the waiting generations start, in arrival order, up to the limit."""
        self._held = False
        self._wake()

    def _free(self) -> bool:
        return not self._held and (self._limit is None or self.active < self._limit)

    def _wake(self) -> None:
        while self._waiters and self._free():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.active += 1
                waiter.set_result(None)

    async def acquire(self) -> None:
        if self._free() and not self._waiters:
            self.active += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted as it was cancelled: the next one takes it
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.active -= 1
        if self.active == 0:
            for idle in self._idle:
                if not idle.done():
                    idle.set_result(None)
        self._wake()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the block."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()
