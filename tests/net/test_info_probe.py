"""The info probe (``fleetgui.net.info_probe``): a real server, a real client and real
misbehaving peers on loopback, each refusal with its reason in the user's words. (mDNS:
``test_discovery.py``; the manual worker list: ``tests/fleet/pairing/test_manual_workers.py``.)"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import zmq
import zmq.asyncio
from net_support import KEY, TIMEOUT_S, make_info, protocol_port, refused_soon, run

from fleetgui.errors import FleetguiError
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
from fleetgui.net.worker_info import INFO_PORT_OFFSET, WorkerInfo


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
        port = protocol_port()
        error = await expect_reason(port, WorkerStatusReason.PORT_CLOSED)
        assert time.monotonic() - start < TIMEOUT_S / 2  # refused: no need to wait
        assert "refused" in str(error) and "fleetgui worker" in str(error)
        # named by the address the user typed, not by the info port probed (port + 1) alone
        assert error.detail.startswith(f"127.0.0.1:{port} refused the connection"), str(error)

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
