"""The local fleet's worker processes (``fleetgui.fleet.local_fleet.fleet``, ``local_worker``): real
``fleetgui worker`` processes pinned to a core, paired with the fleet's coordinator key, killed
and restarted where they were, and ended with the fleet."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from test_fleet_admission import hello

from fleetgui.fleet.local_fleet.fleet import LocalFleet
from fleetgui.fleet.local_fleet.worker_process import WorkerOptions, pinned
from fleetgui.net.protocol import Op


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


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="taskset needs Linux")
def test_a_pinned_worker_is_killed_restarted_where_it_was_and_ended_with_the_fleet(
    tmp_path: Path,
) -> None:
    core = max(os.sched_getaffinity(0))
    with LocalFleet(tmp_path, cores={"w1": (core,)}) as fleet:
        (worker,) = fleet.start(["w1"])
        assert worker.process is not None
        assert psutil.Process(worker.process.pid).cpu_affinity() == [core]
        assert hello(worker, fleet.identity()).op == Op.HELLO_OK  # paired with the fleet
        address, key = worker.address, worker.info["public_key"]
        worker.kill()
        assert not worker.running
        restarted = fleet.worker("w1").restart()
        assert restarted is worker and worker.running
        assert (worker.address, worker.info["public_key"]) == (address, key)
        assert hello(worker, fleet.identity()).op == Op.HELLO_OK
        last = worker.process
    assert fleet.workers == []
    assert last is not None and last.returncode is not None  # the restarted one ended too
