"""The deployment view's plan and the fleet assignment deployed from it (pure, on a manifest).

The bug these guard: the preview showed a layer-level plan while the deployer spread the
export's stages over every usable worker in ring order, so workers the preview left out got
stages. Now the preview places the export's whole stages and the deployer deploys that plan.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from fleetgui.app.export_job import default_export_dir
from fleetgui.app.plan_preview import export_stages, in_plan_order, plan_assignment, rows_of
from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest, StageEntry
from fleetgui.fleet.assignment import StageUnit, initial_assignment
from fleetgui.planner import ModelProfile, plan_fixed_stages
from fleetgui.planner.examples import device
from fleetgui.planner.fixed_stages import plan_rows

WORKERS = ["w1", "w2", "w3"]


def write_export(folder: Path, stages: list[tuple[int, int]]) -> Path:
    """A manifest with these stage boundaries (no weight files: only the layout is read)."""
    entries = tuple(StageEntry(i, s, e, (), (), (), ()) for i, (s, e) in enumerate(stages))
    folder.mkdir(parents=True, exist_ok=True)
    Manifest("tiny", "0" * 64, "llama", stages[-1][1], 64, 100, "fp32", entries).write(folder)
    return folder


def model(n_layers: int = 4) -> ModelProfile:
    return ModelProfile("tiny@test", n_layers, "fp32", 50_000, 6_400, 6_400, 128, 64, 100)


@pytest.mark.parametrize(
    ("name", "coordinator_ms", "local", "members", "spares"),
    [
        ("equal PCs: everything here, every worker a spare", 1.0, (0, 1, 2), [], WORKERS),
        ("slow coordinator: stage 0 here, one worker", 20.0, (0,), [("w1", (1, 2))], WORKERS[1:]),
    ],
)
def test_the_assignment_is_the_plan(
    tmp_path: Path,
    name: str,
    coordinator_ms: float,
    local: tuple[int, ...],
    members: list[tuple[str, tuple[int, ...]]],
    spares: list[str],
) -> None:
    export = write_export(tmp_path / "exp", [(0, 2), (2, 3), (3, 4)])
    devices = [device("here", 16, coordinator_ms)] + [device(w, 16, 1.0) for w in WORKERS]
    plan = plan_fixed_stages(devices, model(), export_stages(export))
    assignment = plan_assignment(plan, export, WORKERS, coordinator="here")
    assert assignment.local == local
    assert [(m.name, m.indices) for m in assignment.members] == members
    assert list(assignment.spares) == spares == sorted(x.device for x in plan.left_out)
    assert rows_of(assignment, export_stages(export), "here") == plan_rows(plan)
    # what the deployer did before: every remote stage on the workers in ring order
    units = [StageUnit(i, s, e, 1) for i, (s, e) in enumerate(export_stages(export))]
    before = initial_assignment(units, WORKERS)
    assert [m.name for m in before.members] == ["w1", "w2"]  # w2 got a stage it was left out of


def test_a_stale_plan_is_refused_with_the_fix(tmp_path: Path) -> None:
    export = write_export(tmp_path / "exp", [(0, 2), (2, 3), (3, 4)])
    devices = [device("here", 16, 20.0), device("w1", 16, 1.0)]
    plan = plan_fixed_stages(devices, model(), export_stages(export))
    with pytest.raises(FleetguiError, match="w1, which cannot be used now: preview the plan"):
        plan_assignment(plan, export, ["w2"], coordinator="here")
    with pytest.raises(FleetguiError, match="starts on here, not on this PC"):
        plan_assignment(plan, export, ["w1"], coordinator="elsewhere")
    other = write_export(tmp_path / "other", [(0, 1), (1, 4)])
    with pytest.raises(FleetguiError, match="not whole stages"):
        plan_assignment(plan, other, ["w1"], coordinator="here")


def test_devices_follow_the_plan_order() -> None:
    devices = [device("here", 16, 20.0)] + [device(w, 16, 1.0) for w in WORKERS]
    plan = plan_fixed_stages(
        [devices[0], devices[3], devices[1]], model(), [(0, 2), (2, 3), (3, 4)]
    )
    assert plan.devices == ("here", "w3")  # the first worker of its order on a tie
    assert [d.name for d in in_plan_order(devices, plan)] == ["here", "w3", "w1", "w2"]
    assert in_plan_order(devices, None) == devices


def test_an_export_made_for_a_plan_gets_its_own_folder(tmp_path: Path) -> None:
    assert default_export_dir(Path("m/tiny"), "int4", 2, tmp_path) == tmp_path / "tiny-int4-2s"
    assert default_export_dir(Path("m/tiny"), "int4", 2, tmp_path, layers="0:1,1:4") == (
        tmp_path / "tiny-int4-2s-0-1-4"
    )
