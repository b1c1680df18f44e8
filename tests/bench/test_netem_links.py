"""Delayed links with netem (``fleetgui.bench.netem_links``): the arguments that put half of each
hop's delay, rate and loss on each end."""

from __future__ import annotations

import pytest

from fleetgui.bench.netem_links import netem_args
from fleetgui.bench.netns import Shape


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
