"""The fleet deployer's pure helpers (``fleetgui.app.deploy.fleet``), as tables: the ring order
a deployment uses and the progress its bars show."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fleetgui.app.deploy.fleet import app_progress, ring_order
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.fleet.ring.shard_push import DeployPhase, DeployProgress


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
