"""What the tests of finding workers share (``tests/net``, ``tests/fleet/pairing``): a worker's
info record as a probe or mDNS carries it, a protocol port whose info port is free, and a
coroutine run with a deadline, a port that refuses connections again."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from fleetgui.net.protocol import PROTOCOL_VERSION
from fleetgui.net.worker_info import WorkerInfo

KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"  # a Z85 public key (40 characters)
TIMEOUT_S = 1.0  # a probe's timeout on loopback


def make_info(**changes: Any) -> WorkerInfo:
    """A Windows PC's info record, with ``changes``."""
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
    """``asyncio.run(body())``, failing after ``timeout_s``."""

    async def main() -> None:
        await asyncio.wait_for(body(), timeout_s)

    asyncio.run(main())


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
