"""A switch in user space that delays every IP packet: per-hop delay where the kernel has no netem.

Each node (the coordinator's network namespace and each worker's) gets a TUN device on one
subnet. This process holds every TUN device, reads each IP packet a node sends and writes it to
the destination node's device after the hop's delay, so every hop (coordinator to worker, worker
to worker, worker back) pays it, packet by packet, ACKs included: TCP's own pacing (slow start,
ACK clocking) shows as on a real slow link. Every node sits on its own access link (half the
hop's delay, optional rate and loss, each way), as with ``tc netem`` on both ends of a veth.

Run by :mod:`fleetgui.bench.netns` as ``python -m fleetgui.bench.packet_hub --node NS:DEV:IP ...``
(root: it enters each namespace to create its device). It prints ``ready`` once every device
exists, takes ``delay MS`` lines on stdin (answering ``ok``) and exits when stdin closes; the TUN
devices go with it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import fcntl
import heapq
import itertools
import logging
import os
import random
import selectors
import socket
import struct
import sys
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
READ_SIZE = 65536
PACKETS_PER_WAKEUP = 64  # read at most this many packets from one device before looking around


@dataclass
class AccessLink:
    """One node's link to the switch: each direction's busy-until time, for the rate."""

    up_free: float = 0.0
    down_free: float = 0.0


@dataclass
class Node:
    """A node's TUN device and address."""

    namespace: str  # "" for the namespace this process started in
    device: str
    address: bytes  # IPv4, 4 bytes
    fd: int = -1
    link: AccessLink = field(default_factory=AccessLink)


@dataclass
class Shaping:
    """What each hop pays: ``delay_ms`` in all, half on each node's access link; ``rate_mbit``
    (0: unlimited) and ``loss`` (a probability per hop) the same on each link."""

    delay_ms: float = 0.0
    rate_mbit: float = 0.0
    loss: float = 0.0

    @property
    def link_loss(self) -> float:
        """Loss on each of the hop's two links, so that a hop loses ``loss`` in all."""
        return 1.0 - (1.0 - self.loss) ** 0.5


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


def open_tun(name: str) -> int:
    """Create TUN device ``name`` in this thread's network namespace; its non-blocking fd."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


def open_devices(nodes: list[Node]) -> None:
    """Create every node's TUN device in its namespace, then come back to this one."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        for node in nodes:
            if node.namespace:
                target = os.open(f"/run/netns/{node.namespace}", os.O_RDONLY)
                try:
                    _setns(target)
                finally:
                    os.close(target)
            try:
                node.fd = open_tun(node.device)
            finally:
                _setns(home)
    finally:
        os.close(home)


class Hub:
    """The forwarding loop (see module doc)."""

    def __init__(self, nodes: list[Node], shaping: Shaping, *, seed: int = 0) -> None:
        self.nodes = nodes
        self.shaping = shaping
        self.by_address = {node.address: node for node in nodes}
        self.by_fd = {node.fd: node for node in nodes}
        self._queue: list[tuple[float, int, int, bytes]] = []  # (due, seq, fd, packet)
        self._seq = itertools.count()
        self._random = random.Random(seed)
        self.forwarded = 0
        self.dropped = 0

    def due(self, source: Node, target: Node, size: int, now: float) -> float | None:
        """When a packet of ``size`` bytes sent now from ``source`` reaches ``target``, or
        None when one of the two links loses it."""
        shaping = self.shaping
        half = shaping.delay_ms / 2000.0
        if shaping.loss and (
            self._random.random() < shaping.link_loss or self._random.random() < shaping.link_loss
        ):
            return None
        if not shaping.rate_mbit:
            return now + 2 * half
        wire = size * 8 / (shaping.rate_mbit * 1e6)
        sent = max(now, source.link.up_free) + wire
        source.link.up_free = sent
        arrived = max(sent + half, target.link.down_free) + wire
        target.link.down_free = arrived
        return arrived + half

    def take(self, source: Node, packet: bytes, now: float) -> None:
        """Queue (or drop) one packet ``source`` sent."""
        if len(packet) < 20 or packet[0] >> 4 != 4:
            return  # IPv4 only: the bench's nodes have no other addresses
        target = self.by_address.get(packet[16:20])
        if target is None or target is source:
            return
        due = self.due(source, target, len(packet), now)
        if due is None:
            self.dropped += 1
            return
        if due <= now:
            self._write(target.fd, packet)
        else:
            heapq.heappush(self._queue, (due, next(self._seq), target.fd, packet))

    def _write(self, fd: int, packet: bytes) -> None:
        try:
            os.write(fd, packet)
            self.forwarded += 1
        except BlockingIOError:
            self.dropped += 1  # the device's queue is full: a real link drops too

    def flush(self, now: float) -> float | None:
        """Deliver every packet due by ``now``; seconds until the next one (None: none)."""
        queue = self._queue
        while queue and queue[0][0] <= now:
            _, _, fd, packet = heapq.heappop(queue)
            self._write(fd, packet)
        return queue[0][0] - now if queue else None

    def drain(self, node: Node, now: float) -> None:
        for _ in range(PACKETS_PER_WAKEUP):
            try:
                packet = os.read(node.fd, READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EBADFD:  # the device is not up yet
                    return
                raise
            self.take(node, packet, now)

    def run(self, control: int) -> None:
        """Forward until ``control`` (stdin) closes; ``delay MS`` lines change the delay."""
        selector = selectors.EpollSelector()
        for node in self.nodes:
            selector.register(node.fd, selectors.EVENT_READ, node)
        selector.register(control, selectors.EVENT_READ, None)
        pending = b""
        while True:
            wait = self.flush(time.monotonic())
            timeout = None if wait is None else _whole_ms(wait)
            for key, _ in selector.select(timeout):
                if key.data is None:
                    chunk = os.read(control, 4096)
                    if not chunk:
                        return
                    pending += chunk
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        self.command(line.decode().strip())
                else:
                    self.drain(key.data, time.monotonic())

    def command(self, line: str) -> None:
        words = line.split()
        if len(words) == 2 and words[0] == "delay":
            self.shaping.delay_ms = float(words[1])
            print("ok", flush=True)
        elif words:
            print(f"error: unknown command {line!r}", flush=True)


def _whole_ms(seconds: float) -> float:
    """``seconds`` cut to whole milliseconds, less half of one: epoll waits whole milliseconds,
    rounding up, and a packet late by up to 1 ms would lengthen a hop; the remaining fraction
    is spun (a zero timeout) instead."""
    whole = int(seconds * 1000)
    return 0.0 if whole < 1 else (whole - 0.5) / 1000.0


def parse_node(text: str) -> Node:
    """``NAMESPACE:DEVICE:IPV4`` (an empty namespace: this process's own)."""
    try:
        namespace, device, address = text.split(":")
        return Node(namespace, device, socket.inet_aton(address))
    except (ValueError, OSError) as exc:
        raise argparse.ArgumentTypeError(f"need NAMESPACE:DEVICE:IPV4, not {text!r}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", type=parse_node, action="append", required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--rate-mbit", type=float, default=0.0)
    parser.add_argument("--loss-pct", type=float, default=0.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    nodes: list[Node] = args.node
    try:
        open_devices(nodes)
    except OSError as exc:
        print(f"error: cannot create the TUN devices: {exc}", flush=True)
        return 1
    hub = Hub(nodes, Shaping(args.delay_ms, args.rate_mbit, args.loss_pct / 100.0))
    print("ready", flush=True)
    # the bench tears the network down; its Ctrl+C reaches this process too
    with contextlib.suppress(KeyboardInterrupt):
        hub.run(sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
