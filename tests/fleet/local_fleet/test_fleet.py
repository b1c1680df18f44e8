"""The local fleet (``fleetgui.fleet.local_fleet.fleet``): real ``fleetgui worker`` processes
pinned to a core, paired with the fleet's coordinator key, killed and restarted where they were,
and ended with the fleet. (How one is launched: ``test_worker_process.py``.)"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from fleet_support import hello

from fleetgui.fleet.local_fleet.fleet import LocalFleet
from fleetgui.net.protocol import Op


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
