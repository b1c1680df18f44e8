"""Network namespaces for a benchmark fleet: each worker in its own namespace, every hop delayed.

The topology is a star: a switch, and every node (the coordinator in this process's namespace,
each worker in a namespace of its own) on its own access link to it, with half the hop's delay
(and the rate and loss) on the link each way. A packet from any node to any other crosses two
access links, so every hop pays the whole delay once: coordinator to worker, worker to worker
(the ring) and worker back to the coordinator alike. The links are made one of two ways:

* ``netem`` (:mod:`~fleetgui.bench.netem_links`): the switch is a bridge in a hub namespace and
  each access link a veth pair with ``tc netem`` on both ends;
* ``packets`` (:mod:`~fleetgui.bench.packet_links`): where the kernel has no netem qdisc, a TUN
  device per node and :mod:`fleetgui.bench.packet_hub`, which forwards every packet after the
  delay in user space.

Names carry this process's id and a random tag, so parallel runs do not collide, and namespaces
left by a run that was killed (its process gone) are removed by the next run. Needs root and
``ip`` (iproute2); :func:`namespace_support` says why not when it cannot work.
This module holds what both share: names, commands, the namespaces and their teardown.
"""

from __future__ import annotations

import logging
import os
import random
import re
import secrets
import shutil
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

PREFIX = "fleetgui-bench-"  # every namespace a run makes starts with this, then "<pid>-<tag>-"
COMMAND_TIMEOUT_S = 20.0


class NetworkSetupError(FleetguiError):
    """A namespace, link or qdisc could not be made (the message has the command's error)."""


@dataclass(frozen=True)
class Shape:
    """What every hop pays: ``delay_ms`` one way, and optionally a rate and a loss."""

    delay_ms: float = 0.0
    rate_mbit: float = 0.0  # 0: unlimited
    loss_pct: float = 0.0

    @property
    def link_loss_pct(self) -> float:
        """The loss on each of a hop's two access links, so that the hop loses ``loss_pct``."""
        return 100.0 * (1.0 - (1.0 - self.loss_pct / 100.0) ** 0.5)


def run(*command: str, namespace: str | None = None) -> str:
    """Run ``ip``/``tc`` (in ``namespace`` with their ``-n``); its output, or raise."""
    argv = [command[0], *(["-n", namespace] if namespace else []), *command[1:]]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkSetupError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        raise NetworkSetupError(f"{' '.join(argv)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def namespace_support() -> str | None:
    """Why worker namespaces cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, or with sudo)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing: install iproute2"
    return None


def delete_namespace(name: str) -> None:
    try:
        run("ip", "netns", "del", name)
    except NetworkSetupError as exc:
        log.warning("could not delete network namespace %s: %s", name, exc)


def remove_stale_namespaces() -> list[str]:
    """Delete namespaces that earlier runs made and left when killed; their names."""
    removed = []
    for line in run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        found = re.match(rf"{re.escape(PREFIX)}(\d+)-", name)
        if found and not _alive(int(found.group(1))):
            delete_namespace(name)
            removed.append(name)
    if removed:
        log.info("removed %d network namespaces left by killed runs", len(removed))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_subnet(rng: random.Random | None = None) -> str:
    """A ``10.A.B`` /24 prefix no address or route of this namespace uses yet."""
    used = run("ip", "-4", "-o", "addr", "show") + run("ip", "-4", "route", "show")
    rng = rng or random.Random()
    for _ in range(200):
        prefix = f"10.{rng.randint(200, 249)}.{rng.randint(0, 255)}"
        if f"{prefix}." not in used:
            return prefix
    raise NetworkSetupError("no free 10.200-249.x.0/24 subnet for the benchmark's links")


class NamespaceStar(ABC):
    """The star of :mod:`this module <fleetgui.bench.netns>` for ``workers`` (names); use as a
    context manager: made on entry, torn down on exit, whatever happened."""

    method: str = ""

    def __init__(self, workers: list[str], shape: Shape) -> None:
        self.workers = list(workers)
        self.shape = shape
        self.tag = secrets.token_hex(2)
        self.run_id = f"{os.getpid()}-{self.tag}"
        self.subnet = ""
        self.namespaces: dict[str, str] = {}  # worker name -> its namespace
        self._made: list[str] = []  # namespaces made so far, to delete

    def namespace_of(self, worker: str) -> str:
        return f"{PREFIX}{self.run_id}-w{self.workers.index(worker) + 1}"

    def address_of(self, node: int) -> str:
        """Node 0 is the coordinator, node i the i-th worker."""
        return f"{self.subnet}.{node + 1}"

    def worker_host(self, worker: str) -> str:
        return self.address_of(self.workers.index(worker) + 1)

    def worker_prefix(self, worker: str) -> list[str]:
        """What a worker's command starts with to run in its namespace."""
        return ["ip", "netns", "exec", self.namespaces[worker]]

    def device(self, node: int, side: str = "") -> str:
        return f"fgb{self.tag}n{node}{side}"  # at most 15 characters, as the kernel wants

    def __enter__(self) -> NamespaceStar:
        try:
            remove_stale_namespaces()
            self.subnet = free_subnet()
            for worker in self.workers:
                name = self.namespace_of(worker)
                run("ip", "netns", "add", name)
                self._made.append(name)
                self.namespaces[worker] = name
                run("ip", "link", "set", "lo", "up", namespace=name)
            self._make_links()
        except BaseException:
            self.close()
            raise
        log.info("benchmark network %s (%s): %s", self.run_id, self.method, self.describe())
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Tear everything down (also after a failed setup); safe to call twice."""
        try:
            self._remove_links()
        finally:
            for name in reversed(self._made):
                delete_namespace(name)
            self._made.clear()

    @abstractmethod
    def _make_links(self) -> None: ...

    @abstractmethod
    def _remove_links(self) -> None: ...

    @abstractmethod
    def set_delay(self, delay_ms: float) -> None:
        """Every hop's one-way delay from now on (rate and loss stay)."""

    @abstractmethod
    def describe(self) -> str:
        """The topology in a sentence, for the outputs."""
