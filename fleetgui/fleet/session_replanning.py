"""Re-planning a deployed fleet while it runs (:meth:`FleetSession.replan_with`).

The session's metrics feed a :class:`~fleetgui.fleet.replanner.LiveReplanner`: when a device's
measured stage speed drifts, or after a failover, it may propose a better placement, which the
session moves to between requests (:meth:`FleetSession.rebalance`). One re-plan runs at a time;
the monitor speaks again if one is still needed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from fleetgui.errors import FleetguiError
from fleetgui.fleet.assignment import Assignment
from fleetgui.fleet.replanner import LiveReplanner, PlanContext, ReplanConfig
from fleetgui.planner.replan import SpeedDrift
from fleetgui.runtime.metrics import MetricEvent, StageTiming

if TYPE_CHECKING:
    from fleetgui.fleet.coordinator import FleetSession

log = logging.getLogger(__name__)


class SessionReplanning:
    """Watches one session's stage timings and losses and re-plans it (see module doc)."""

    def __init__(
        self, session: FleetSession, context: PlanContext, config: ReplanConfig | None = None
    ) -> None:
        self.session = session
        self.replanner = LiveReplanner(context, config)
        if session.assignment is not None:
            self.replanner.deployed(session.assignment)
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe = session.metrics.subscribe(self._on_metric)

    def close(self) -> None:
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()

    def after_loss(self, lost: Sequence[str]) -> None:
        """A failover moved ``lost`` workers' stages: look for a better layout."""
        self._start(self._replan_after_loss(lost))

    def _on_metric(self, event: MetricEvent) -> None:
        if not isinstance(event, StageTiming):
            return
        drift = self.replanner.observe(event.stage, event.positions, event.compute_ms)
        if drift is not None:
            self._start(self._replan_after_drift(drift))

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        if self._task is not None and not self._task.done():
            work.close()  # one re-plan at a time; the monitor will speak again if needed
            return
        self._task = asyncio.get_running_loop().create_task(work)

    async def _replan_after_drift(self, drift: SpeedDrift) -> None:
        assignment = self.session.assignment
        if assignment is None:
            return
        try:
            better = self.replanner.on_drift(drift, assignment, self.session.usable_workers())
        except FleetguiError as exc:
            log.warning("re-planning after %s changed speed failed: %s", drift.device, exc)
            return
        if better is not None:
            await self._rebalance_logged(better, f"{drift.device} changed speed")

    async def _replan_after_loss(self, lost: Sequence[str]) -> None:
        better = None
        for name in lost:
            assignment = self.session.assignment
            if assignment is None:
                return
            try:
                usable = self.session.usable_workers()
                better = self.replanner.on_lost(name, assignment, usable) or better
            except FleetguiError as exc:
                log.warning("re-planning after losing %s failed: %s", name, exc)
                return
        if better is not None:
            await self._rebalance_logged(better, f"{', '.join(lost)} lost")

    async def _rebalance_logged(self, assignment: Assignment, why: str) -> None:
        try:
            await self.session.rebalance(assignment)
        except (FleetguiError, OSError) as exc:
            log.warning("re-planned layout after %s not applied: %s", why, exc)
            return
        log.warning(
            "re-planned after %s: coordinator stages %s, then %s",
            why,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members) or "nothing",
        )
