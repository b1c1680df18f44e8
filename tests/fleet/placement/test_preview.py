"""The plan preview (``fleetgui.fleet.placement.preview``): the deployment view's plan and the
fleet assignment deployed from it (pure, on a manifest).

The bug these guard: the preview showed a layer-level plan while the deployer spread the
export's stages over every usable worker in ring order, so workers the preview left out got
stages. Now the preview places the export's whole stages and the deployer deploys that plan.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest, ManifestStage
from fleetgui.fleet.placement.assignment import StageToPlace, initial_assignment
from fleetgui.fleet.placement.preview import (
    PreviewRequest,
    export_stages,
    groups_to_deploy,
    in_plan_order,
    layout_text,
    plan_assignment,
    preview_layout,
    preview_plan,
    replicas_phrase,
    rows_of,
)
from fleetgui.planner import ModelProfile, PlanConfig, plan_fixed_stages
from fleetgui.planner.examples import device
from fleetgui.planner.fixed_stages import plan_rows
from fleetgui.shard import parse_layer_ranges

WORKERS = ["w1", "w2", "w3"]


def write_export(folder: Path, stages: list[tuple[int, int]]) -> Path:
    """A manifest with these stage boundaries (no weight files: only the layout is read)."""
    entries = tuple(ManifestStage(i, s, e, (), (), (), ()) for i, (s, e) in enumerate(stages))
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
    units = [StageToPlace(i, shard, 1) for i, shard in enumerate(export_stages(export))]
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
    stages = parse_layer_ranges("tiny@test", 4, "0:2,2:3,3:4")
    plan = plan_fixed_stages([devices[0], devices[3], devices[1]], model(), stages)
    assert plan.devices == ("here", "w3")  # the first worker of its order on a tie
    assert [d.name for d in in_plan_order(devices, plan)] == ["here", "w3", "w1", "w2"]
    assert in_plan_order(devices, None) == devices


@pytest.mark.parametrize(
    ("name", "users", "workers", "copies"),
    [
        ("2 users, 2 workers: a copy on each", 2, 2, WORKERS[:2]),
        ("1 user: one copy gains nothing, the pipeline is deployed", 1, 2, []),
        ("2 users, 1 worker: one copy is no replica, the pipeline is deployed", 2, 1, []),
    ],
)
def test_the_preview_layout_and_what_deploy_runs(
    tmp_path: Path, name: str, users: int, workers: int, copies: list[str]
) -> None:
    """The layout is planned for the streams on the workers only (this PC routes tokens: the
    app's copies run on workers), and Deploy runs copies only when there are several, for
    several users, faster than the previewed pipeline."""
    export = write_export(tmp_path / "exp", [(0, 2), (2, 4)])
    devices = (device("here", 16, 20.0), *(device(n, 16, 1.0) for n in WORKERS[:workers]))
    request = PreviewRequest(export, devices, PlanConfig(), streams=users)
    plan, layout = preview_plan(request), preview_layout(request)
    assert layout is not None and layout.users == users and "here" not in layout.devices
    assert sorted(g for (g,) in groups_to_deploy(plan, layout)) == copies, name
    text = layout_text(plan, layout)
    assert text.startswith("Layout for tiny") and f"for {users} user(s)" in text
    last = text.splitlines()[-1]
    if copies:
        assert last.startswith(f"Deploy runs {len(copies)} whole copies, on ")
    else:
        assert last.startswith("Deploy runs the pipeline above (")
        # issue 39: a layout predicting more than the pipeline Deploy runs says why
        assert layout.predicted_tokens_per_s > plan.predicted_tokens_per_s, name
        predicted = f"not the layout's {layout.predicted_tokens_per_s:.1f} tokens/s: "
        why = "2 or more streams at once" if users < 2 else "2 or more groups"
        assert predicted in last and why in last, last
    assert groups_to_deploy(plan, None) == () and layout_text(plan, None) == ""
    assert preview_layout(PreviewRequest(export, devices[:1], PlanConfig())) is None


def test_deploy_runs_two_pipelines_of_two_for_many_users_and_says_so() -> None:
    """4 workers, the model needs 2 of them, 4 users: Deploy gets two groups of two, each in
    its ring order, and the preview names them."""
    from fleetgui.planner import plan_layout

    weights = ModelProfile(
        "small@test", 8, "int4", 1_700_000_000, 400_000_000, 400_000_000, 2048, 4096, 32000, 8192
    )
    devices = (device("here", 8, 2.0), *(device(w, 8, 2.0) for w in ("w1", "w2", "w3", "w4")))
    layout = plan_layout(devices, weights, PlanConfig(), users=4, coordinator_runs_stages=False)
    groups = groups_to_deploy(None, layout)
    assert layout.kind == "pipelines" and len(groups) == 2 and all(len(g) == 2 for g in groups)
    assert sorted(w for g in groups for w in g) == ["w1", "w2", "w3", "w4"]
    assert replicas_phrase(groups) == f"2 replicas: {'+'.join(groups[0])} | {'+'.join(groups[1])}"
    assert groups_to_deploy(None, plan_layout(devices, weights, users=1)) == ()  # one user
    assert replicas_phrase((("a",), ("b",))) == "2 whole copies, on a, b"
