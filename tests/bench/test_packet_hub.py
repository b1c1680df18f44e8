"""The packet hub (``fleetgui.bench.packet_hub``): every hop pays its delay once, a rate
serialises packets on each access link, a hop's loss is split over its two links, and stray
packets are dropped quietly."""

from __future__ import annotations

import random

import pytest

from fleetgui.bench.packet_hub import Hub, Node, Shaping


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
