"""A TCP relay that adds a fixed one-way delay in each direction: the stand-in for real network
delay where this process may not make network namespaces (not root, not Linux).

Every chunk of bytes read from one side is written to the other side ``delay_ms`` later, in
order, in both directions. Bandwidth and loss are not modelled, nor TCP's own pacing (a whole
message arrives ``delay_ms`` later however large), so its figures are an emulation. Put one relay
in front of each worker and give coordinators the relay's address: every message to or from
that worker then takes one extra ``delay_ms``, i.e. one delayed hop, worker to worker too (the
ring's next worker is reached at the address the coordinator was given).

Run: ``python -m fleetgui.bench.delay_proxy --listen 127.0.0.1:7000 --target 127.0.0.1:5555
--delay-ms 5`` (it relays the port and the next one, the worker's info probe, too). With
``--control`` it takes ``delay MS`` lines on stdin (answering ``ok``) and ends when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import sys
import time

log = logging.getLogger(__name__)


class Delay:
    """The current one-way delay in seconds, shared by every connection of a relay."""

    def __init__(self, ms: float) -> None:
        self.seconds = ms / 1000.0


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send_later() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(Exception):
            writer.close()

    sender = asyncio.create_task(send_later())
    try:
        while True:
            data = await reader.read(1 << 20)
            await queue.put((time.monotonic() + delay.seconds, data))
            if not data:
                break
        await sender
    except (ConnectionError, asyncio.CancelledError):
        sender.cancel()


async def relay(listen: tuple[str, int], target: tuple[str, int], delay: Delay) -> asyncio.Server:
    """Start relaying ``listen`` to ``target`` with ``delay`` each way."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        for sock_writer in (writer, up_writer):
            sock = sock_writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _pump(reader, up_writer, delay),
            _pump(up_reader, writer, delay),
            return_exceptions=True,
        )

    return await asyncio.start_server(handle, *listen)


async def _control(delay: Delay) -> None:
    """``delay MS`` lines from stdin until it closes."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        words = line.split()
        if len(words) == 2 and words[0] == "delay":
            delay.seconds = float(words[1]) / 1000.0
            print("ok", flush=True)
        elif words:
            print(f"error: unknown command {line.strip()!r}", flush=True)


async def _main(args: argparse.Namespace) -> None:
    host, port = args.listen.rsplit(":", 1)
    thost, tport = args.target.rsplit(":", 1)
    delay = Delay(args.delay_ms)
    servers = [await relay((host, int(port) + i), (thost, int(tport) + i), delay) for i in range(2)]
    print("ready", flush=True)
    try:
        if args.control:
            await _control(delay)
        else:
            await asyncio.Event().wait()
    finally:
        for server in servers:
            server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--target", required=True, metavar="HOST:PORT")
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--control", action="store_true", help="take delay MS lines on stdin")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
