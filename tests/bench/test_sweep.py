"""The bench's sweep (``fleetgui.bench.sweep``): the configurations' order rotated each repeat,
the delays alternating."""

from __future__ import annotations

from fleetgui.bench.configurations import build_configurations
from fleetgui.bench.sweep import delay_order, rotated


def test_the_order_is_rotated_and_the_delays_alternate() -> None:
    items = build_configurations(["ngram"], baseline=False, hub_delay=None)[:3]
    assert [c.key for c in rotated(items, 1)] == ["pp+mb/2", "pp+mb/3", "pp"]
    assert rotated(items, 3) == items
    assert delay_order([0, 25, 100], 0) == [0, 25, 100]
    assert delay_order([0, 25, 100], 1) == [100, 25, 0]
