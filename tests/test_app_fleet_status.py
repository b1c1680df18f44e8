"""The fleet view's status rules and the fleet deployer's pure helpers, as tables."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fleetgui.app.deploy.fleet import app_progress, ring_order
from fleetgui.app.fleet.status_text import SessionState, from_session, seen, unseen
from fleetgui.app.fleet.worker_status import WorkerStatus
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.fleet.ring.shard_push import DeployPhase, DeployProgress
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


def test_ring_order_follows_the_plan_then_the_other_workers() -> None:
    from fleetgui.planner import DeviceProfile, PlanConfig, solve
    from fleetgui.planner.examples import llama_8b_like

    endpoints = [WorkerEndpoint(n, f"tcp://h:{i}", "k") for i, n in enumerate("abc")]
    assert ring_order(endpoints, None) == ["a", "b", "c"]
    devices = [
        DeviceProfile("coord", 8_000_000_000, 1.0, 1e9),
        DeviceProfile("c", 64_000_000_000, 0.5, 1e9),
    ]
    plan = solve(devices, llama_8b_like(), PlanConfig())
    assert plan.devices[1:] == ("c",)
    assert ring_order(endpoints, plan) == ["c", "a", "b"]


@pytest.mark.parametrize(
    ("step", "text", "fraction"),
    [
        (DeployProgress("w", 50, 100, "stage_1/model.bin"), "sending model.bin", 0.5),
        (DeployProgress("w", 0, 0), "files already there", 0.0),
        (DeployProgress("w", 0, 0, phase=DeployPhase.LOAD), "loading the stages", 0.99),
        (DeployProgress("w", 1, 1, phase=DeployPhase.READY), "ready", 1.0),
    ],
)
def test_deploy_progress_for_the_bars(step: DeployProgress, text: str, fraction: float) -> None:
    shown = app_progress(step)
    assert (shown.worker, shown.step, shown.fraction) == ("w", text, pytest.approx(fraction))
