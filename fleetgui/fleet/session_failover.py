"""Failing over a coordinator session: when ring members are lost, their stages move to whoever
has the memory (this PC too, if local failover is on) and a new ring epoch is set up.

The session's layout stays the last one that ran (complete) until a new one runs, so a retry
after a second loss starts from it. When what is left cannot run every stage the generation
ends with :class:`~fleetgui.fleet.fleet_too_small.FleetTooSmallError` rather than run an
incomplete ring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import psutil

from fleetgui.errors import FleetguiError
from fleetgui.fleet.assignment import Assignment, UnplacedStagesError, failover_all
from fleetgui.fleet.fleet_too_small import FleetTooSmallError, fleet_too_small
from fleetgui.fleet.link import WorkerLostError
from fleetgui.fleet.ring_route import Ring

if TYPE_CHECKING:
    from fleetgui.fleet.coordinator import FleetSession


class SessionFailover:
    """Recovers one session's ring (see module doc); ``failovers`` names every worker whose
    stages were moved, once per loss."""

    def __init__(self, session: FleetSession) -> None:
        self.session = session
        self.failovers: list[str] = []

    async def recover(self, exc: Exception) -> Ring:
        """:meth:`FleetSession.recover`: move the stages of every lost ring member and set up
        a new ring epoch."""
        session = self.session
        deployment = session.deployment
        if deployment.assignment is None:
            raise FleetguiError("nothing deployed") from exc
        links = session.links
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
        if session.replanning is not None and lost:
            session.replanning.after_loss(lost)
        return deployment.ring

    def _fail_over(self, assignment: Assignment, lost: Sequence[str]) -> Assignment:
        """``assignment`` without the ``lost`` workers, their stages moved to whoever has the
        memory (this PC too, if local failover is on)."""
        free = {
            n: int(link.last_status.get("free_ram_bytes", 0))
            for n, link in self.session.links.items()
            if not link.lost
        }
        local_failover = self.session.config.local_failover
        here = int(psutil.virtual_memory().available) if local_failover else 0
        units = self.session.deployment.units()
        try:
            return failover_all(assignment, units, lost, free, coordinator_free_bytes=here)
        except UnplacedStagesError as exc:
            raise self._too_small(lost, exc) from exc

    def _too_small(self, lost: Sequence[str], exc: UnplacedStagesError) -> FleetTooSmallError:
        """The error when what is left cannot run ``exc.stages``, naming every worker lost by
        now, not only ``lost`` (stages moved on earlier may have been lost with their new
        host)."""
        workers = self.session.workers
        gone = workers.lost() or list(lost)
        units = self.session.deployment.units()
        local_failover = self.session.config.local_failover
        return fleet_too_small(units, gone, workers.usable(), exc, local_failover)
