"""Round trip of one 16 KB float32 activation over loopback, plain vs CURVE (prints only).

The echo server runs in another process, as a worker would. Rows:
  sync pyzmq        DEALER -> ROUTER echo, blocking sockets (the transport itself)
  asyncio pyzmq     the same with zmq.asyncio on both ends
  fleetgui helpers  SecureClient -> SecureServer (CURVE + ZAP + protocol encode/decode)
Run: .venv/bin/python benchmarks/bench_transport.py
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import statistics
import time
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from fleetgui.net.forward_codec import (
    encode_forward,
)
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import encode
from fleetgui.net.secure_socket import SecureClient, SecureServer
from fleetgui.net.trust import Authorizer
from fleetgui.runtime.stage import ForwardRequest

N, WARMUP = 3000, 300
PAYLOAD = np.random.default_rng(0).standard_normal((1, 1, 4096)).astype(np.float32)  # 16 KB


def _curve(sock: zmq.Socket[Any], server: KeyPair, client: KeyPair | None) -> None:
    if client is None:
        sock.curve_server = True
        sock.curve_publickey, sock.curve_secretkey = server.public.encode(), server.secret.encode()
    else:
        sock.curve_serverkey = server.public.encode()
        sock.curve_publickey, sock.curve_secretkey = client.public.encode(), client.secret.encode()


def raw_server(kind: str, server: KeyPair | None, queue: Any) -> None:
    if kind == "sync":
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        if server:
            _curve(sock, server, None)
        queue.put(sock.bind_to_random_port("tcp://127.0.0.1"))
        while True:
            sock.send_multipart(sock.recv_multipart(copy=False), copy=False)

    async def main() -> None:
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.ROUTER)
        if server:
            _curve(sock, server, None)
        queue.put(sock.bind_to_random_port("tcp://127.0.0.1"))
        while True:
            await sock.send_multipart(await sock.recv_multipart(copy=False), copy=False)

    asyncio.run(main())


def helper_server(server: KeyPair, client: KeyPair, queue: Any) -> None:
    async def main() -> None:
        worker = SecureServer(server, Authorizer(keys=[client.public]))
        queue.put(await worker.bind("tcp://127.0.0.1:*"))
        while True:
            incoming = await worker.recv()
            await worker.send(incoming.peer, encode(incoming.message))

    asyncio.run(main())


def start(target: Any, *args: Any) -> tuple[mp.Process, Any]:
    queue: Any = mp.Queue()
    process = mp.Process(target=target, args=(*args, queue), daemon=True)
    process.start()
    return process, queue.get(timeout=30)


def report(name: str, times: list[float]) -> None:
    times = sorted(times[WARMUP:])
    p90 = times[int(0.9 * len(times))]
    print(f"{name:36s} median {statistics.median(times) * 1e6:7.1f} us   p90 {p90 * 1e6:7.1f} us")


def sync_rows(curve: bool) -> None:
    server, client = (KeyPair.generate(), KeyPair.generate()) if curve else (None, None)
    process, port = start(raw_server, "sync", server)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    if server and client:
        _curve(sock, server, client)
    sock.connect(f"tcp://127.0.0.1:{port}")
    data, times = PAYLOAD.tobytes(), []
    for _ in range(N + WARMUP):
        t = time.perf_counter()
        sock.send(data, copy=False)
        sock.recv(copy=False)
        times.append(time.perf_counter() - t)
    ctx.destroy(0)
    process.terminate()
    report(f"sync pyzmq, {'CURVE' if curve else 'plain'}", times)


async def async_rows(curve: bool) -> None:
    server, client = (KeyPair.generate(), KeyPair.generate()) if curve else (None, None)
    process, port = start(raw_server, "async", server)
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    if server and client:
        _curve(sock, server, client)
    sock.connect(f"tcp://127.0.0.1:{port}")
    data, times = PAYLOAD.tobytes(), []
    for _ in range(N + WARMUP):
        t = time.perf_counter()
        await sock.send(data, copy=False)
        await sock.recv(copy=False)
        times.append(time.perf_counter() - t)
    ctx.destroy(0)
    process.terminate()
    report(f"asyncio pyzmq, {'CURVE' if curve else 'plain'}", times)


async def helper_rows() -> None:
    server, client = KeyPair.generate(), KeyPair.generate()
    process, endpoint = start(helper_server, server, client)
    coordinator = SecureClient(client, server.public)
    await coordinator.connect(endpoint)
    frames, times = encode_forward(ForwardRequest(1, PAYLOAD)), []
    for _ in range(N + WARMUP):
        t = time.perf_counter()
        await coordinator.send(frames)
        await coordinator.recv()
        times.append(time.perf_counter() - t)
    coordinator.close()
    process.terminate()
    report("fleetgui helpers, CURVE", times)


if __name__ == "__main__":
    mp.set_start_method("spawn")
    print(f"16 KB float32 round trip over loopback, {N} round trips after {WARMUP} warm-up")
    sync_rows(False)
    sync_rows(True)
    asyncio.run(async_rows(False))
    asyncio.run(async_rows(True))
    asyncio.run(helper_rows())
