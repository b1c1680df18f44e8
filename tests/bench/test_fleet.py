"""The bench's fleet (``fleetgui.bench.fleet``): a core for each worker, and one for the
coordinator when one is left."""

from __future__ import annotations

import pytest

from fleetgui.bench.fleet import plan_cores


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
