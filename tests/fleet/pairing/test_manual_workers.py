"""Workers added by address (``fleetgui.fleet.pairing.manual_workers``): the list kept in the
config folder, a damaged one named, and the background probes of the listed workers, on real
info servers on loopback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from net_support import TIMEOUT_S, make_info, protocol_port, refused_soon, run

from fleetgui.fleet.pairing.manual_workers import ManualDiscovery, ManualWorkers, ManualWorkersError
from fleetgui.net.discovery import DiscoveryEvent
from fleetgui.net.info_probe import InfoProbeServer, WorkerStatusReason
from fleetgui.net.worker_info import INFO_PORT_OFFSET


def test_manual_workers_persist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path))
    workers = ManualWorkers()
    assert workers.path == tmp_path / "config" / "workers.json"
    assert workers.addresses == []
    assert workers.add("10.0.0.5:5555") == ("10.0.0.5", 5555)
    workers.add("pc-2:6000")
    workers.add("10.0.0.5:5555")  # listed once
    assert ManualWorkers().addresses == [("10.0.0.5", 5555), ("pc-2", 6000)]
    assert workers.remove("10.0.0.5:5555") and not workers.remove("10.0.0.5:5555")
    assert ManualWorkers().addresses == [("pc-2", 6000)]
    assert json.loads(workers.path.read_text()) == {"workers": [{"host": "pc-2", "port": 6000}]}
    assert [p.name for p in workers.path.parent.iterdir()] == ["workers.json"]  # no temp files


def test_a_damaged_worker_list_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "workers.json"
    path.write_text('{"workers": [{"host": "pc"}]}')
    with pytest.raises(ManualWorkersError, match=r"workers\.json"):
        ManualWorkers(path)
    assert path.read_text() == '{"workers": [{"host": "pc"}]}'  # left for the user to fix


def test_manual_discovery_probes_real_workers(tmp_path: Path) -> None:
    events: list[tuple[DiscoveryEvent, str]] = []

    async def body() -> None:
        up, down = protocol_port(), protocol_port()
        while down == up:
            down = protocol_port()
        workers = ManualWorkers(tmp_path / "workers.json")
        workers.add(f"127.0.0.1:{up}")
        workers.add(f"127.0.0.1:{down}")
        found = ManualDiscovery(
            workers, lambda event, info: events.append((event, info.address)), timeout_s=TIMEOUT_S
        )
        async with InfoProbeServer(make_info, "127.0.0.1", up):
            statuses = await found.refresh()
            assert statuses[f"127.0.0.1:{up}"].seen
            assert statuses[f"127.0.0.1:{down}"].reason is WorkerStatusReason.PORT_CLOSED
            assert list(found.workers) == [f"127.0.0.1:{up}"]
            assert events == [(DiscoveryEvent.ADDED, f"127.0.0.1:{up}")]
            await found.refresh()
            assert len(events) == 1  # nothing changed, nothing reported
        await refused_soon("127.0.0.1", up + INFO_PORT_OFFSET)
        statuses = await found.refresh()  # the worker stopped
        assert statuses[f"127.0.0.1:{up}"].reason is WorkerStatusReason.PORT_CLOSED
        assert statuses[f"127.0.0.1:{up}"].info is not None  # last record kept for display
        assert events[-1] == (DiscoveryEvent.REMOVED, f"127.0.0.1:{up}")
        assert found.workers == {}
        workers.remove(f"127.0.0.1:{down}")
        assert set(await found.refresh()) == {f"127.0.0.1:{up}"}

    run(body)


def test_manual_discovery_runs_in_the_background() -> None:
    async def body() -> None:
        port = protocol_port()
        added = asyncio.Event()
        found = ManualDiscovery(
            [("127.0.0.1", port)], lambda *_: added.set(), interval_s=0.1, timeout_s=TIMEOUT_S
        )
        async with InfoProbeServer(make_info, "127.0.0.1", port), found:
            await asyncio.wait_for(added.wait(), 5)
        assert found.statuses[f"127.0.0.1:{port}"].seen

    run(body)
