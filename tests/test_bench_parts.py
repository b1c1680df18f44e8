"""``fleetgui bench``'s pure parts, by tables: the configurations, the paired figures and the
summary, the links' shaping arithmetic (netem's arguments, the packet hub's timing), cores."""

from __future__ import annotations

import random

import pytest

from fleetgui.bench.configurations import (
    Configuration,
    Measurement,
    build_configurations,
    full_stack,
)
from fleetgui.bench.fleet import plan_cores
from fleetgui.bench.measure import RunFigures
from fleetgui.bench.netem_links import netem_args
from fleetgui.bench.netns import Shape
from fleetgui.bench.options import DEFAULT_MODES
from fleetgui.bench.packet_hub import Hub, Node, Shaping
from fleetgui.bench.results import Results
from fleetgui.bench.sweep import delay_order, rotated
from fleetgui.modes import Mode


def test_the_configurations_follow_the_papers_tables() -> None:
    configurations = build_configurations(["draft", "ngram"], baseline=True, hub_delay=100.0)
    keys = [c.key for c in configurations]
    assert keys[:4] == ["monolithic", "pp", "pp+mb/2", "pp+mb/3"]
    assert keys.count("pp+sd/kauto/draft") == keys.count("pp+sd/kauto/ngram") == 1
    assert [k for k in keys if k.startswith("pp+sd/") and k.endswith("/ngram")] == [
        f"pp+sd/k{k}/ngram" for k in (1, 3, 5, 7, 10, "auto")
    ]
    # the full stack uses the given drafter, not n-gram
    assert [k for k in keys if k.startswith("pp+sd+mb")] == [
        "pp+sd+mb/2/kauto/draft",
        "pp+sd+mb/3/kauto/draft",
    ]
    assert keys[-4:] == ["ttft/16", "ttft/128", "ttft/512", "pp/hub"]
    assert len(set(keys)) == len(keys)
    hub = configurations[-1]
    assert hub.runs_at(100.0) and not hub.runs_at(0.0)
    assert not configurations[0].runs_at(0.0)  # the baseline runs once, on no network
    assert full_stack(configurations) == Configuration(Mode.PP_SD_MB, streams=2, draft="draft")


def test_without_a_second_worker_there_is_no_hub_to_compare() -> None:
    configurations = build_configurations(["ngram"], baseline=False, hub_delay=None)
    assert all(c.topology == "ring" for c in configurations)
    assert all(c.mode != Measurement.MONOLITHIC for c in configurations)


def test_modes_keep_only_what_was_asked_for() -> None:
    """``--modes pp,pp+sd,hub``: the K comparison and the hub, nothing else; the draft flags
    decide the drafters (``--no-ngram`` leaves n-gram out beside a draft model)."""
    from fleetgui.bench.options import modes

    configurations = build_configurations(
        ["draft"], baseline=True, hub_delay=100.0, kinds=modes("pp,pp+sd,hub")
    )
    keys = [c.key for c in configurations]
    assert keys == ["pp", *(f"pp+sd/k{k}/draft" for k in (1, 3, 5, 7, 10, "auto")), "pp/hub"]
    assert full_stack(configurations) is None
    everything = build_configurations(["draft"], baseline=True, hub_delay=100.0)
    assert everything == build_configurations(
        ["draft"], baseline=True, hub_delay=100.0, kinds=modes(DEFAULT_MODES)
    )


def _run(rate: float, **kw: float) -> RunFigures:
    return RunFigures(
        tokens_per_s=rate, new_tokens=64, ttft_ms=100.0, prompt_tokens=20, wall_s=1, **kw
    )


def test_ratios_are_paired_within_each_repeat_and_the_summary_names_the_best_k() -> None:
    """Repeat 2 ran on a machine twice as slow: the ratios of each repeat still hold."""
    configurations = build_configurations(
        ["ngram"], baseline=False, hub_delay=100.0, ks=(3, 10, "auto"), mb_streams=(2,)
    )
    by_key = {c.key: c for c in configurations}
    results = Results(configurations, [0.0, 100.0], repeats=2)
    figures = {  # key -> rate at 0 ms and at 100 ms, repeat 1 (repeat 2 is half)
        "pp": (40.0, 3.0),
        "pp+mb/2": (60.0, 6.0),
        "pp+sd/k3/ngram": (50.0, 4.5),
        "pp+sd/k10/ngram": (44.0, 6.0),
        "pp+sd/kauto/ngram": (48.0, 5.7),
        "pp+sd+mb/2/kauto/ngram": (80.0, 15.0),
        "pp/hub": (0.0, 2.4),
    }
    for key, rates in figures.items():
        for index, delay in enumerate((0.0, 100.0)):
            if rates[index]:
                for repeat, scale in ((0, 1.0), (1, 0.5)):
                    results.add(by_key[key], delay, repeat, _run(rates[index] * scale, mean_k=6.0))
    summary = results.summary()
    assert summary["full_stack"] == "pp+sd+mb/2/kauto/ngram"
    assert summary["full_stack_over_pp"] == {"0": pytest.approx(2.0), "100": pytest.approx(5.0)}
    (lan,) = summary["k_auto_vs_best_fixed"]["0"]
    (wan,) = summary["k_auto_vs_best_fixed"]["100"]
    assert (lan["best_k"], wan["best_k"]) == (3, 10)
    assert lan["auto_over_best"] == pytest.approx(48 / 50)
    assert wan["auto_over_best"] == pytest.approx(5.7 / 6.0)
    assert summary["ring_over_hub"] == {"delay_ms": 100.0, "ratio": pytest.approx(3.0 / 2.4)}
    pp_at_100 = results.find("pp", 100.0)
    assert pp_at_100 is not None and pp_at_100.tokens_per_s == pytest.approx(2.25)  # median


def test_a_ratio_skips_repeats_where_either_side_did_not_run() -> None:
    """An interrupted run: the second repeat has PP but not the full stack."""
    configurations = build_configurations(["ngram"], baseline=False, hub_delay=None, ks=("auto",))
    by_key = {c.key: c for c in configurations}
    results = Results(configurations, [25.0], repeats=2)
    results.add(by_key["pp"], 25.0, 0, _run(10.0))
    results.add(by_key["pp"], 25.0, 1, _run(12.0))
    results.add(by_key["pp+sd+mb/2/kauto/ngram"], 25.0, 0, _run(30.0))
    assert results.summary()["full_stack_over_pp"] == {"25": pytest.approx(3.0)}


@pytest.mark.parametrize(
    ("shape", "args"),
    [
        (Shape(100), ["netem", "delay", "50ms", "limit", "100000"]),
        (
            Shape(25, rate_mbit=100),
            ["netem", "delay", "12.5ms", "limit", "100000", "rate", "100mbit"],
        ),
        # 1 % a hop over two links: each loses 1 - sqrt(0.99)
        (Shape(0, loss_pct=1), ["netem", "delay", "0ms", "limit", "100000", "loss", "0.501256%"]),
    ],
)
def test_netem_puts_half_the_hop_on_each_end(shape: Shape, args: list[str]) -> None:
    assert netem_args(shape) == args


def _hub(shaping: Shaping) -> tuple[Hub, Node, Node, Node]:
    nodes = [Node("", f"t{i}", bytes([10, 0, 0, i]), fd=100 + i) for i in (1, 2, 3)]
    return Hub(nodes, shaping, seed=1), *nodes


def test_every_hop_pays_the_delay_once() -> None:
    hub, coordinator, first, second = _hub(Shaping(delay_ms=100))
    for source, target in ((coordinator, first), (first, second), (second, coordinator)):
        assert hub.due(source, target, 1500, now=10.0) == pytest.approx(10.1)


def test_a_rate_serialises_packets_on_each_access_link() -> None:
    """8 Mbit/s: a 1000-byte packet takes 1 ms on the sender's link and 1 ms on the
    receiver's; a second one sent at once queues behind it on both."""
    hub, coordinator, first, _ = _hub(Shaping(delay_ms=10, rate_mbit=8))
    assert hub.due(coordinator, first, 1000, now=0.0) == pytest.approx(0.012)
    assert hub.due(coordinator, first, 1000, now=0.0) == pytest.approx(0.013)


def test_loss_per_hop_is_split_over_its_two_links() -> None:
    hub, coordinator, first, _ = _hub(Shaping(delay_ms=0, loss=0.2))
    hub._random = random.Random(7)
    lost = sum(hub.due(coordinator, first, 100, now=0.0) is None for _ in range(20000))
    assert lost / 20000 == pytest.approx(0.2, abs=0.01)


def test_a_packet_to_an_unknown_address_or_not_ipv4_is_dropped_quietly() -> None:
    hub, coordinator, _, _ = _hub(Shaping(delay_ms=50))
    ipv6 = bytes([0x60]) + bytes(39)
    elsewhere = bytes([0x45]) + bytes(15) + bytes([192, 168, 0, 1]) + bytes(8)
    for packet in (ipv6, elsewhere, b"\x45"):
        hub.take(coordinator, packet, now=0.0)
    assert hub.flush(now=1.0) is None
    assert hub.forwarded == 0


@pytest.mark.parametrize(
    ("workers", "cores", "coordinator", "placed"),
    [
        (2, [0, 1], None, [0, 1]),  # the 2-vCPU test machine: the coordinator is not pinned
        (2, [0, 1, 2, 3], 0, [1, 2]),
        (3, [0, 1], None, [0, 1, 0]),
        (1, [4, 5], 4, [5]),
    ],
)
def test_each_worker_gets_a_core_and_the_coordinator_one_when_left(
    workers: int, cores: list[int], coordinator: int | None, placed: list[int]
) -> None:
    names = [f"w{i}" for i in range(workers)]
    plan = plan_cores(names, cores)
    assert plan.coordinator == coordinator
    assert [plan.workers[n] for n in names] == placed
    assert plan_cores(names, cores, pin=False).describe() == "nothing pinned"


def test_the_order_is_rotated_and_the_delays_alternate() -> None:
    items = build_configurations(["ngram"], baseline=False, hub_delay=None)[:3]
    assert [c.key for c in rotated(items, 1)] == ["pp+mb/2", "pp+mb/3", "pp"]
    assert rotated(items, 3) == items
    assert delay_order([0, 25, 100], 0) == [0, 25, 100]
    assert delay_order([0, 25, 100], 1) == [100, 25, 0]
