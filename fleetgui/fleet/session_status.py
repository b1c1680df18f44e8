"""What a coordinator session tells about its workers: each change as it happens (the
session's ``on_event``: a :class:`~fleetgui.fleet.session_config.LinkState` and a reason) and,
when asked, a worker's :class:`~fleetgui.fleet.session_config.WorkerLinkStatus`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgui.fleet.session_config import LinkState, WorkerLinkStatus

if TYPE_CHECKING:
    from fleetgui.fleet.coordinator import FleetSession


class StatusReporter:
    """Reports one session's workers (see module doc). ``on_event`` is read from the session at
    each event, so a caller may replace it while the session runs."""

    def __init__(self, session: FleetSession) -> None:
        self.session = session

    def event(self, name: str, state: LinkState, reason: str = "") -> None:
        """Tell the session's ``on_event`` (if any) that worker ``name`` is now ``state``."""
        on_event = self.session.on_event
        if on_event is not None:
            on_event(name, state, reason)

    def worker(self, name: str) -> WorkerLinkStatus:
        """:meth:`FleetSession.worker_status`."""
        assignment = self.session.assignment
        stages = assignment.indices_of(name) if assignment else ()
        return WorkerLinkStatus.of(self.session.links[name], stages)
