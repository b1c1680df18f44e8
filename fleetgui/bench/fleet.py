"""The fleet a benchmark measures: local worker processes on delayed links, or the user's PCs.

Local workers are real ``fleetgui worker`` processes (:class:`~fleetgui.fleet.local_fleet.fleet.
LocalFleet`), one OpenVINO thread each, each pinned to a core of its own where there are enough
(one core and one thread stand in for one fleet PC), each in its own network namespace when the
links are delayed for real (:mod:`fleetgui.bench.netns`), else behind a delay relay
(:class:`~fleetgui.bench.links.DelayRelays`). Everything started here stops on exit, also on
Ctrl+C and on errors.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from fleetgui.bench.links import DelayMethod, DelayRelays, LinkChoice
from fleetgui.bench.machine import usable_cores
from fleetgui.bench.netem_links import NetemStar
from fleetgui.bench.netns import NamespaceStar, Shape
from fleetgui.bench.packet_links import PacketStar
from fleetgui.errors import FleetguiError
from fleetgui.fleet.local_fleet.fleet import LocalFleet
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.net.keys import KeyPair

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorePlan:
    """Which core the coordinator and each worker run on (None: not pinned)."""

    coordinator: int | None
    workers: dict[str, int | None] = field(default_factory=dict)

    def describe(self) -> str:
        if not any(core is not None for core in self.workers.values()):
            return "nothing pinned"
        workers = ", ".join(f"{name} on core {core}" for name, core in self.workers.items())
        here = (
            "the coordinator not pinned (no core left for it)"
            if self.coordinator is None
            else f"the coordinator on core {self.coordinator}"
        )
        return f"{workers}; {here}"


def plan_cores(workers: list[str], cores: list[int], *, pin: bool = True) -> CorePlan:
    """A core per worker and one for the coordinator when there are enough; else the workers
    take turns over the cores and the coordinator is not pinned."""
    if not pin or not cores:
        return CorePlan(None, dict.fromkeys(workers))
    if len(cores) > len(workers):
        return CorePlan(cores[0], {w: cores[1 + i] for i, w in enumerate(workers)})
    return CorePlan(None, {w: cores[i % len(cores)] for i, w in enumerate(workers)})


class LocalBenchFleet:
    """Local workers on the chosen links (see module doc); a context manager."""

    def __init__(
        self, root: Path, names: list[str], links: LinkChoice, shape: Shape, *, pin: bool = True
    ) -> None:
        self.root = root
        self.names = names
        self.links = links
        self.shape = shape
        can_pin = pin and shutil.which("taskset") is not None and hasattr(os, "sched_setaffinity")
        self.cores = plan_cores(names, usable_cores(), pin=can_pin)
        self.star: NamespaceStar | None = None
        self.relays: DelayRelays | None = None
        self.fleet = LocalFleet(root, threads=1)
        self.endpoints: list[WorkerEndpoint] = []
        self._affinity: set[int] | None = None
        self._stack = contextlib.ExitStack()

    @property
    def identity(self) -> KeyPair:
        return self.fleet.identity()

    def __enter__(self) -> LocalBenchFleet:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def _start(self) -> None:
        method = self.links.method
        if method in (DelayMethod.NETEM, DelayMethod.PACKETS):
            star_type = NetemStar if method == DelayMethod.NETEM else PacketStar
            self.star = self._stack.enter_context(star_type(self.names, self.shape))
            for name in self.names:
                self.fleet.prefixes[name] = self.star.worker_prefix(name) + self._pin(name)
                self.fleet.hosts[name] = self.star.worker_host(name)
        else:
            for name in self.names:
                self.fleet.prefixes[name] = self._pin(name)
        self._stack.callback(self.fleet.stop)
        workers = self.fleet.start(self.names)
        if method == DelayMethod.PROXY:
            self.relays = self._stack.enter_context(DelayRelays(self.shape.delay_ms))
            self.endpoints = self.relays.front(workers)
        else:
            self.endpoints = [w.endpoint for w in workers]
        if self.cores.coordinator is not None:
            self._affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {self.cores.coordinator})
            self._stack.callback(self._unpin)

    def _pin(self, name: str) -> list[str]:
        core = self.cores.workers.get(name)
        return [] if core is None else ["taskset", "-c", str(core)]

    def _unpin(self) -> None:
        if self._affinity is not None:
            os.sched_setaffinity(0, self._affinity)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stack.close()

    def set_delay(self, delay_ms: float) -> None:
        if self.star is not None:
            self.star.set_delay(delay_ms)
        elif self.relays is not None:
            self.relays.set_delay(delay_ms)

    def describe(self) -> str:
        if self.star is not None:
            return self.star.describe()
        return DelayRelays.describe()


async def remote_endpoints(addresses: list[tuple[str, int]]) -> list[WorkerEndpoint]:
    """The user's own workers, probed and their keys pinned as ``fleetgui generate`` does."""
    from fleetgui.fleet.pairing.worker_addresses import resolve_workers

    endpoints = await resolve_workers(addresses)
    if not endpoints:
        raise FleetguiError("--workers lists no worker")
    return endpoints
