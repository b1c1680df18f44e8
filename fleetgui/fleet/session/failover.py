"""Failing over a coordinator session: when ring members are lost, their stages move to whoever
has the memory (this PC too, if local failover is on) and a new ring epoch is set up.

The session's layout stays the last one that ran (complete) until a new one runs, so a retry
after a second loss starts from it. When what is left cannot run every stage the generation
ends with :class:`~fleetgui.fleet.placement.fleet_too_small.FleetTooSmallError` rather than run an
incomplete ring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import psutil

from fleetgui.errors import FleetguiError
from fleetgui.fleet.placement.assignment import Assignment, UnplacedStagesError, failover_all
from fleetgui.fleet.placement.fleet_too_small import FleetTooSmallError, fleet_too_small
from fleetgui.fleet.ring.link import WorkerLostError
from fleetgui.fleet.ring.route import Ring
from fleetgui.fleet.session.deployment import SessionDeployment
from fleetgui.fleet.session.workers import SessionWorkers


class SessionFailover:
    """Recovers one session's ring (see module doc); ``failovers`` names every worker whose
    stages were moved, once per loss. ``local_failover``: whether this PC may take stages;
    ``on_failed_over`` is told who was lost once the new layout runs (the session's re-planning
    then looks for a better one)."""

    def __init__(
        self,
        workers: SessionWorkers,
        deployment: SessionDeployment,
        *,
        local_failover: bool,
        on_failed_over: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.workers = workers
        self.deployment = deployment
        self.local_failover = local_failover
        self.on_failed_over = on_failed_over
        self.failovers: list[str] = []

    async def recover(self, exc: Exception) -> Ring:
        """:meth:`FleetSession.recover`: move the stages of every lost ring member and set up
        a new ring epoch."""
        deployment = self.deployment
        if deployment.assignment is None:
            raise FleetguiError("nothing deployed") from exc
        links = self.workers.links
        lost = [m.name for m in deployment.assignment.members if links[m.name].lost]
        if not lost and isinstance(exc, WorkerLostError) and exc.worker in links:
            lost = [exc.worker] if links[exc.worker].lost else []
        # whoever dropped out reloads if used again, also when nobody could take its stages
        # and it is back (restarted, nothing loaded)
        deployment.distrust(lost)
        assignment = self._fail_over(deployment.assignment, lost)
        await deployment.apply(assignment, None)
        self.failovers.extend(lost)  # once the new layout runs: a failed attempt is retried
        if deployment.ring is None:
            raise FleetguiError("the ring could not be rebuilt")
        if self.on_failed_over is not None and lost:
            self.on_failed_over(lost)
        return deployment.ring

    def _fail_over(self, assignment: Assignment, lost: Sequence[str]) -> Assignment:
        """``assignment`` without the ``lost`` workers, their stages moved to whoever has the
        memory (this PC too, if local failover is on)."""
        free = {
            n: int(link.last_status.get("free_ram_bytes", 0))
            for n, link in self.workers.links.items()
            if not link.lost
        }
        here = int(psutil.virtual_memory().available) if self.local_failover else 0
        units = self.deployment.units()
        try:
            return failover_all(assignment, units, lost, free, coordinator_free_bytes=here)
        except UnplacedStagesError as exc:
            raise self._too_small(lost, exc) from exc

    def _too_small(self, lost: Sequence[str], exc: UnplacedStagesError) -> FleetTooSmallError:
        """The error when what is left cannot run ``exc.stages``, naming every worker lost by
        now, not only ``lost`` (stages moved on earlier may have been lost with their new
        host)."""
        gone = self.workers.lost() or list(lost)
        units = self.deployment.units()
        return fleet_too_small(units, gone, self.workers.usable(), exc, self.local_failover)
