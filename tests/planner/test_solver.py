"""The layer-to-device planner against the proportional splits, brute force and itself.

A table of heterogeneous fleets (fast and slow devices, small and large memory, slow links,
devices that should be left out, both objectives): the planner's plan must fit, be no worse than
exo's memory-proportional split and a compute-proportional split on every row, and strictly
better on the rows built to show it. On small fleets the solver's optimum must equal brute force
over every subset, order and contiguous split.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, replace

import pytest

from fleetgui.planner import (
    DeviceProfile,
    ModelProfile,
    Plan,
    PlanConfig,
    brute_force,
    compute_proportional,
    memory_proportional,
    solve,
)
from fleetgui.planner.examples import WIFI, device, llama_8b_like, llama_70b_like, random_fleet
from fleetgui.planner.heuristic import solve_heuristic
from fleetgui.planner.milp import solve_milp
from fleetgui.planner.problem import build_problem

log = logging.getLogger(__name__)
WIFI_LINK = {"rtt_ms": WIFI["rtt_ms"], "mbit_s": WIFI["mbit_s"]}
SLOW_LINK = {"rtt_ms": 12.0, "mbit_s": 40.0}


@dataclass(frozen=True)
class Row:
    name: str
    model: ModelProfile
    devices: tuple[DeviceProfile, ...]
    objective: str = "latency"
    strictly_better_than: tuple[str, ...] = ("memory", "compute")
    left_out: tuple[str, ...] = ()  # devices the plan must leave out
    used: tuple[str, ...] = ()  # devices the plan must use


ROWS = (
    Row(
        "one fast PC holds it all",
        llama_8b_like(),
        (device("desk", 32, 1.2), device("laptop-a", 16, 2.0, **WIFI_LINK),
         device("laptop-b", 16, 2.2, **WIFI_LINK)),
        left_out=("laptop-a", "laptop-b"),
    ),
    Row(
        "big-memory slow server",
        llama_70b_like(),
        (device("ultra", 24, 3.0), device("workstation", 32, 3.2), device("old-server", 64, 12.0)),
        left_out=("old-server",),
    ),
    Row(
        "fast PC on a slow link beats a slower wired one",
        llama_8b_like(),
        (device("mini", 5.5, 2.0), device("gaming-wifi", 16, 1.5, **SLOW_LINK),
         device("office-wired", 16, 2.5)),
        used=("mini", "gaming-wifi"),
        left_out=("office-wired",),
    ),
    Row(
        "straggler left out",
        llama_70b_like(),
        (device("a", 16, 4.0), device("b", 16, 4.0), device("c", 16, 4.2), device("d", 16, 4.4),
         device("straggler", 32, 20.0)),
        left_out=("straggler",),
    ),
    Row(
        "memory-bound: everyone needed",
        llama_70b_like(),
        (device("a", 16, 4.0), device("b", 16, 5.0), device("c", 14, 6.0),
         device("d", 8, 3.0, **WIFI_LINK)),
        used=("a", "b", "c", "d"),
    ),
    Row(
        "slow coordinator keeps one layer",
        llama_8b_like(),
        (device("old-coordinator", 8, 9.0), device("fast-1", 16, 1.5), device("fast-2", 16, 1.6)),
        used=("old-coordinator", "fast-1"),
    ),
    Row(
        "throughput: equal desktops, 8 streams",
        llama_8b_like(streams=8),
        tuple(device(f"d{i}", 16, 2.0) for i in range(1, 5)),
        objective="throughput",
        used=("d1", "d2", "d3", "d4"),
    ),
    Row(
        "throughput: fast and slow, 4 streams",
        llama_70b_like(streams=4),
        (device("ultra", 24, 3.0), device("workstation", 48, 3.2), device("old-server", 64, 12.0),
         device("laptop", 16, 5.0, **WIFI_LINK)),
        objective="throughput",
        strictly_better_than=("memory",),
    ),
    Row(
        "throughput: link-bound device left out",
        llama_8b_like(streams=8),
        (device("d1", 16, 2.0), device("d2", 16, 2.0), device("d3", 16, 2.0),
         device("dsl", 16, 1.0, rtt_ms=40, mbit_s=4)),
        objective="throughput",
        left_out=("dsl",),
    ),
)  # fmt: skip


def check_plan(plan: Plan, devices: tuple[DeviceProfile, ...] | list[DeviceProfile],
               model: ModelProfile, config: PlanConfig) -> None:  # fmt: skip
    """Invariants of every plan: coordinator first, contiguous cover, memory, consistent sums."""
    by_name = {d.name: d for d in devices}
    assert plan.stages[0].device == devices[0].name
    start = 0
    for stage in plan.stages:
        assert stage.shard.start_layer == start
        assert stage.shard.n_stage_layers >= 1
        start = stage.shard.end_layer
        assert stage.memory_bytes <= by_name[stage.device].memory_bytes - config.headroom_bytes
    assert start == model.n_layers
    assert plan.fits
    assert sum(s.predicted_ms for s in plan.stages) == pytest.approx(plan.predicted_ms_per_token)
    used = set(plan.devices) | {x.device for x in plan.left_out}
    assert used == set(by_name) and len(plan.devices) + len(plan.left_out) == len(devices)


def score_or_inf(plan: Plan) -> float:
    return plan.score if plan.fits else float("inf")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_planner_beats_proportional_splits(row: Row) -> None:
    config = PlanConfig(objective=row.objective)
    plan = solve(row.devices, row.model, config)
    check_plan(plan, row.devices, row.model, config)
    baselines = {
        "memory": memory_proportional(row.devices, row.model, config),
        "compute": compute_proportional(row.devices, row.model, config),
    }
    for name, baseline in baselines.items():
        log.info("%s: planner %.2f, %s-proportional %.2f%s", row.name, plan.score, name,
                 baseline.score, "" if baseline.fits else " (does not fit)")  # fmt: skip
        assert plan.score <= score_or_inf(baseline) * (1 + 1e-9), name
        if name in row.strictly_better_than:
            assert plan.score < score_or_inf(baseline) * 0.99, name
    for name in row.left_out:
        assert name in {x.device for x in plan.left_out}
    for name in row.used:
        assert name in plan.devices
    if row.objective == "throughput":  # the aggregate rate can only beat one stream's
        assert plan.predicted_tokens_per_s >= 1000 / plan.predicted_ms_per_token - 1e-9


def test_slow_coordinator_keeps_only_stage_0() -> None:
    row = next(r for r in ROWS if r.name.startswith("slow coordinator"))
    plan = solve(row.devices, row.model, PlanConfig())
    assert plan.stages[0].shard.n_stage_layers == 1


def small_model(n_layers: int, streams: int = 1) -> ModelProfile:
    """Layers of about 1 GB (weights and KV cache), so a few GB of memory force splits."""
    return ModelProfile("small@test", n_layers, "int4", 1_700_000_000, 400_000_000, 400_000_000,
                        2048, 4096, 32000, 8192, streams)  # fmt: skip


BRUTE_ROWS = {
    "tight memory, 3 devices": (
        small_model(10),
        [device("c", 6.0, 3.0), device("w1", 7.5, 2.0), device("w2", 9.0, 5.0)],
    ),
    "slow link vs slow compute": (
        small_model(12),
        [device("c", 5.0, 4.0), device("fast-far", 12, 1.0, rtt_ms=25, mbit_s=20),
         device("slow-near", 12, 3.0), device("mid", 6.0, 2.0, **WIFI_LINK)],
    ),
    "straggler with most memory": (
        small_model(8),
        [device("c", 6.0, 2.0), device("w1", 6.0, 2.0), device("w2", 5.0, 2.5),
         device("straggler", 20, 15.0)],
    ),
    "lm_head placement decides": (
        small_model(9),
        [device("c", 8.0, 1.0), device("w1", 4.4, 1.0), device("w2", 4.4, 6.0)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("objective, streams", [("latency", 1), ("throughput", 2)])
@pytest.mark.parametrize("name", list(BRUTE_ROWS))
def test_solver_matches_brute_force(name: str, objective: str, streams: int) -> None:
    model, devices = BRUTE_ROWS[name]
    model = model.with_workload(context_length=model.context_length, streams=streams)
    config = PlanConfig(objective=objective)
    expected = brute_force(devices, model, config)
    assert expected is not None
    plan = solve(devices, model, config)
    check_plan(plan, devices, model, config)
    assert plan.score == pytest.approx(expected.score, rel=1e-9)
    assert plan.predicted_ms_per_token == pytest.approx(expected.predicted_ms_per_token, rel=1e-9)


def test_solver_matches_brute_force_on_random_small_fleets() -> None:
    rng = random.Random(6)
    checked = infeasible = 0
    for _ in range(40):
        model = small_model(rng.randint(4, 10), streams=rng.choice([1, 2, 4, 8]))
        devices = [
            device(f"d{i}", rng.uniform(4.0, 12.0), rng.uniform(0.5, 10.0),
                   rtt_ms=rng.uniform(0.1, 20.0), mbit_s=rng.uniform(8, 900))
            for i in range(rng.randint(1, 4))
        ]  # fmt: skip
        config = PlanConfig(objective=rng.choice(["latency", "throughput"]))
        expected = brute_force(devices, model, config)
        problem = build_problem(devices, model, config)
        choice = solve_milp(problem)
        if expected is None:
            assert choice is None
            infeasible += 1
            continue
        assert choice is not None
        assert problem.score(choice)[0] == pytest.approx(expected.score, rel=1e-9)
        checked += 1
    assert checked >= 25 and infeasible >= 1  # the sweep covers both outcomes


def test_equal_inputs_in_any_order_give_the_same_plan() -> None:
    row = ROWS[3]
    workers = list(row.devices[1:])
    for seed in range(3):
        random.Random(seed).shuffle(workers)
        shuffled = (row.devices[0], *workers)
        assert (
            solve(shuffled, row.model).to_json_dict()
            == solve(row.devices, row.model).to_json_dict()
        )


@pytest.mark.parametrize("objective, streams", [("latency", 1), ("throughput", 8)])
def test_sixteen_devices_eighty_layers_solves_exactly(objective: str, streams: int) -> None:
    devices = random_fleet(16, random.Random(16))
    model, config = llama_70b_like(streams), PlanConfig(objective=objective)
    started = time.perf_counter()
    plan = solve(devices, model, config)
    seconds = time.perf_counter() - started
    print(f"16 devices, 80 layers, {objective}: solved in {seconds:.3f} s ({plan.solver})")
    assert plan.solver == "milp"
    check_plan(plan, devices, model, config)


@pytest.mark.parametrize("objective, streams", [("latency", 1), ("throughput", 8)])
def test_heuristic_beyond_the_exact_limit(objective: str, streams: int) -> None:
    devices = random_fleet(20, random.Random(20))
    model, config = llama_70b_like(streams), PlanConfig(objective=objective)
    plan = solve(devices, model, config)
    assert plan.solver == "heuristic"
    check_plan(plan, devices, model, config)
    exact = solve(devices, model, replace(config, exact_limit=32))
    assert exact.solver == "milp"
    assert exact.score <= plan.score * (1 + 1e-9)  # the exact optimum is never beaten...
    assert plan.score <= exact.score * 1.05  # ...and the heuristic stays close to it
    problem = build_problem(devices, model, config)
    forced = solve_heuristic(problem, force=len(devices) - 1)
    assert forced is not None and forced.counts[-1] >= 1


def test_layers_arg_exports_one_stage_per_device_in_ring_order() -> None:
    from fleetgui.shard import parse_layer_ranges

    model, devices = BRUTE_ROWS["tight memory, 3 devices"]
    plan = solve(devices, model, PlanConfig())
    shards = parse_layer_ranges(model.model_id, model.n_layers, plan.layers_arg)
    assert shards == [s.shard for s in plan.stages]
    single = solve([device("desk", 64, 1.0)], model, PlanConfig())
    assert single.layers_arg == f"0:{model.n_layers}"
