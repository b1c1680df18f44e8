"""How the fleet view names a worker's state: pure functions from what the fleet code reports
(an info probe's reason, a pairing check, a ``FleetSession`` event) to a row status and reason.

Sources are merged by :class:`fleetgui.app.fleet.controller.FleetController`; the rules here:

* a worker that was usable and now fails its probe is *lost*, with the probe's reason and fix;
  one never seen usable shows the probe's reason itself (port closed, not answering, ...);
* a worker that answers but refuses this coordinator's key is *not paired*, with the fix;
* while a deployment runs on a worker its session's word (a ``LinkState``: loading, running,
  lost) wins over the probe's "online".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fleetgui.app.fleet.worker_status import WorkerStatus
from fleetgui.fleet.session.config import LinkReason, LinkState
from fleetgui.net.info_probe import WorkerStatusReason

log = logging.getLogger(__name__)

_BY_REASON = {
    WorkerStatusReason.NOT_ANSWERING: WorkerStatus.NOT_ANSWERING,
    WorkerStatusReason.PORT_CLOSED: WorkerStatus.PORT_CLOSED,
    WorkerStatusReason.WRONG_VERSION: WorkerStatus.WRONG_VERSION,
    WorkerStatusReason.NOT_PAIRED: WorkerStatus.NOT_PAIRED,
    WorkerStatusReason.NOT_FLEETGUI: WorkerStatus.NOT_FLEETGUI,
}
NOT_PAIRED_FIX = WorkerStatusReason.NOT_PAIRED.hint


@dataclass(frozen=True)
class SessionState:
    """What the deployed ``FleetSession`` last said about a worker."""

    status: LinkState
    reason: str = ""


def unseen(
    reason: WorkerStatusReason, detail: str, *, was_usable: bool
) -> tuple[WorkerStatus, str]:
    """A worker whose probe failed: lost if it was usable before, else the probe's reason."""
    text = f"{detail}; {reason.hint}" if detail else reason.hint
    if was_usable:
        return WorkerStatus.LOST, f"{reason.label}: {text}"
    return _BY_REASON[reason], text


def seen(paired: bool, session: SessionState | None) -> tuple[WorkerStatus, str]:
    """A worker that answered its probe (``paired``: it accepted this coordinator's key)."""
    if not paired:
        return WorkerStatus.NOT_PAIRED, NOT_PAIRED_FIX
    if session is None or session.status is LinkState.ONLINE:
        return WorkerStatus.ONLINE, ""
    if session.status is LinkState.LOST:
        # it answers again: a restarted worker, about to rejoin the session as a spare
        return WorkerStatus.ONLINE, "back; rejoining the deployment as a spare"
    return from_session(session)


def from_session(session: SessionState) -> tuple[WorkerStatus, str]:
    """A ``FleetSession`` event as a row status."""
    match session.status:
        case LinkState.LOST:
            return WorkerStatus.LOST, session.reason or "stopped answering"
        case LinkState.LOADING:
            return WorkerStatus.BUSY, f"loading {session.reason}".strip()
        case LinkState.BUSY:
            return WorkerStatus.BUSY, f"running {session.reason}".strip()
        case LinkState.ONLINE if session.reason == LinkReason.REJOINED:
            return WorkerStatus.ONLINE, "rejoined the deployment as a spare"
        case _:
            return WorkerStatus.ONLINE, ""
