"""Starting asyncio tasks from Qt slots: the task is kept alive and its failure is logged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
_running: set[asyncio.Task[Any]] = set()


def _done(task: asyncio.Task[Any]) -> None:
    _running.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed", task.get_name(), exc_info=task.exception())


def spawn(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """Run ``coro`` as a task on the running loop (Qt's, through qasync)."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _running.add(task)
    task.add_done_callback(_done)
    return task
