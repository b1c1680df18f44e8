"""Re-planning a deployed fleet while it runs (:meth:`FleetSession.replan_with`).

The session's metrics feed a :class:`~fleetgui.fleet.replanning.live_replanner.LiveReplanner`:
when a device's measured stage speed drifts, or after a failover, it may propose a better
placement, which the session moves to between requests (``rebalance``). One re-plan runs at a
time; the monitor speaks again if one is still needed. The watcher is handed what it uses: the
metrics to subscribe to, the layout in force and the usable workers (asked when needed), and
``rebalance``; it knows no session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.fleet.placement.assignment import Assignment
from fleetgui.fleet.replanning.live_replanner import LiveReplanner, PlanContext, ReplanConfig
from fleetgui.fleet.replanning.replan import SpeedDrift
from fleetgui.runtime.metrics import MetricEvent, MetricsBus, StageTiming

log = logging.getLogger(__name__)

CurrentLayout = Callable[[], Assignment | None]  # the layout in force (None: nothing deployed)
UsableWorkers = Callable[[], list[str]]  # connected workers not lost, in the ring's order
Rebalance = Callable[[Assignment], Awaitable[None]]  # move to a layout between requests


class ReplanWatcher:
    """Watches one session's stage timings and losses and re-plans it (see module doc)."""

    def __init__(
        self,
        context: PlanContext,
        config: ReplanConfig | None,
        *,
        metrics: MetricsBus,
        layout: CurrentLayout,
        usable: UsableWorkers,
        rebalance: Rebalance,
    ) -> None:
        self.replanner = LiveReplanner(context, config)
        self._layout = layout
        self._usable = usable
        self._rebalance = rebalance
        deployed = layout()
        if deployed is not None:
            self.replanner.deployed(deployed)
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe = metrics.subscribe(self._on_metric)

    def close(self) -> None:
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()

    def deployed(self, assignment: Assignment) -> None:
        """``assignment`` now runs: watch its stages afresh."""
        self.replanner.deployed(assignment)

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
        assignment = self._layout()
        if assignment is None:
            return
        try:
            better = self.replanner.on_drift(drift, assignment, self._usable())
        except FleetguiError as exc:
            log.warning("re-planning after %s changed speed failed: %s", drift.device, exc)
            return
        if better is not None:
            await self._rebalance_logged(better, f"{drift.device} changed speed")

    async def _replan_after_loss(self, lost: Sequence[str]) -> None:
        better = None
        for name in lost:
            assignment = self._layout()
            if assignment is None:
                return
            try:
                usable = self._usable()
                better = self.replanner.on_lost(name, assignment, usable) or better
            except FleetguiError as exc:
                log.warning("re-planning after losing %s failed: %s", name, exc)
                return
        if better is not None:
            await self._rebalance_logged(better, f"{', '.join(lost)} lost")

    async def _rebalance_logged(self, assignment: Assignment, why: str) -> None:
        try:
            await self._rebalance(assignment)
        except (FleetguiError, OSError) as exc:
            log.warning("re-planned layout after %s not applied: %s", why, exc)
            return
        log.warning(
            "re-planned after %s: coordinator stages %s, then %s",
            why,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members) or "nothing",
        )
