"""Re-planning a running fleet (``fleetgui.fleet.replanning.live_replanner``): the speed monitor,
the re-plan decisions, and real worker processes whose stages move while a chat goes on (the
text stays the monolithic model's)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from fleet_support import FAST_LINKS, StopStartThrottle, running_workers
from runtime_support import EXACT, export, reference_greedy

from fleetgui.fleet.placement.assignment import Assignment, Member
from fleetgui.fleet.replanning.live_replanner import (
    LiveReplanner,
    PlanContext,
    ReplanConfig,
    SpeedMonitor,
)
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.info_probe import probe
from fleetgui.net.keys import KeyPair
from fleetgui.planner import DeviceProfile, PlanConfig, load_model_profile
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of
from fleetgui.shard import even_split

GB = 1_000_000_000
FAST = ReplanConfig(warmup_passes=0, baseline_passes=4, window=6, cooldown_s=0.0)
LIVE = ReplanConfig(warmup_passes=2, baseline_passes=4, window=6, cooldown_s=0.0)
# Only a drift beyond what a busy machine causes before the throttle's: with other jobs on its
# 2 cores, worker a read 1.27x slower while b was stopped, crossed the default 20 % first and
# took b's stage. The throttled b reads ~4x slower, so a 100 % threshold sees b's drift first.
LIVE_THROTTLED = replace(LIVE, drift_threshold=1.0)
STAGES = tuple(even_split("tiny", 6, 3))  # three 2-layer stages of a 6-layer model
N_NEW = 40
PROMPT = "def add(a, b):\n    return"


def device(name: str, ms_per_layer: float, memory: int = 16 * GB) -> DeviceProfile:
    return DeviceProfile(name, memory, ms_per_layer, 1e9, rtt_ms=0.0, bandwidth_bytes_per_s=1e12)


def model_profile() -> ModelProfile:
    return ModelProfile(
        model_id="tiny",
        n_layers=6,
        weight_format="fp32",
        layer_parameters=100_000,
        embedding_parameters=10_000,
        lm_head_parameters=10_000,  # the lm_head costs 0.1 layer on the last device
        kv_elements_per_token_per_layer=128,
        hidden_size=64,
        vocab_size=512,
        context_length=256,
    )


def context(*devices: DeviceProfile) -> PlanContext:
    return PlanContext(devices, model_profile(), STAGES, PlanConfig(headroom_bytes=0))


# -- the monitor and the decisions (pure) ------------------------------------------------------


def test_monitor_reports_a_ratio_against_each_pass_kinds_own_baseline() -> None:
    monitor = SpeedMonitor(FAST)
    for _ in range(4):  # baselines: 1-token passes 2 ms, K+1 = 4 passes 3 ms
        monitor.add("b", 2, 1, 2.0)
        monitor.add("b", 2, 4, 3.0)
    monitor.add("b", 2, 300, 90.0)  # a prefill chunk: not watched
    assert monitor.ratio("b") is None
    for _ in range(3):
        monitor.add("b", 2, 1, 2.2)
        monitor.add("b", 2, 4, 3.3)
    assert monitor.ratio("b") == pytest.approx(1.1)
    for _ in range(6):
        monitor.add("b", 2, 1, 5.0)
    assert monitor.ratio("b") == pytest.approx(2.5)
    monitor.add("a", 1, 1, 1.0)
    monitor.reset("b")
    assert monitor.ratio("b") is None
    assert monitor._first == {("a", 1, 1): [1.0]}  # a's passes are kept


def _deployed(replanner: LiveReplanner) -> Assignment:
    assignment = Assignment((0,), (Member("a", (1,)), Member("b", (2,))))
    replanner.deployed(assignment)
    return assignment


def _feed(replanner: LiveReplanner, stage: int, ms: float, n: int):
    drift = None
    for _ in range(n):
        drift = replanner.observe(stage, 1, ms) or drift
    return drift


def test_a_device_that_slows_down_loses_its_stage() -> None:
    replanner = LiveReplanner(context(device("pc", 3.0), device("a", 1.0), device("b", 1.0)), FAST)
    assignment = _deployed(replanner)
    assert _feed(replanner, 2, 2.0, 4 + 6) is None  # steady: no drift
    drift = _feed(replanner, 2, 6.0, 6)
    assert drift is not None and drift.device == "b"
    assert drift.ms_per_layer == pytest.approx(3.0)
    better = replanner.on_drift(drift, assignment, ["a", "b"])
    assert better == Assignment((0,), (Member("a", (1, 2)),), ("b",))
    assert replanner.context.devices[2].ms_per_layer == pytest.approx(3.0)
    assert replanner.monitor.ratio("b") is None  # baselines are taken afresh


def test_a_small_gain_is_not_worth_a_reload() -> None:
    """b 25 % slower: moving its stage to a saves under 5 % (10.5 vs 10 ms): kept."""
    replanner = LiveReplanner(context(device("pc", 3.0), device("a", 1.0), device("b", 1.0)), FAST)
    assignment = _deployed(replanner)
    _feed(replanner, 2, 2.0, 4)
    drift = _feed(replanner, 2, 2.5, 6)
    assert drift is not None
    assert replanner.on_drift(drift, assignment, ["a", "b"]) is None
    assert "keeping the layout" in replanner.events[-1]


def test_after_a_failover_onto_a_slow_spare_the_planner_moves_the_stage() -> None:
    replanner = LiveReplanner(
        context(device("pc", 3.0), device("a", 1.0), device("b", 1.0), device("c", 4.0)), FAST
    )
    _deployed(replanner)
    after_failover = Assignment((0,), (Member("a", (1,)), Member("c", (2,))))
    better = replanner.on_lost("b", after_failover, ["a", "c"])
    assert better == Assignment((0,), (Member("a", (1, 2)),), ("c",))
    assert [d.name for d in replanner.context.devices] == ["pc", "a", "c"]
    assert replanner.on_lost("b", after_failover, ["a", "c"]) is None  # already gone


def test_a_layout_without_coordinator_stages_is_not_replanned() -> None:
    replanner = LiveReplanner(context(device("pc", 1.0), device("a", 1.0), device("b", 1.0)), FAST)
    layout = Assignment((), (Member("a", (0, 1)), Member("b", (2,))))
    assert replanner.plan_of(layout, replanner.context.devices) is None
    assert replanner.on_lost("b", layout, ["a"]) is None


# -- a real fleet ------------------------------------------------------------------------------

pytest_slow = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(
    tiny_models: Callable[..., Path], root: Path, identity: KeyPair, authorized_keys: Path
) -> tuple[Path, list[int], KeyPair, Path]:
    model = tiny_models("llama", n_layers=6)
    staged = export(model, root / "exp-3s", layers="0:2,2:4,4:6")
    mono = export(model, root / "exp-1s", stages=1)
    tokenizer = Tokenizer(tokenizer_dir_of(staged))
    reference = reference_greedy(mono, tokenizer.encode(PROMPT), N_NEW)
    return staged, reference, identity, authorized_keys


def _session(identity: KeyPair) -> FleetSession:
    config = CoordinatorConfig(link=FAST_LINKS, local=EXACT)
    return FleetSession(identity, config)


async def _chat(session: FleetSession, on_token: Callable[[int], None]) -> GenerationResult:
    pipe = session.pipeline()
    result = None
    seen = 0
    async for item in pipe.stream(PROMPT, GenerationConfig(max_new_tokens=N_NEW)):
        if isinstance(item, GenerationResult):
            result = item
        else:
            seen += 1
            on_token(seen)
            await asyncio.sleep(0.01)  # a chat's pace: lets the re-plan task run between steps
    assert result is not None
    return result


async def _assert_new_chat_is_exact(session: FleetSession, reference: list[int]) -> None:
    """A new chat on the re-planned fleet gives the monolithic model's text too."""
    again = await session.pipeline().complete(PROMPT, GenerationConfig(max_new_tokens=N_NEW))
    assert again.token_ids == reference


@pytest_slow
def test_fleet_moves_a_stage_off_a_worker_that_slows_down(
    setup: tuple[Path, list[int], KeyPair, Path], tmp_path: Path
) -> None:
    """coordinator [0], a [1], b [2]; after 10 tokens b is slowed (stopped 0.9 ms of every 1.2):
    the monitor sees b's stage time drift, the planner gives b's stage to a, the ring switches
    between two steps, b is unloaded, and the text is the monolithic model's."""
    staged, reference, identity, keys = setup
    with running_workers(tmp_path, ["a", "b"], keys) as (a, b):

        async def main() -> None:
            session = _session(identity)
            await session.connect([a.endpoint, b.endpoint])
            await session.deploy(staged)
            profile = load_model_profile(staged)
            devices = (device("pc", 3.0), device("a", 1.0), device("b", 1.0))
            session.replan_with(
                PlanContext(devices, profile, STAGES, PlanConfig(headroom_bytes=0)),
                LIVE_THROTTLED,
            )
            assert b.process is not None
            # stopped 0.9 ms of every 1.2 (a quota's 25 %): b computes a short pass as soon as
            # it resumes, so with 3 ms stopped of every 4 a pass shorter than the running
            # millisecond could escape every stop and b read only 1.2x slower (once, in CI)
            throttle = StopStartThrottle(b.process.pid, stopped_ms=0.9, running_ms=0.3)
            try:

                def on_token(seen: int) -> None:
                    if seen == 10:
                        throttle.__enter__()

                result = await _chat(session, on_token)
            finally:
                throttle.__exit__()
            try:
                assert result.token_ids == reference
                events = session.replanning.replanner.events
                assert session.deployment.rebalances >= 1, events
                replans = [e for e in events if "re-planned" in e]
                assert replans[0].startswith("b changed speed"), events
                # On a quiet machine that one re-plan gives b's stage to a and nothing follows;
                # beside 4 CPU hogs a then read 4.3x slower with both stages and a second
                # re-plan took them to the coordinator. Either way b runs nothing.
                if session.deployment.rebalances == 1:
                    assert session.deployment.assignment == Assignment(
                        (0,), (Member("a", (1, 2)),), ("b",)
                    )
                assert "b" in session.deployment.assignment.spares, session.deployment.assignment
                host, port = b.address.rsplit(":", 1)
                assert not (await probe(host, int(port))).busy  # b's stage was unloaded
                await _assert_new_chat_is_exact(session, reference)
            finally:
                await session.close()

        asyncio.run(main())


@pytest_slow
def test_after_a_failover_onto_a_slow_spare_the_fleet_replans(
    setup: tuple[Path, list[int], KeyPair, Path], tmp_path: Path
) -> None:
    """coordinator [0], a [1], b [2], spare c (profiled 4x slower). b is killed after 8 tokens:
    the failover puts c in its place at once, then the planner moves stage 2 to a and c is a
    spare again; the text is the monolithic model's."""
    staged, reference, identity, keys = setup
    with running_workers(tmp_path, ["a", "b", "c"], keys) as (a, b, c):

        async def main() -> None:
            session = _session(identity)
            await session.connect([a.endpoint, b.endpoint, c.endpoint])
            await session.deploy(staged)
            assignment = session.deployment.assignment
            assert assignment is not None and assignment.spares == ("c",)
            profile = load_model_profile(staged)
            devices = (device("pc", 3.0), device("a", 1.0), device("b", 1.0), device("c", 4.0))
            session.replan_with(
                PlanContext(devices, profile, STAGES, PlanConfig(headroom_bytes=0)), LIVE
            )
            try:
                result = await _chat(session, lambda seen: b.kill() if seen == 8 else None)
                assert result.token_ids == reference
                assert session.failover.failovers == ["b"]
                for _ in range(100):  # the re-plan runs after the failover, in the background
                    if session.deployment.rebalances:
                        break
                    await asyncio.sleep(0.05)
                events = session.replanning.replanner.events
                replans = [e for e in events if "re-planned" in e]
                assert replans and replans[0].startswith("b was lost"), events
                # On a quiet machine that one re-plan gives stage 2 to a and nothing follows; on
                # a busy one a then read 4.1x slower with both stages and a second re-plan moved
                # one to the coordinator (seen in CI). Either way the slow spare is free again.
                if session.deployment.rebalances == 1:
                    assert session.deployment.assignment == Assignment(
                        (0,), (Member("a", (1, 2)),), ("c",)
                    )
                assignment = session.deployment.assignment
                assert assignment is not None and "c" in assignment.spares, assignment
                await _assert_new_chat_is_exact(session, reference)
            finally:
                await session.close()

        asyncio.run(main())
