"""The worker's connection guard (``fleetgui.net.connection_guard``): what a stranger without a
key can make a worker hold, and the pairing window's leftovers.

Raw TCP clients speak the start of ZMTP's CURVE handshake from another loopback address
(127.0.0.2) than the real coordinator (127.0.0.1), so per-source limits can be told apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import zmq
from fleet_support import WorkerProcess, hello, worker_process

from fleetgui.net.connection_guard import MAX_HANDSHAKES_PER_SOURCE, ConnectionGuard
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import DEFAULT_LIMITS, Message, Op, RemoteError
from fleetgui.net.secure_socket import RequestTimeoutError, SecureClient, SecureServer
from fleetgui.net.trust import Authorizer

MIB = 1024 * 1024
STRANGER = "127.0.0.2"
# ZMTP 3.0 greeting of a CURVE client: signature, version, mechanism, as-server, filler
GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + bytes(32)


def command_header(size: int) -> bytes:
    """A ZMTP command frame's header (long form) declaring ``size`` bytes."""
    return b"\x06" + struct.pack(">Q", size)


def stranger_connection(port: int, header: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(STRANGER, 0))
    sock.sendall(GREETING + header)
    return sock


def send_until_dropped(sock: socket.socket, nbytes: int) -> int:
    """Send up to ``nbytes`` zeros; how many went before the worker dropped the connection."""
    block, sent = bytes(MIB), 0
    with contextlib.suppress(OSError):
        while sent < nbytes:
            sent += sock.send(block[: min(MIB, nbytes - sent)])
    return sent


def is_open(sock: socket.socket, wait_s: float = 0.3) -> bool:
    """Whether the worker still holds the connection (it sends its greeting, then waits)."""
    sock.settimeout(wait_s)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return True
    except OSError:
        return False
    return False


def rss_mib(process: WorkerProcess) -> float:
    assert process.process is not None
    return float(psutil.Process(process.process.pid).memory_info().rss) / MIB


@pytest.fixture
def worker(
    tmp_path: Path, identity: KeyPair, authorized_keys: Path
) -> Iterator[tuple[WorkerProcess, KeyPair]]:
    """A worker of its own for each test (they load it), trusting the session's coordinator."""
    process = worker_process(tmp_path / "workers", "w1", authorized_keys).start()
    try:
        yield process, identity
    finally:
        process.stop()


def test_a_frame_over_the_cap_is_dropped_before_the_handshake_buffers_it(
    worker: tuple[WorkerProcess, KeyPair],
) -> None:
    """4 keyless connections declaring 255 MiB handshake frames took a worker from 103 to
    1103 MB: frames are capped at 1 MiB now, so libzmq drops each at the frame's header."""
    process, identity = worker
    port = int(process.info["port"])
    before = rss_mib(process)
    attackers = [stranger_connection(port, command_header(255 * MIB)) for _ in range(4)]
    try:
        sent = [send_until_dropped(sock, 64 * MIB) for sock in attackers]
        grown = rss_mib(process) - before
        assert grown < 48, f"the worker grew {grown:.0f} MiB; sent {sent}"
        assert not any(is_open(sock) for sock in attackers)
    finally:
        for sock in attackers:
            sock.close()
    assert DEFAULT_LIMITS.max_frame_bytes <= MIB
    assert hello(process, identity).meta["info"]["name"] == "w1"


def test_handshakes_in_progress_are_capped_per_source_and_the_coordinator_still_gets_in(
    worker: tuple[WorkerProcess, KeyPair],
) -> None:
    """40 keyless connections from one address, each holding a frame of just under 1 MiB:
    the worker keeps at most MAX_HANDSHAKES_PER_SOURCE, and a coordinator at another address
    is served meanwhile."""
    process, identity = worker
    port = int(process.info["port"])
    before = rss_mib(process)
    attackers = []
    try:
        for _ in range(40):
            sock = stranger_connection(port, command_header(MIB))
            send_until_dropped(sock, MIB - 1)
            attackers.append(sock)
        time.sleep(0.5)
        held = sum(is_open(sock, 0.1) for sock in attackers)
        grown = rss_mib(process) - before
        assert 1 <= held <= MAX_HANDSHAKES_PER_SOURCE, held
        assert grown < 24, f"the worker grew {grown:.0f} MiB holding {held} connections"
        assert hello(process, identity).meta["info"]["name"] == "w1"
    finally:
        for sock in attackers:
            sock.close()


def test_the_guard_caps_handshakes_in_all_and_forgets_them_after_the_handshake_limit() -> None:
    """Over real TCP connections from 6 addresses, with a clock the test moves: the 5th and
    6th are shut down with a total cap of 4, and new ones get in once the first are older than
    the handshake limit (libzmq has dropped or admitted them by then)."""
    now = [0.0]
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        guard = ConnectionGuard(
            router,  # type: ignore[arg-type]  # only its monitor is used here
            Authorizer(),
            handshake_s=10,
            max_per_source=2,
            max_total=4,
            clock=lambda: now[0],
        )
        clients, served = [], []
        for i in range(8):
            if i == 6:
                now[0] = 10.5
            client = socket.create_connection(
                listener.getsockname(), source_address=(f"127.0.0.{10 + i}", 0)
            )
            accepted, _ = listener.accept()
            guard.on_event(zmq.EVENT_ACCEPTED, accepted.fileno())
            clients.append(client)
            served.append(accepted)
        open_ = [is_open(client, 0.05) for client in clients]
        assert open_ == [True] * 4 + [False, False] + [True, True]
        assert guard.refused == 2
        guard.stop()
        for sock in clients + served:
            sock.close()
    finally:
        listener.close()
        router.close(linger=0)
        context.term()


def test_closing_the_pairing_window_cuts_off_a_strangers_connection(tmp_path: Path) -> None:
    """Any key passes the handshake while a pairing code is active; once the coordinator has
    paired, the stranger who connected meanwhile is cut off (and cannot get back in), while
    the paired coordinator is served on."""
    authorizer = Authorizer(tmp_path / "authorized_keys")
    code = authorizer.open_pairing(min_interval_s=0)
    me, worker = KeyPair.generate(), KeyPair.generate()

    async def main() -> None:
        server = SecureServer(worker, authorizer, name="w1")
        endpoint = await server.bind("tcp://127.0.0.1:*")
        port = endpoint.rsplit(":", 1)[1]

        async def serve() -> None:
            while True:
                incoming = await server.recv()
                await server.send(incoming.peer, _hello_ok(incoming.message))

        task = asyncio.create_task(serve())
        stranger = SecureClient(KeyPair.generate(), worker.public, name="w1", timeout_s=2)
        client = SecureClient(me, worker.public, name="w1", timeout_s=5)
        try:
            await stranger.connect(f"tcp://{STRANGER}:0;127.0.0.1:{port}")
            with pytest.raises(RemoteError, match="not authorized"):
                await stranger.request(Message(Op.HELLO))  # connected, but only to pair
            await client.connect(endpoint)
            await client.pair(code.code, "the real coordinator")
            await asyncio.sleep(1.5)  # the guard looks at the window twice a second
            with pytest.raises(RequestTimeoutError):  # cut off; the key is refused since
                await stranger.request(Message(Op.HELLO))
            assert server.guard.closed_after_pairing == 1
            assert (await client.request(Message(Op.HELLO))).op is Op.HELLO_OK
        finally:
            stranger.close()
            client.close()
            task.cancel()
            server.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def _hello_ok(message: Message) -> list[bytes | bytearray | memoryview]:
    from fleetgui.net.protocol import encode

    return encode(Message(Op.HELLO_OK, request_id=message.request_id))
