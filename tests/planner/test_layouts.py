"""Layouts for several users: one pipeline, several pipelines, whole copies, or a mix.

A table of fleets and user counts with the layout each must get; every layout (the chosen one and
those behind its alternatives) is checked to stay within every PC's memory with the KV caches of
the users its groups serve. Then the per-user floor, the cost of a group without the coordinator,
a sweep of random fleets (never worse than the one pipeline the solver plans) and the
``fleetgui plan --users`` command.

Why no row gets "one pipeline of 4 PCs for one user" on the fleet where "two pipelines of 2" win:
one user's token runs every layer in turn, so more PCs only help it when the fastest PCs are short
of memory, and the fastest three cannot hold the model; but if two disjoint pairs each hold it,
the fastest three always can. The 4-PC rows show each case on its own fleet.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from fleetgui.planner import DeviceProfile, ModelProfile, PlanConfig, cost, solve
from fleetgui.planner.examples import (
    LOOPBACK,
    ONE_CORE_SMOLLM2_MS_PER_LAYER,
    WIFI,
    device,
    smollm2_135m_like,
)
from fleetgui.planner.groups import user_tokens_per_s, with_token_trip
from fleetgui.planner.layout import Layout
from fleetgui.planner.layouts import candidate_layouts, plan_layout
from fleetgui.planner.solver import NoPlanFitsError, try_solve

WIFI_LINK = {"rtt_ms": WIFI["rtt_ms"], "mbit_s": WIFI["mbit_s"]}
ONE_CORE = ONE_CORE_SMOLLM2_MS_PER_LAYER


def small_model(n_layers: int, *, kv: int = 2048, context: int = 8192) -> ModelProfile:
    """Layers of about 0.9 GB of weights plus ``kv * 2 * context`` bytes of KV cache per user."""
    return ModelProfile("small@test", n_layers, "int4", 1_700_000_000, 400_000_000, 400_000_000,
                        kv, 4096, 32000, context)  # fmt: skip


@dataclass(frozen=True)
class Row:
    name: str
    model: ModelProfile
    devices: tuple[DeviceProfile, ...]
    users: int
    kind: str  # the chosen layout's kind
    groups: tuple[tuple[str, ...], ...]  # each group's PCs, sorted (the order of the groups too)
    users_per_group: tuple[int, ...] | None = None


EQUAL_4 = (device("c", 8, 2.0), device("w1", 8, 2.0), device("w2", 8, 2.0), device("w3", 8, 2.0))
FAST_SMALL_4 = (device("c", 8.5, 4.0), device("f1", 4.5, 1.0), device("f2", 4.5, 1.0),
                device("f3", 4.5, 1.0))  # fmt: skip
SMOLLM2_PCS = (device("pc-a", 4, ONE_CORE), device("pc-b", 4, ONE_CORE, **LOOPBACK))

ROWS = (
    Row("fits every PC, 2 users: a copy per PC", small_model(6),
        (device("desk", 12, 2.0), device("laptop", 12, 2.0)), 2, "copies",
        (("desk",), ("laptop",)), (1, 1)),
    Row("fits every PC, 3 users, unequal PCs: a copy per PC", small_model(6),
        (device("desk", 12, 2.5), device("laptop", 12, 1.5, **WIFI_LINK),
         device("mini", 12, 2.0)), 3, "copies", (("desk",), ("laptop",), ("mini",)), (1, 1, 1)),
    Row("the issue's example: SmolLM2-135M int4, 2 one-core PCs, 2 users", smollm2_135m_like(),
        SMOLLM2_PCS, 2, "copies", (("pc-a",), ("pc-b",)), (1, 1)),
    Row("fits no PC, 1 user: one pipeline", small_model(10),
        (device("a", 8, 2.0), device("b", 8, 2.0)), 1, "pipeline", (("a", "b"),)),
    Row("fits no PC, 3 users: one pipeline", small_model(10),
        (device("a", 8, 2.0), device("b", 8, 2.0)), 3, "pipeline", (("a", "b"),)),
    Row("4 PCs, the model needs 2, 4 users: two pipelines of 2", small_model(8), EQUAL_4, 4,
        "pipelines", (("c", "w2"), ("w1", "w3")), (2, 2)),
    Row("4 PCs, the model needs 2, 8 users: two pipelines of 2", small_model(8), EQUAL_4, 8,
        "pipelines", (("c", "w2"), ("w1", "w3")), (4, 4)),
    Row("4 PCs, the model needs 2, 1 user: one pipeline of 2 (more PCs add hops)",
        small_model(8), EQUAL_4, 1, "pipeline", (("c", "w1"),)),
    Row("4 PCs, fast ones short of memory, 1 user: one pipeline of 4 is faster", small_model(8),
        FAST_SMALL_4, 1, "pipeline", (("c", "f1", "f2", "f3"),)),
    Row("a copy on the big PC, a pipeline over the small ones", small_model(8),
        (device("big", 16, 2.0), device("s1", 7, 2.0), device("s2", 7, 2.0)), 3, "mixed",
        (("big",), ("s1", "s2")), (1, 2)),
    Row("KV caches for 1 user per copy: 3 users get one pipeline", small_model(4, kv=16384,
        context=32768), (device("a", 12, 2.0), device("b", 12, 2.0)), 3, "pipeline",
        (("a", "b"),)),
)  # fmt: skip


def check_layout(
    layout: Layout, devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> None:
    """Groups are disjoint and cover every layer; no PC's memory is exceeded with the KV caches
    of its group's users; the figures add up; every PC is in a group or left out with a reason."""
    by_name = {d.name: d for d in devices}
    assert sum(layout.users_per_group) == layout.users
    assert len(set(layout.devices)) == len(layout.devices)
    for plan, users in zip(layout.groups, layout.users_per_group, strict=True):
        assert plan.streams == users >= 1 and plan.fits
        workload = model.with_workload(context_length=model.context_length, streams=users)
        start = 0
        for index, stage in enumerate(plan.stages):
            n = stage.shard.n_stage_layers
            assert stage.shard.start_layer == start and n >= 1
            start = stage.shard.end_layer
            first, last = index == 0, index == len(plan.stages) - 1
            expected = cost.stage_memory_bytes(n, workload, config, first=first, last=last)
            assert stage.memory_bytes == expected  # holds the KV caches of all its users
            assert stage.memory_bytes <= cost.capacity_bytes(by_name[stage.device], config)
        assert start == model.n_layers
        assert sum(s.predicted_ms for s in plan.stages) == pytest.approx(
            plan.predicted_ms_per_token
        )
        assert user_tokens_per_s(plan) == pytest.approx(
            1000 * min(1 / plan.predicted_ms_per_token, 1 / (plan.bottleneck_ms * users))
        )
    assert layout.predicted_tokens_per_s == pytest.approx(sum(layout.group_tokens_per_s))
    assert layout.slowest_user_tokens_per_s == min(layout.user_tokens_per_s)
    left = [x.device for x in layout.left_out]
    assert sorted(left + list(layout.devices)) == sorted(by_name)
    assert all(x.reason for x in layout.left_out)
    for alternative in layout.alternatives:
        assert alternative.reason
        if alternative.predicted_tokens_per_s is not None and layout.floor_tok_s is None:
            # without a floor the chosen layout has the most tokens/s in all
            assert alternative.predicted_tokens_per_s <= layout.predicted_tokens_per_s
    json.dumps(layout.to_json_dict())  # JSON-safe


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_layout_table(row: Row) -> None:
    config = PlanConfig()
    layout = plan_layout(row.devices, row.model, config, users=row.users)
    check_layout(layout, row.devices, row.model, config)
    assert layout.kind == row.kind, str(layout)
    groups = sorted(tuple(sorted(g.devices)) for g in layout.groups)
    assert tuple(groups) == row.groups, str(layout)
    if row.users_per_group is not None:
        by_group = sorted(zip((tuple(sorted(g.devices)) for g in layout.groups),
                              layout.users_per_group, strict=True))  # fmt: skip
        assert tuple(n for _, n in by_group) == row.users_per_group
    assert layout.alternatives, "the preview says what else was considered"


def test_every_candidate_layout_fits_in_memory() -> None:
    """Not only the chosen layout: every one considered, for several user counts and a floor."""
    config = PlanConfig()
    checked = 0
    for row in ROWS:
        for users in sorted({1, 2, row.users, 2 * row.users}):
            for floor in (None, 40.0):
                layouts, notes = candidate_layouts(row.devices, row.model, config, users, floor)
                for layout in layouts:
                    check_layout(layout, row.devices, row.model, config)
                    checked += 1
                assert all(n.reason and n.predicted_tokens_per_s is None for n in notes)
    assert checked > 100


def test_copies_beat_the_pipeline_in_the_issue_example() -> None:
    layout = plan_layout(SMOLLM2_PCS, smollm2_135m_like(), PlanConfig(), users=2)
    pipeline = next(a for a in layout.alternatives if a.kind == "pipeline")
    assert pipeline.predicted_tokens_per_s is not None
    assert layout.predicted_tokens_per_s > pipeline.predicted_tokens_per_s
    # a copy per one-core PC: ~77.5 tokens/s on the coordinator, less its round trip on the other
    assert layout.group_tokens_per_s[0] == pytest.approx(77.5, rel=0.01)
    assert "pipeline: pc-a+pc-b" in str(layout) and "fewer tokens/s in all" in str(layout)


def test_one_user_gets_more_pcs_only_when_that_is_faster() -> None:
    """Equal PCs: 4 stages add hops and no speed for one user; fast PCs short of memory: each
    pipeline over 3 of the 4 is slower (or does not fit) than the one over all 4."""
    model, config = small_model(8), PlanConfig()
    pair = plan_layout(EQUAL_4, model, config, users=1)
    over_4 = cost.evaluate([(d, 2) for d in EQUAL_4], model, config)
    assert over_4.fits and pair.groups[0].predicted_ms_per_token < over_4.predicted_ms_per_token
    four = plan_layout(FAST_SMALL_4, model, config, users=1)
    ms = four.groups[0].predicted_ms_per_token
    for left_out in FAST_SMALL_4[1:]:
        three = [d for d in FAST_SMALL_4 if d is not left_out]
        plan = try_solve(three, model, config)
        assert plan is None or plan.predicted_ms_per_token > ms


def test_a_coordinator_that_runs_no_stage_gets_workers_only_layouts() -> None:
    """As the replicas runtime deploys them: the issue's example with a routing coordinator."""
    model, config = smollm2_135m_like(), PlanConfig()
    fleet = (device("router", 4, ONE_CORE), *SMOLLM2_PCS[1:], device("pc-c", 4, ONE_CORE,
             **LOOPBACK))  # fmt: skip
    layout = plan_layout(fleet, model, config, users=2, coordinator_runs_stages=False)
    check_layout(layout, fleet, model, config)
    assert layout.description == "copies: pc-b | pc-c"
    assert not any(layout.starts_at_coordinator(i) for i in range(len(layout.groups)))
    assert "router" in {x.device for x in layout.left_out}
    layouts, _ = candidate_layouts(fleet, model, config, 4, coordinator_runs_stages=False)
    assert layouts and all("router" not in x.devices for x in layouts)
    with pytest.raises(ValueError, match="needs at least one worker"):
        plan_layout(fleet[:1], model, config, users=1, coordinator_runs_stages=False)


FLOOR_FLEET = (device("fast", 12, 1.0), device("slow", 12, 5.0))


def test_a_layout_below_the_floor_is_not_chosen_when_another_meets_it() -> None:
    model, config = small_model(6), PlanConfig()
    free = plan_layout(FLOOR_FLEET, model, config, users=2)
    assert free.kind == "copies" and free.slowest_user_tokens_per_s < 50  # the slow PC's copy
    floored = plan_layout(FLOOR_FLEET, model, config, users=2, floor_tok_s=50)
    check_layout(floored, FLOOR_FLEET, model, config)
    assert floored.meets_floor and floored.slowest_user_tokens_per_s >= 50
    assert floored.predicted_tokens_per_s < free.predicted_tokens_per_s  # what the floor costs
    rejected = next(a for a in floored.alternatives if a.description == free.description)
    assert rejected.predicted_tokens_per_s == pytest.approx(free.predicted_tokens_per_s)
    assert "floor of 50 tokens/s" in rejected.reason
    assert "(floor 50 tokens/s: met)" in str(floored)


def test_an_unreachable_floor_gives_the_best_slowest_user() -> None:
    model, config = small_model(6), PlanConfig()
    layout = plan_layout(FLOOR_FLEET, model, config, users=2, floor_tok_s=1000)
    assert not layout.meets_floor
    assert all(
        a.slowest_user_tokens_per_s is None
        or a.slowest_user_tokens_per_s <= layout.slowest_user_tokens_per_s
        for a in layout.alternatives
    )
    assert "not met by any layout" in str(layout)


def test_a_group_without_the_coordinator_pays_the_token_round_trip() -> None:
    """A workers-only group: token ids in over the start's link, its output out over it."""
    model, config = small_model(6), PlanConfig()
    a, b = device("a", 12, 2.0, rtt_ms=3.0, mbit_s=100), device("b", 12, 2.0, rtt_ms=1.0)
    plan = cost.evaluate([(a, 3), (b, 3)], model, config)  # a in the coordinator's place
    trip = with_token_trip(plan, a, model)
    transfer_a = 1000 * model.activation_bytes / a.bandwidth_bytes_per_s
    transfer_b = 1000 * model.activation_bytes / b.bandwidth_bytes_per_s
    hops = a.rtt_ms / 2 + (a.rtt_ms / 2 + b.rtt_ms / 2 + transfer_a + transfer_b)
    hops += b.rtt_ms / 2 + transfer_b  # the last hop back to the coordinator, as in any ring
    compute = sum(s.compute_ms for s in plan.stages)
    assert trip.predicted_ms_per_token == pytest.approx(compute + hops)
    assert sum(s.predicted_ms for s in trip.stages) == pytest.approx(trip.predicted_ms_per_token)
    copy = with_token_trip(cost.evaluate([(a, 6)], model, config), a, model)
    assert copy.predicted_ms_per_token == pytest.approx(
        copy.stages[0].compute_ms + a.rtt_ms + transfer_a
    )


def test_equal_fleets_in_any_order_give_the_same_layout() -> None:
    workers = list(EQUAL_4[1:])
    expected = plan_layout(EQUAL_4, small_model(8), users=4).to_json_dict()
    for seed in range(3):
        random.Random(seed).shuffle(workers)
        shuffled = (EQUAL_4[0], *workers)
        assert plan_layout(shuffled, small_model(8), users=4).to_json_dict() == expected


def test_random_fleets_never_lose_to_the_single_pipeline() -> None:
    rng = random.Random(11)
    config, checked = PlanConfig(), 0
    for _ in range(12):
        model = small_model(rng.randint(4, 9))
        devices = [
            device(f"d{i}", rng.uniform(5.0, 14.0), rng.uniform(0.5, 6.0),
                   rtt_ms=rng.uniform(0.1, 8.0), mbit_s=rng.uniform(50, 900))
            for i in range(rng.randint(1, 4))
        ]  # fmt: skip
        users = rng.randint(1, 6)
        try:
            layout = plan_layout(devices, model, config, users=users)
        except NoPlanFitsError:
            continue
        check_layout(layout, devices, model, config)
        workload = model.with_workload(context_length=model.context_length, streams=users)
        try:
            single = solve(devices, workload, PlanConfig(objective="throughput"))
        except NoPlanFitsError:
            continue
        assert layout.predicted_tokens_per_s >= single.predicted_tokens_per_s * (1 - 1e-9)
        checked += 1
    assert checked >= 6


def test_bad_arguments_and_no_fit() -> None:
    with pytest.raises(ValueError, match="users must be at least 1"):
        plan_layout(EQUAL_4, small_model(8), users=0)
    with pytest.raises(ValueError, match="floor must be positive"):
        plan_layout(EQUAL_4, small_model(8), users=1, floor_tok_s=0)
    with pytest.raises(NoPlanFitsError, match="needs"):
        plan_layout((device("tiny", 4, 1.0),), small_model(8), users=1)
