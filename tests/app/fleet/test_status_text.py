"""The fleet view's status rules (``fleetgui.app.fleet.status_text``), as tables."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fleetgui.app.fleet.status_text import SessionState, from_session, seen, unseen
from fleetgui.app.fleet.worker_status import WorkerStatus
from fleetgui.fleet.session.config import LinkReason
from fleetgui.fleet.session.config import LinkState as Link
from fleetgui.net.info_probe import WorkerStatusReason as Reason


@pytest.mark.parametrize(
    ("reason", "was_usable", "status", "starts"),
    [
        (Reason.PORT_CLOSED, False, WorkerStatus.PORT_CLOSED, "nothing there"),
        (Reason.NOT_ANSWERING, False, WorkerStatus.NOT_ANSWERING, "nothing there"),
        (Reason.WRONG_VERSION, False, WorkerStatus.WRONG_VERSION, "nothing there"),
        (Reason.NOT_FLEETGUI, False, WorkerStatus.NOT_FLEETGUI, "nothing there"),
        (Reason.PORT_CLOSED, True, WorkerStatus.LOST, "port closed: nothing there"),
    ],
)
def test_a_worker_not_seen(
    reason: Reason, was_usable: bool, status: WorkerStatus, starts: str
) -> None:
    got, text = unseen(reason, "nothing there", was_usable=was_usable)
    assert got is status and text.startswith(starts) and text.endswith(reason.hint)


@pytest.mark.parametrize(
    ("paired", "session", "status", "text"),
    [
        (False, None, WorkerStatus.NOT_PAIRED, Reason.NOT_PAIRED.hint),
        (True, None, WorkerStatus.ONLINE, ""),
        (True, SessionState(Link.BUSY, "stages [1]"), WorkerStatus.BUSY, "running stages [1]"),
        (True, SessionState(Link.LOADING, "stages [2]"), WorkerStatus.BUSY, "loading stages [2]"),
        (True, SessionState(Link.LOST, "no heartbeat"), WorkerStatus.ONLINE, "back; rejoining"),
    ],
)
def test_a_worker_seen(
    paired: bool, session: SessionState | None, status: WorkerStatus, text: str
) -> None:
    got, reason = seen(paired, session)
    assert got is status and reason.startswith(text)


def test_session_events() -> None:
    assert from_session(SessionState(Link.LOST, "no heartbeat for 2 s")) == (
        WorkerStatus.LOST,
        "no heartbeat for 2 s",
    )
    assert from_session(SessionState(Link.ONLINE, LinkReason.REJOINED))[0] is WorkerStatus.ONLINE
