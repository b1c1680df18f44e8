"""The deployment's jobs (open, export, plan, deploy), run one at a time as asyncio tasks.

A job is a coroutine; :class:`JobRunner` refuses a second one while one runs, reports the job's
state, turns its errors into messages with the fix, and cancels it (with the export thread it
runs, if any) at every step. A cancelled job leaves nothing half-done: that is up to the job
(an export stays in its hidden partial folder, a deployment's pipeline is closed).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fleetgui.app.deploy.export_job import ExportJob
from fleetgui.app.deploy.interfaces import DeployCancelledError
from fleetgui.app.errors import user_message
from fleetgui.app.tasks import spawn

log = logging.getLogger(__name__)


class JobState(enum.StrEnum):
    IDLE = "idle"
    OPENING = "opening"  # a GGUF file or hub id becoming a folder the exporter reads
    EXPORTING = "exporting"
    PLANNING = "planning"
    DEPLOYING = "deploying"


class JobRunner:
    """One job at a time; the callbacks get the state and the messages to show."""

    def __init__(
        self,
        on_state: Callable[[JobState], None],
        on_failed: Callable[[str], None],
        on_cancelled: Callable[[str], None],
    ) -> None:
        self._on_state = on_state
        self._on_failed = on_failed
        self._on_cancelled = on_cancelled
        self.state = JobState.IDLE
        # the export the current job runs: its thread stops only when told (see ExportJob)
        self.export: ExportJob | None = None
        self._task: asyncio.Task[Any] | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def set_state(self, state: JobState) -> None:
        self.state = state
        self._on_state(state)

    def start(self, state: JobState, job: Coroutine[Any, Any, None]) -> bool:
        """Run ``job`` in state ``state``; False (and a message) while another job runs."""
        if self.busy:
            job.close()
            self._on_failed(f"busy {self.state.value}: wait for it to finish or press Cancel")
            return False
        self.set_state(state)
        self._task = spawn(self._guard(job), f"deployment: {state.value}")
        self._task.add_done_callback(self._job_done)
        # A task cancelled before it ran never awaits its job: close it so it leaves no warning.
        self._task.add_done_callback(lambda _: job.close())
        return True

    async def _guard(self, job: Coroutine[Any, Any, None]) -> None:
        try:
            await job
        except DeployCancelledError as exc:
            log.info("%s cancelled", self.state.value)
            self._on_cancelled(str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._on_failed(user_message(exc))

    def _job_done(self, task: asyncio.Task[Any]) -> None:
        """Also runs for a task cancelled before it started."""
        if task.cancelled():
            log.info("%s cancelled", self.state.value)
            self._on_cancelled(f"{self.state.value} cancelled")
        self.export = None
        self.set_state(JobState.IDLE)

    async def wait(self) -> None:
        """Until the current job (if any) has ended, however it ended."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])

    def cancel(self) -> None:
        if self.export is not None:
            self.export.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()
