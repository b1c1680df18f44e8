"""Worker threads that carry requests from stage to stage without the event loop in between.

Each stage is a *lane*: its jobs run one at a time, in arrival order. A job runs on a pool
thread and may hand a follow-up job to another lane (the next stage, or stage 0 for a stream's
next decode step). The hand-off avoids thread wake-ups where it can, since each costs 0.3-0.4 ms
on this machine's virtual CPUs, a few per cent of a stage's work:

- if the next lane is idle and nothing waits on the current one, the same thread goes on with
  the follow-up (a lone stream runs stage after stage, step after step, on one thread);
- if the next lane is idle but the current one has work waiting, a pool thread is woken for the
  next lane and this thread stays on its own;
- if the next lane is busy, the follow-up joins its queue and that lane's thread takes it next.

Several streams therefore overlap stage by stage (stage 1 works on one stream while stage 0
works on another), and the event loop only hears of a request when it is done.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

#: A job returns nothing, or a follow-up: (lane, job) to run after it.
Job = Callable[[], "tuple[int, Job] | None"]


class LanesClosedError(RuntimeError):
    """A job was submitted after :meth:`StageLanes.close`."""


class StageLanes:
    """``n`` lanes of one-at-a-time jobs, driven by up to ``n`` pool threads (see module doc)."""

    def __init__(self, n: int, *, name: str = "stage") -> None:
        if n < 1:
            raise ValueError("lanes need at least one stage")
        self._queues: list[collections.deque[Job]] = [collections.deque() for _ in range(n)]
        self._busy = [False] * n  # a thread is draining the lane (or about to)
        self._lock = threading.Lock()
        # At most n drains exist (one per busy lane), so n threads never leave one waiting.
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"fleetgui-{name}")
        self._closed = False
        # the threads of a route nobody closed (e.g. a replaced ring's) end with it
        weakref.finalize(self, self._pool.shutdown, wait=False)

    def submit(self, lane: int, job: Job) -> None:
        """Queue ``job`` on ``lane`` (from any thread)."""
        with self._lock:
            if self._closed:
                raise LanesClosedError("the stages are closed")
            self._queues[lane].append(job)
            if self._busy[lane]:
                return
            self._busy[lane] = True
        self._pool.submit(self._drain, lane)

    def close(self) -> None:
        """Refuse new jobs; queued and running ones still finish, on their threads."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False)

    def _drain(self, lane: int) -> None:
        """Run ``lane``'s jobs until it is empty, moving to another lane when a follow-up
        lets this thread go on without waking another."""
        later: list[int] = []  # lanes this thread must drain too (the pool is shut down)
        while True:
            with self._lock:
                queue = self._queues[lane]
                if not queue:
                    self._busy[lane] = False
                    if not later:
                        return
                    lane = later.pop()
                    continue
                job = queue.popleft()
            try:
                follow = job()
            except BaseException:  # a job reports its own errors; this keeps the lane alive
                log.exception("a stage job failed on lane %d", lane)
                follow = None
            if follow is None:
                continue
            target, next_job = follow
            with self._lock:
                self._queues[target].append(next_job)
                if target == lane or self._busy[target]:
                    continue  # this lane's loop, or the target's thread, takes it next
                self._busy[target] = True
                if not self._queues[lane]:
                    self._busy[lane] = False
                    lane = target  # go on with the follow-up on this thread
                    continue
            try:
                self._pool.submit(self._drain, target)  # both lanes have work: wake a thread
            except RuntimeError:  # closed while work was under way: finish it here
                later.append(target)
