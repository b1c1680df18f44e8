"""Finding workers: the info probe (real server, real client, real misbehaving peers on
loopback), zeroconf advertising and browsing on this machine, and the manual worker list."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from fleetgui.addresses import parse_address
from fleetgui.errors import FleetguiError
from fleetgui.fleet.pairing.manual_workers import ManualDiscovery, ManualWorkers, ManualWorkersError
from fleetgui.net import discovery
from fleetgui.net.discovery import (
    DiscoveryEvent,
    ZeroconfAdvertiser,
    ZeroconfBrowser,
    decode_txt,
    encode_txt,
)
from fleetgui.net.info_probe import (
    MAX_REQUEST_BYTES,
    PROBE_REQUEST,
    InfoProbeServer,
    WorkerProbeError,
    WorkerStatusReason,
    probe,
    probe_status,
)
from fleetgui.net.protocol import PROTOCOL_VERSION
from fleetgui.net.worker_info import INFO_PORT_OFFSET, WorkerInfo, WorkerInfoError

KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
TIMEOUT_S = 1.0


def make_info(**changes: Any) -> WorkerInfo:
    info = WorkerInfo(
        name="pc-kitchen",
        host="0.0.0.0",
        port=5555,
        public_key=KEY,
        version="0.1.0",
        protocol=PROTOCOL_VERSION,
        os="Windows 11 Pro (10.0.22631)",
        cpu="Intel(R) Core(TM) Ultra 7 155H",
        cpu_cores=22,
        ram_bytes=32 * 1024**3,
        free_ram_bytes=20 * 1024**3,
        free_disk_bytes=400 * 1024**3,
        devices=("CPU", "GPU.0", "NPU"),
    )
    return replace(info, **changes)


def protocol_port() -> int:
    """A protocol port whose info port (port + 1) was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1]) - 1


def run(body: Callable[[], Awaitable[None]], timeout_s: float = 20.0) -> None:
    async def main() -> None:
        await asyncio.wait_for(body(), timeout_s)

    asyncio.run(main())


async def expect_reason(port: int, reason: WorkerStatusReason) -> WorkerProbeError:
    with pytest.raises(WorkerProbeError) as caught:
        await probe("127.0.0.1", port, TIMEOUT_S)
    assert caught.value.reason is reason, str(caught.value)
    assert caught.value.address == f"127.0.0.1:{port}"
    return caught.value


# --- the info probe ------------------------------------------------------------------------


def test_probe_reads_fresh_info_from_a_real_server() -> None:
    calls = []

    def current() -> WorkerInfo:
        calls.append(1)
        return make_info(busy=len(calls) % 2 == 0, free_ram_bytes=len(calls))

    async def body() -> None:
        port = protocol_port()
        async with InfoProbeServer(current, "127.0.0.1", port) as server:
            assert server.port == port + 1
            first = await probe("127.0.0.1", port, TIMEOUT_S)
            second = await probe("127.0.0.1", port, TIMEOUT_S)
        # the address that reached it, not the wildcard the worker listens on
        assert (first.host, first.port) == ("127.0.0.1", port)
        assert first == replace(make_info(free_ram_bytes=1), host="127.0.0.1", port=port)
        assert (second.busy, second.free_ram_bytes) == (True, 2)  # fresh on every probe
        assert server.answered == 2

    run(body)


def test_closed_port_is_port_closed_at_once() -> None:
    async def body() -> None:
        start = time.monotonic()
        error = await expect_reason(protocol_port(), WorkerStatusReason.PORT_CLOSED)
        assert time.monotonic() - start < TIMEOUT_S / 2  # refused: no need to wait
        assert "refused" in str(error) and "fleetgui worker" in str(error)

    run(body)


def test_a_port_that_accepts_but_never_speaks_is_not_answering() -> None:
    async def body() -> None:
        held: list[asyncio.StreamWriter] = []

        async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # accept, keep open, never write

        port = protocol_port()
        server = await asyncio.start_server(silent, "127.0.0.1", port + 1)
        async with server:
            start = time.monotonic()
            error = await expect_reason(port, WorkerStatusReason.NOT_ANSWERING)
            elapsed = time.monotonic() - start
        assert held  # the TCP connection was accepted
        assert TIMEOUT_S * 0.9 <= elapsed < TIMEOUT_S + 1.0
        assert "never says anything" in str(error)

    run(body)


def test_a_zeromq_peer_that_never_replies_is_not_answering() -> None:
    async def body() -> None:
        context = zmq.asyncio.Context.instance()
        hung = context.socket(zmq.ROUTER)  # a hung worker: libzmq still accepts and greets
        hung.linger = 0
        port = protocol_port()
        hung.bind(f"tcp://127.0.0.1:{port + 1}")
        try:
            error = await expect_reason(port, WorkerStatusReason.NOT_ANSWERING)
            assert "nothing answered" in str(error)
            assert await hung.poll(1000)  # it did get the request
        finally:
            hung.close()

    run(body)


def test_another_protocol_version_says_which_and_what_to_do() -> None:
    async def body() -> None:
        port = protocol_port()
        newer = make_info(protocol=PROTOCOL_VERSION + 1, version="9.9.9")
        async with InfoProbeServer(lambda: newer, "127.0.0.1", port):
            error = await expect_reason(port, WorkerStatusReason.WRONG_VERSION)
        text = str(error)
        assert f"protocol {PROTOCOL_VERSION + 1}" in text and "9.9.9" in text
        assert f"protocol {PROTOCOL_VERSION}" in text
        assert "install the same fleetgui version on every PC" in text

    run(body)


@pytest.mark.parametrize(
    "reply",
    [
        [b"\x00\xffgarbage"],
        [b"[1, 2, 3]"],
        [json.dumps({"name": "x", "protocol": PROTOCOL_VERSION}).encode()],  # no key, no host
        [make_info().to_json().encode(), b"extra"],
    ],
    ids=["bytes", "json-list", "missing-fields", "two-parts"],
)
def test_a_zeromq_peer_with_a_bad_reply_is_not_fleetgui(reply: list[bytes]) -> None:
    async def body() -> None:
        context = zmq.asyncio.Context.instance()
        other = context.socket(zmq.ROUTER)  # a real ZeroMQ service that is not a worker
        other.linger = 0
        port = protocol_port()
        other.bind(f"tcp://127.0.0.1:{port + 1}")

        async def answer() -> None:
            identity, _ = await other.recv_multipart()
            await other.send_multipart([identity, *reply])

        task = asyncio.create_task(answer())
        try:
            await expect_reason(port, WorkerStatusReason.NOT_FLEETGUI)
        finally:
            task.cancel()
            other.close()

    run(body)


def test_a_service_that_is_not_zeromq_is_not_fleetgui() -> None:
    async def body() -> None:
        async def ssh_like(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
            await writer.drain()

        port = protocol_port()
        async with await asyncio.start_server(ssh_like, "127.0.0.1", port + 1):
            start = time.monotonic()
            error = await expect_reason(port, WorkerStatusReason.NOT_FLEETGUI)
            assert time.monotonic() - start < TIMEOUT_S / 2  # no need to wait for a timeout
        assert "SSH-2.0" in str(error)

    run(body)


async def settled(read: Callable[[], tuple[int, int]], quiet_s: float = 0.3) -> tuple[int, int]:
    """``read()`` once it has not changed for ``quiet_s`` (at most 5 s)."""
    value, since = read(), time.monotonic()
    deadline = since + 5.0
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return value


def test_the_server_survives_garbage_and_keeps_answering() -> None:
    async def body() -> None:
        port = protocol_port()
        context = zmq.asyncio.Context.instance()
        async with InfoProbeServer(make_info, "127.0.0.1", port) as server:
            # 1. random bytes on a raw TCP connection (libzmq may read them as ZMTP 1.0 frames)
            reader, writer = await asyncio.open_connection("127.0.0.1", port + 1)
            writer.write(random.Random(0).randbytes(4096))
            await writer.drain()
            await asyncio.wait_for(reader.read(1 << 16), 3)  # libzmq closes it
            writer.close()
            # libzmq may still be handing over frames it parsed from the garbage: count from
            # when the counters have settled
            ignored, answered = await settled(lambda: (server.ignored, server.answered))
            # 2. a ZeroMQ peer sending a frame over the size limit, then many frames
            dealer = context.socket(zmq.DEALER)
            dealer.linger = 0
            dealer.connect(f"tcp://127.0.0.1:{port + 1}")
            await dealer.send(b"x" * (MAX_REQUEST_BYTES + 1))
            await asyncio.sleep(0.2)  # libzmq drops that connection; the DEALER reconnects
            await dealer.send_multipart([b"a", b"b", b"c", b"d"])
            assert not await dealer.poll(300)  # a message of four frames is not a probe
            assert server.ignored == ignored + 1
            assert server.answered == answered  # the oversized one never arrived
            dealer.close()
            # 3. a REQ client with an odd request still gets the record
            req = context.socket(zmq.REQ)
            req.linger = 0
            req.connect(f"tcp://127.0.0.1:{port + 1}")
            await req.send(b"hello?")
            assert await req.poll(2000)
            assert WorkerInfo.from_json(await req.recv()) == make_info()
            req.close()
            # 4. and a real probe works after all that
            info = await probe("127.0.0.1", port, TIMEOUT_S)
            assert info.public_key == KEY

    run(body)


def test_probe_status_keeps_the_last_record_and_the_reason() -> None:
    async def body() -> None:
        port = protocol_port()
        async with InfoProbeServer(make_info, "127.0.0.1", port):
            seen = await probe_status("127.0.0.1", port, TIMEOUT_S)
        await refused_soon("127.0.0.1", port + INFO_PORT_OFFSET)
        assert seen.seen and seen.info is not None and seen.reason is None
        assert str(seen) == f"pc-kitchen (127.0.0.1:{port}): ready"
        gone = await probe_status("127.0.0.1", port, TIMEOUT_S, last=seen.info)
        assert not gone.seen and gone.info == seen.info
        assert gone.reason is WorkerStatusReason.PORT_CLOSED
        assert str(gone) == f"pc-kitchen (127.0.0.1:{port}): port closed"

    run(body)


def test_every_reason_has_words_for_the_user() -> None:
    assert {reason.value for reason in WorkerStatusReason} == {
        "not_answering",
        "port_closed",
        "wrong_version",
        "not_paired",
        "not_fleetgui",
    }
    for reason in WorkerStatusReason:
        assert reason.label and reason.hint
    error = WorkerProbeError(WorkerStatusReason.NOT_PAIRED, "10.0.0.5:5555", "key refused")
    assert isinstance(error, FleetguiError)
    assert "not paired" in str(error) and "--pair" in str(error)


def test_probe_request_is_what_the_server_expects() -> None:
    assert len(PROBE_REQUEST) < MAX_REQUEST_BYTES


# --- DNS-SD records ------------------------------------------------------------------------


def test_txt_round_trip() -> None:
    info = make_info(busy=True)
    record = encode_txt(info)
    assert decode_txt(record, "192.168.1.20", 5555) == replace(info, host="192.168.1.20")
    as_bytes = {k.encode(): v.encode() for k, v in record.items()}  # what zeroconf hands back
    assert decode_txt(as_bytes, "192.168.1.20", 5555) == replace(info, host="192.168.1.20")


def test_txt_strings_fit_dns_limits_and_cut_whole_characters() -> None:
    long = make_info(
        name="Küchen-PC " * 40,
        os="Ö" * 300,
        cpu="x" * 400,
        devices=tuple(f"GPU.{i}" for i in range(16)),
    )
    record = encode_txt(long)
    for key, value in record.items():
        assert len(key.encode()) + 1 + len(value.encode()) <= 255, key
    back = decode_txt(record, "10.0.0.2", 5555)
    assert long.name.startswith(back.name) and len(back.name) > 100
    assert set(back.os) == {"Ö"}  # never half a character
    assert len(discovery.instance_name(long).encode()) <= 63


def test_a_record_without_a_key_is_rejected() -> None:
    record = encode_txt(make_info())
    del record["key"]
    with pytest.raises(WorkerInfoError, match="public_key"):
        decode_txt(record, "10.0.0.2", 5555)


# --- zeroconf on this machine --------------------------------------------------------------


def test_advertise_and_browse_over_multicast_on_loopback() -> None:
    """Real python-zeroconf on 127.0.0.1: one advertiser, one browser, add/update/remove."""
    name = f"test-{uuid.uuid4().hex[:8]}"  # other runs on this machine may advertise too
    events: asyncio.Queue[tuple[DiscoveryEvent, WorkerInfo]] = asyncio.Queue()

    def on_change(event: DiscoveryEvent, info: WorkerInfo) -> None:
        if info.name == name:
            events.put_nowait((event, info))

    async def body() -> None:
        info = make_info(name=name, host="127.0.0.1", port=protocol_port())
        browser = ZeroconfBrowser(on_change, interfaces=["127.0.0.1"])
        advertiser = ZeroconfAdvertiser(interfaces=["127.0.0.1"])
        async with browser:
            await advertiser.start(info)
            try:
                event, seen = await asyncio.wait_for(events.get(), 10)
                assert event is DiscoveryEvent.ADDED
                assert seen == info
                assert browser.workers[info.address] == info
                await advertiser.update(replace(info, busy=True, free_ram_bytes=1))
                event, seen = await asyncio.wait_for(events.get(), 10)
                assert event is DiscoveryEvent.UPDATED
                assert seen.busy and seen.free_ram_bytes == 1
            finally:
                await advertiser.stop()  # sends goodbye packets
            event, seen = await asyncio.wait_for(events.get(), 10)
            assert event is DiscoveryEvent.REMOVED and seen.name == name
            assert info.address not in browser.workers

    run(body, timeout_s=40)


# --- manual workers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("192.168.1.20:5555", ("192.168.1.20", 5555)),
        (" pc-kitchen.local:6000 ", ("pc-kitchen.local", 6000)),
        ("[fe80::1]:5555", ("fe80::1", 5555)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["pc", "pc:", ":5555", "pc:0", "pc:70000", "fe80::1:5555"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(FleetguiError, match="HOST:PORT"):
        parse_address(text)


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


async def refused_soon(host: str, port: int, within_s: float = 5.0) -> None:
    """Wait until ``host:port`` refuses TCP connections. libzmq closes a listening socket on its
    I/O thread a moment after ``close()`` returns; a probe in that moment is accepted and
    dropped, reset or left waiting (seen under CI load: "not answering" instead of "port
    closed")."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 0.5)
            writer.close()
        except ConnectionRefusedError:
            return
        except (TimeoutError, ConnectionResetError):  # the listener is going away
            pass
        assert time.monotonic() < deadline, f"{host}:{port} still accepts connections"
        await asyncio.sleep(0.05)


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
