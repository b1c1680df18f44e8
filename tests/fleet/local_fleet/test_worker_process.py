"""A local worker's launch (``fleetgui.fleet.local_fleet.worker_process``): pinned to cores with
taskset, behind its launcher's prefix."""

from __future__ import annotations

import pytest

from fleetgui.fleet.local_fleet.worker_process import WorkerOptions, pinned


@pytest.mark.parametrize(
    ("cores", "prefix"),
    [
        ((), []),
        ((1,), ["taskset", "-c", "1"]),
        ((3, 1, 3), ["taskset", "-c", "1,3"]),  # sorted, once each
    ],
)
def test_pinned_is_a_taskset_prefix_or_nothing(cores: tuple[int, ...], prefix: list[str]) -> None:
    assert pinned(cores) == prefix


def test_a_workers_launcher_is_its_prefix_then_its_cores() -> None:
    options = WorkerOptions(cores=(2,), prefix=("ip", "netns", "exec", "ns1"))
    assert options.launcher() == ["ip", "netns", "exec", "ns1", "taskset", "-c", "2"]
