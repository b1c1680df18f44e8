"""How a benchmark delays the fleet's links: the method, chosen once, and the delay relays.

In order of preference for a fleet of local workers: ``netem`` (the kernel delays every packet:
real delay), ``packets`` (the same topology, packets delayed by a user-space switch where the
kernel lacks netem: real packets and TCP, the delay kept in user space) and ``proxy`` (no root:
a TCP relay in front of each worker delays whole chunks of bytes; an emulation, said so in
every output). A fleet of the user's own PCs runs on its own network: ``none``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from enum import StrEnum

from fleetgui.addresses import zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.fleet.local_fleet.fleet import LocalWorker
from fleetgui.fleet.ring.link import WorkerEndpoint

log = logging.getLogger(__name__)


class DelayMethod(StrEnum):
    NETEM = "netem"
    PACKETS = "packets"
    PROXY = "proxy"
    NONE = "none"  # the user's own workers: their network as it is


@dataclass(frozen=True)
class LinkChoice:
    """The method a run uses and why (what ruled out the better ones)."""

    method: DelayMethod
    reason: str = ""

    @property
    def emulated(self) -> bool:
        """Whether the delay is an emulation rather than delayed packets."""
        return self.method == DelayMethod.PROXY

    @property
    def label(self) -> str:
        return {
            DelayMethod.NETEM: "real delay: tc netem",
            DelayMethod.PACKETS: "real delay: packets delayed in user space (no netem here)",
            DelayMethod.PROXY: "EMULATED delay: a TCP relay per worker (no namespaces here)",
            DelayMethod.NONE: "the fleet's own network, no added delay",
        }[self.method]


def choose_links(requested: str, *, local: bool) -> LinkChoice:
    """The delay method for ``requested`` (``auto`` or a method); raises ``FleetguiError``
    naming why a requested method cannot work here."""
    from fleetgui.bench.netem_links import netem_support
    from fleetgui.bench.netns import namespace_support

    if not local:
        if requested not in ("auto", DelayMethod.NONE):
            raise FleetguiError(
                f"--network {requested} delays local workers' links; a fleet of your own PCs "
                "runs on its own network (leave --network out)"
            )
        return LinkChoice(DelayMethod.NONE, "your own workers: their network as it is")
    no_namespaces = namespace_support()
    if requested == DelayMethod.PROXY:
        return LinkChoice(DelayMethod.PROXY, "asked for (--network proxy)")
    if no_namespaces is not None:
        if requested != "auto":
            raise FleetguiError(f"--network {requested} needs network namespaces: {no_namespaces}")
        return LinkChoice(DelayMethod.PROXY, no_namespaces)
    if requested == DelayMethod.PACKETS:
        return LinkChoice(DelayMethod.PACKETS, "asked for (--network packets)")
    no_netem = netem_support()
    if no_netem is None:
        return LinkChoice(DelayMethod.NETEM)
    if requested == DelayMethod.NETEM:
        raise FleetguiError(f"--network netem: {no_netem}; use --network packets")
    return LinkChoice(DelayMethod.PACKETS, no_netem)


class DelayRelays:
    """A :mod:`fleetgui.bench.delay_proxy` relay in front of each worker (the ``proxy``
    method); a context manager that ends them."""

    def __init__(self, delay_ms: float) -> None:
        self.delay_ms = delay_ms
        self.relays: list[subprocess.Popen[str]] = []

    def front(self, workers: list[LocalWorker]) -> list[WorkerEndpoint]:
        """Start a relay per worker; the endpoints that reach the workers through them."""
        from fleetgui.worker.service import free_port_pair

        endpoints = []
        for worker in workers:
            port = free_port_pair()
            command = [sys.executable, "-m", "fleetgui.bench.delay_proxy", "--control"]
            command += ["--listen", f"127.0.0.1:{port}", "--target", worker.address]
            command += ["--delay-ms", f"{self.delay_ms:g}"]
            relay = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.relays.append(relay)
            if self._answer(relay) != "ready":
                raise FleetguiError(f"the delay relay for worker {worker.name} did not start")
            endpoints.append(
                WorkerEndpoint(
                    worker.name, zmq_endpoint("127.0.0.1", port), worker.info["public_key"]
                )
            )
        return endpoints

    @staticmethod
    def _answer(relay: subprocess.Popen[str]) -> str:
        assert relay.stdout is not None
        return relay.stdout.readline().strip()

    def set_delay(self, delay_ms: float) -> None:
        self.delay_ms = delay_ms
        for relay in self.relays:
            assert relay.stdin is not None
            relay.stdin.write(f"delay {delay_ms:g}\n")
            relay.stdin.flush()
            if self._answer(relay) != "ok":
                raise FleetguiError("a delay relay did not take the new delay")

    def close(self) -> None:
        for relay in self.relays:
            if relay.stdin is not None:
                relay.stdin.close()  # the relay's cue to end
        for relay in self.relays:
            try:
                relay.wait(5)
            except subprocess.TimeoutExpired:
                relay.kill()
                relay.wait(5)
        self.relays.clear()

    def __enter__(self) -> DelayRelays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def describe() -> str:
        return (
            "workers on loopback, each behind a TCP relay on this PC that delays every chunk of "
            "bytes by the hop's delay each way; the coordinator and the workers reach a worker "
            "only through its relay, so every hop (worker to worker too) pays the delay once. "
            "An emulation: TCP's own pacing is not delayed, bandwidth and loss are not modelled"
        )
