"""Re-planning after runtime events, the plan preview, and the error when nothing fits."""

from __future__ import annotations

import pytest
from cli_support import PLAN_DEVICE_KEYS, PLAN_KEYS

from fleetgui.fleet.replanning.replan import DeviceLost, ReplanError, SpeedDrift, replan, rescore
from fleetgui.planner import NoPlanFitsError, Plan, PlanConfig, solve
from fleetgui.planner.examples import device, llama_8b_like, llama_70b_like

FLEET = [
    device("coordinator", 16, 4.0),
    device("workstation", 24, 4.0),
    device("laptop", 16, 4.2),
    device("old-pc", 16, 14.0),
]
MODEL = llama_70b_like()  # 80 layers of ~0.46 GB: needs two or three of the fast PCs


@pytest.fixture(scope="module")
def plan() -> Plan:
    return solve(FLEET, MODEL)


def test_the_fixture_plan_uses_the_fast_pcs(plan: Plan) -> None:
    assert plan.devices[0] == "coordinator"
    assert "old-pc" in {x.device for x in plan.left_out}
    assert len(plan.devices) >= 2


def test_losing_a_used_device_replans_without_it(plan: Plan) -> None:
    lost = plan.devices[-1]
    new = replan(plan, FLEET, MODEL, DeviceLost(lost))
    assert new is not None
    assert lost not in new.devices and lost not in {x.device for x in new.left_out}
    assert sum(new.layer_counts) == MODEL.n_layers
    assert new.stages[0].device == "coordinator"


def test_losing_a_left_out_device_keeps_the_plan(plan: Plan) -> None:
    assert replan(plan, FLEET, MODEL, DeviceLost("old-pc")) is None


def test_losing_the_coordinator_is_an_error(plan: Plan) -> None:
    with pytest.raises(ReplanError, match="coordinator"):
        replan(plan, FLEET, MODEL, DeviceLost("coordinator"))


def test_losing_too_much_memory_says_what_is_missing(plan: Plan) -> None:
    three = FLEET[:3]
    three_plan = solve(three, MODEL)
    assert len(three_plan.devices) == 3  # all are needed for memory
    with pytest.raises(NoPlanFitsError, match="GB more"):
        replan(three_plan, three, MODEL, DeviceLost("workstation"))


@pytest.mark.parametrize("factor", [0.9, 1.15, 1.2])
def test_small_drift_keeps_the_plan(plan: Plan, factor: float) -> None:
    name = plan.devices[1]
    ms = next(d.ms_per_layer for d in FLEET if d.name == name) * factor
    assert replan(plan, FLEET, MODEL, SpeedDrift(name, ms)) is None


def test_a_device_that_slows_down_loses_layers(plan: Plan) -> None:
    name = plan.devices[1]
    before = plan.shard_of(name)
    assert before is not None
    new = replan(plan, FLEET, MODEL, SpeedDrift(name, 12.0))  # three times slower
    assert new is not None
    after = new.shard_of(name)
    assert after is None or after.n_stage_layers < before.n_stage_layers
    slowed = [d.with_ms_per_layer(12.0) if d.name == name else d for d in FLEET]
    assert new.score < rescore(plan, slowed, MODEL, PlanConfig()).score


def test_a_left_out_device_that_speeds_up_joins(plan: Plan) -> None:
    new = replan(plan, FLEET, MODEL, SpeedDrift("old-pc", 1.0))
    assert new is not None and "old-pc" in new.devices


def test_drift_that_changes_nothing_returns_none() -> None:
    fleet = [device("desk", 32, 1.0), device("slow", 16, 8.0)]
    model = llama_8b_like()
    plan = solve(fleet, model)
    assert plan.devices == ("desk",)
    assert replan(plan, fleet, model, SpeedDrift("slow", 16.0)) is None


def test_the_preview_says_who_runs_what(plan: Plan) -> None:
    text = str(plan)
    assert text.splitlines() == plan.table_lines()
    for stage in plan.stages:
        line = next(x for x in text.splitlines() if f" {stage.device} " in x)
        assert f"{stage.shard.start_layer}:{stage.shard.end_layer}" in line
        assert f"{stage.memory_bytes / 1e9:.2f} GB" in line
    assert f"{plan.predicted_tokens_per_s:.1f} tokens/s" in text
    assert "Left out:" in text and "old-pc: leaving it out is faster" in text


def test_json_document_has_exactly_the_contract_keys(plan: Plan) -> None:
    """The keys of the plan contract, with what continuous batching added (issue 40: one
    stream's KV on each device and the most streams each, and so the plan, holds)."""
    doc = plan.to_json_dict()
    assert set(doc) == PLAN_KEYS
    assert all(set(d) == PLAN_DEVICE_KEYS for d in doc["devices"])
    assert all(set(x) == {"name", "reason"} for x in doc["left_out"])


def test_no_fit_names_the_shortfall_and_a_format_that_fits() -> None:
    fleet = [device("a", 24, 4.0), device("b", 24, 4.0), device("c", 24, 4.0)]
    model = llama_70b_like(weight_format="fp16")
    with pytest.raises(NoPlanFitsError) as info:
        solve(fleet, model)
    message = str(info.value)
    config = PlanConfig()
    have = sum(d.memory_bytes - config.headroom_bytes - config.runtime_bytes for d in fleet)
    assert f"needs {(model.total_bytes - have) / 1e9:.1f} GB more" in message
    assert message.endswith("; int4 weights would fit (export with --weights int4)")
    with pytest.raises(NoPlanFitsError):  # int4 is the first smaller format that fits...
        solve(fleet, model.with_weight_format("int8"))
    solve(fleet, model.with_weight_format("int4"))  # ...and it really does


def test_no_fit_suggests_a_shorter_context() -> None:
    fleet = [device("a", 16, 2.0), device("b", 16, 2.0)]
    model = llama_8b_like(streams=64)  # the KV cache of 64 streams is what does not fit
    with pytest.raises(NoPlanFitsError, match=r"a context of (2048|1024) tokens would fit"):
        solve(fleet, model)


def test_no_fit_at_int4_suggests_a_model_size() -> None:
    fleet = [device("a", 16, 4.0), device("b", 16, 4.0)]
    with pytest.raises(NoPlanFitsError, match=r"even int4 weights do not fit: .* about \d+\.\dB"):
        solve(fleet, llama_70b_like())
