"""What a coordinator session tells about its workers as it happens: each change of a worker's
:class:`~fleetgui.fleet.session.config.LinkState`, with a reason, to the session's ``on_event``.
(A worker's :class:`~fleetgui.fleet.session.config.WorkerLinkStatus`, when asked, is
:meth:`FleetSession.worker_status`.)"""

from __future__ import annotations

from fleetgui.fleet.session.config import FleetEvent, LinkState


class StatusReporter:
    """Reports one session's worker events to ``on_event``, which a caller may replace while the
    session runs (the app does, once a replica it opened is shown)."""

    def __init__(self, on_event: FleetEvent | None = None) -> None:
        self.on_event = on_event

    def event(self, name: str, state: LinkState, reason: str = "") -> None:
        """Tell ``on_event`` (if any) that worker ``name`` is now ``state``."""
        on_event = self.on_event
        if on_event is not None:
            on_event(name, state, reason)
