"""Planning over an export's fixed stages: whole stages per device, coordinator first.

A table of fleets (everything fits on the coordinator, a slow coordinator, memory that forces
every PC in, a PC too small for any stage, throughput), then properties: the dynamic programme
equals scoring every grouping, an export made from a layer plan is placed as that plan, and every
plan maps back to whole stages. The bug this fixes: the preview showed a layer-level plan while
the deployer put the export's stages elsewhere (workers the preview left out got stages).
"""

from __future__ import annotations

import itertools
import logging
import random
from dataclasses import dataclass, field

import pytest

from fleetgui.planner import (
    DeviceProfile,
    ModelProfile,
    NoPlanFitsError,
    PlanConfig,
    PlanMismatchError,
    plan_fixed_stages,
    solve,
    stage_groups,
)
from fleetgui.planner.examples import device, llama_8b_like, random_fleet
from fleetgui.planner.fixed_stages import check_stages
from fleetgui.shard import Shard

log = logging.getLogger(__name__)


def shards_of(*ranges: tuple[int, int], n_layers: int = 8) -> tuple[Shard, ...]:
    """The shards of an export's stages (of the 8-layer ``small_model`` by default)."""
    return tuple(Shard("small@test", start, end, n_layers) for start, end in ranges)


FOUR = shards_of((0, 2), (2, 4), (4, 6), (6, 8))  # an 8-layer model exported in 4 stages


def small_model(n_layers: int = 8, streams: int = 1) -> ModelProfile:
    """Layers of about 0.92 GB (int4 weights and KV cache): a few GB of memory force splits."""
    return ModelProfile("small@test", n_layers, "int4", 1_700_000_000, 400_000_000, 400_000_000,
                        2048, 4096, 32000, 8192, streams)  # fmt: skip


@dataclass(frozen=True)
class Row:
    name: str
    devices: tuple[DeviceProfile, ...]
    rows: tuple[str, ...]  # "device start:end" in ring order
    left_out: dict[str, str] = field(default_factory=dict)  # device: start of its reason
    stages: tuple[Shard, ...] = FOUR
    objective: str = "latency"
    streams: int = 1


ROWS = (
    Row(
        "the coordinator holds it all: workers only add hops",
        (device("c", 16, 1.0), device("w1", 16, 1.0), device("w2", 16, 1.0)),
        ("c 0:8",),
        {"w1": "leaving it out is faster", "w2": "leaving it out is faster"},
    ),
    Row(
        "slow coordinator keeps stage 0; one worker takes the rest, the other is not needed",
        (device("c", 16, 5.0), device("w1", 16, 1.0), device("w2", 16, 1.0)),
        ("c 0:2", "w1 2:8"),
        {"w2": "not needed: the export's 4 stage(s) run as fast without it"},
    ),
    Row(
        "memory: each PC holds one stage",
        (device("c", 4.5, 1.0), device("w1", 4.5, 1.0), device("w2", 4.5, 3.0),
         device("w3", 4.5, 1.0)),
        ("c 0:2", "w1 2:4", "w2 4:6", "w3 6:8"),
    ),
    Row(
        "a PC too small for any stage is left out for its memory",
        (device("c", 16, 5.0), device("tiny", 2.5, 0.5), device("w1", 16, 1.0)),
        ("c 0:2", "w1 2:8"),
        {"tiny": "not enough memory: 0.50 GB usable"},
    ),
    Row(
        "the faster of two workers gets the stages, whatever the order",
        (device("c", 16, 5.0), device("slow", 16, 2.0), device("fast", 16, 1.0)),
        ("c 0:2", "fast 2:8"),
        {"slow": "leaving it out is faster"},
    ),
    Row(
        "uneven stages: the big one goes to the fast worker",
        (device("c", 16, 3.0), device("fast", 16, 1.0)),
        ("c 0:1", "fast 1:8"),
        stages=shards_of((0, 1), (1, 8)),
    ),
    Row(
        "throughput with 4 streams spreads the stages",
        (device("c", 16, 1.1), device("w1", 16, 1.0), device("w2", 16, 1.0)),
        ("c 0:2", "w1 2:6", "w2 6:8"),
        objective="throughput",
        streams=4,
    ),
)  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_fixed_stage_plans(row: Row) -> None:
    model = small_model(streams=row.streams)
    plan = plan_fixed_stages(row.devices, model, row.stages, PlanConfig(objective=row.objective))
    log.info("%s\n%s", row.name, plan)
    got = tuple(f"{s.device} {s.shard.start_layer}:{s.shard.end_layer}" for s in plan.stages)
    assert got == row.rows
    assert plan.fits and plan.solver == "fixed-stages"
    reasons = {x.device: x.reason for x in plan.left_out}
    assert set(reasons) == {d.name for d in row.devices} - set(plan.devices)
    for name, start in row.left_out.items():
        assert reasons[name].startswith(start), reasons[name]
    assert [x.device for x in plan.left_out] == sorted(reasons)
    groups = stage_groups(plan, row.stages)  # every device runs whole, consecutive stages
    assert [i for _, indices in groups for i in indices] == list(range(len(row.stages)))
    assert [name for name, _ in groups] == list(plan.devices)


def test_the_dynamic_programme_equals_scoring_every_grouping() -> None:
    rng = random.Random(7)
    model = llama_8b_like()
    compared = 0
    for _ in range(40):
        devices = random_fleet(rng.randint(1, 6), rng, speed_scale=0.25)
        cuts = sorted(rng.sample(range(1, model.n_layers), rng.randint(0, 6)))
        bounds = [0, *cuts, model.n_layers]
        shards = shards_of(*itertools.pairwise(bounds), n_layers=model.n_layers)
        try:
            every = plan_fixed_stages(devices, model, shards)
        except NoPlanFitsError:
            with pytest.raises(NoPlanFitsError):
                plan_fixed_stages(devices, model, shards, max_candidates=0)
            continue
        dp = plan_fixed_stages(devices, model, shards, max_candidates=0)
        assert dp.solver == "fixed-stages-dp" and dp.fits
        assert dp.predicted_ms_per_token == pytest.approx(every.predicted_ms_per_token)
        assert [x.device for x in dp.left_out] == [x.device for x in every.left_out]
        assert [x.reason for x in dp.left_out] == [x.reason for x in every.left_out]
        compared += 1
    assert compared >= 20


@pytest.mark.parametrize("objective, streams", [("latency", 1), ("throughput", 4)])
def test_an_export_made_from_a_layer_plan_is_placed_as_that_plan(
    objective: str, streams: int
) -> None:
    """What the app does with a HuggingFace model: plan, export with the plan's --layers, and
    place the export's stages (devices in the plan's order): the same layout and time."""
    rng = random.Random(11)
    config = PlanConfig(objective=objective)
    model = small_model(10, streams)
    checked = 0
    for _ in range(12):
        devices = random_fleet(rng.randint(2, 5), rng)
        try:
            layered = solve(devices, model, config)
        except NoPlanFitsError:
            continue
        shards = [s.shard for s in layered.stages]
        rank = {name: i for i, name in enumerate(layered.devices)}
        ordered = [devices[0], *sorted(devices[1:], key=lambda d: rank.get(d.name, len(rank)))]
        placed = plan_fixed_stages(ordered, model, shards, config)
        log.info("layer plan %s, placed %s", layered.layers_arg, placed.layers_arg)
        # the layer plan's own layout is one of the groupings, and no grouping beats the
        # layer-level optimum: the same time (and memory fits)
        assert placed.fits and placed.score == pytest.approx(layered.score, rel=1e-6)
        checked += 1
    assert checked >= 6


def test_a_grouping_that_cannot_fit_says_which_stage_and_the_fix() -> None:
    model = small_model()
    small_coordinator = [device("c", 3.0, 1.0), device("w1", 16, 1.0)]
    with pytest.raises(NoPlanFitsError, match="coordinator c cannot hold the export's first"):
        plan_fixed_stages(small_coordinator, model, shards_of((0, 4), (4, 8)))
    too_big = [device("c", 4.5, 1.0), device("w1", 4.5, 1.0)]
    with pytest.raises(NoPlanFitsError, match=r"largest \(layers 2-7\).*--stages N or --layers"):
        plan_fixed_stages(too_big, model, shards_of((0, 2), (2, 8)))


def test_stages_that_do_not_cover_the_model_are_refused() -> None:
    check_stages(FOUR, 8)
    for bad in ((), shards_of((0, 4), (5, 8)), shards_of((0, 4)), shards_of((1, 8))):
        with pytest.raises(ValueError, match="stage"):
            check_stages(bad, 8)
    with pytest.raises(ValueError, match=r"invalid layer range \[4, 4\)"):  # no empty stage
        shards_of((0, 4), (4, 4), (4, 8))


def test_a_plan_that_is_not_whole_stages_is_refused_for_deployment() -> None:
    devices = [device("c", 16, 5.0), device("w1", 16, 1.0)]
    plan = plan_fixed_stages(devices, small_model(), FOUR)
    assert stage_groups(plan, FOUR) == [("c", (0,)), ("w1", (1, 2, 3))]
    with pytest.raises(PlanMismatchError, match="w1 layers 2-7, which are not whole stages"):
        stage_groups(plan, shards_of((0, 2), (2, 5), (5, 9), n_layers=9))
    with pytest.raises(PlanMismatchError, match="covers 4 of the export's 5 stages"):
        stage_groups(plan, shards_of((0, 2), (2, 4), (4, 6), (6, 8), (8, 9), n_layers=9))


def test_a_single_stage_export_runs_on_the_coordinator() -> None:
    devices = [device("c", 16, 5.0), device("w1", 16, 1.0)]
    plan = plan_fixed_stages(devices, small_model(), shards_of((0, 8)))
    assert plan.devices == ("c",) and plan.layers_arg == "0:8"
    assert plan.left_out[0].reason == "the export has a single stage, which the coordinator runs"
