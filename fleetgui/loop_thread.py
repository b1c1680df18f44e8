"""An asyncio event loop on a thread of its own, so that synchronous callers (a script, a
notebook, a web handler) can use the fleet's asyncio machinery without knowing of it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An asyncio loop running on a daemon thread until :meth:`stop`."""

    def __init__(self, name: str = "fleetgui") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop; its future, for the calling thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or its exception)."""
        return self.submit(coro).result()

    def stop(self) -> None:
        """Stop the loop and wait (briefly) for its thread to end."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()
