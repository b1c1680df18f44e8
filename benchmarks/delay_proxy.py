"""A TCP relay that adds a fixed one-way delay in each direction: a stand-in for ``tc netem``.

This machine's kernel has no netem qdisc ("Specified qdisc kind is unknown"), so a slow network
is emulated in user space: every chunk of bytes read from one side is written to the other side
``delay_ms`` later, in order, in both directions. Bandwidth is not limited. Put one relay in front
of each worker and give coordinators the relay's address: every message to or from that worker
then takes one extra ``delay_ms``, i.e. one delayed hop.

Run: ``python benchmarks/delay_proxy.py --listen 127.0.0.1:7000 --target 127.0.0.1:5555
--delay-ms 5`` (it relays the port and the next one, the worker's info probe, too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time

log = logging.getLogger("delay_proxy")


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
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
            await queue.put((time.monotonic() + delay_s, data))
            if not data:
                break
        await sender
    except (ConnectionError, asyncio.CancelledError):
        sender.cancel()


async def relay(
    listen: tuple[str, int], target: tuple[str, int], delay_ms: float
) -> asyncio.Server:
    """Start relaying ``listen`` to ``target`` with ``delay_ms`` each way."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        for sock_writer in (writer, up_writer):
            sock = sock_writer.get_extra_info("socket")
            if sock is not None:
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _pump(reader, up_writer, delay_ms / 1000),
            _pump(up_reader, writer, delay_ms / 1000),
            return_exceptions=True,
        )

    return await asyncio.start_server(handle, *listen)


async def _main(args: argparse.Namespace) -> None:
    host, port = args.listen.rsplit(":", 1)
    thost, tport = args.target.rsplit(":", 1)
    servers = [
        await relay((host, int(port) + i), (thost, int(tport) + i), args.delay_ms) for i in range(2)
    ]
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for server in servers:
            server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--target", required=True, metavar="HOST:PORT")
    parser.add_argument("--delay-ms", type=float, default=5.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
