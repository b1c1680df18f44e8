"""``tc netem`` links for a benchmark fleet (see :mod:`fleetgui.bench.netns`): a bridge in a hub
namespace, a veth pair from each node to it, netem on both ends of each with half the hop."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil

from fleetgui.bench.netns import (
    PREFIX,
    NamespaceStar,
    NetworkSetupError,
    Shape,
    delete_namespace,
    run,
)

NETEM_LIMIT = 100_000  # packets netem may hold: a prompt's activations at 100 ms must fit


def netem_args(shape: Shape) -> list[str]:
    """``tc qdisc ... netem`` arguments for one access link of ``shape`` (half its delay)."""
    args = ["netem", "delay", f"{shape.delay_ms / 2:g}ms", "limit", str(NETEM_LIMIT)]
    if shape.rate_mbit:
        args += ["rate", f"{shape.rate_mbit:g}mbit"]
    if shape.loss_pct:
        args += ["loss", f"{shape.link_loss_pct:.6g}%"]
    return args


def netem_support() -> str | None:
    """Why ``tc netem`` cannot delay links here (a scratch namespace is tried), or None."""
    if shutil.which("tc") is None:
        return "the tc command (iproute2) is missing"
    scratch = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}-probe"
    try:
        run("ip", "netns", "add", scratch)
    except NetworkSetupError as exc:
        return str(exc)
    try:
        run("tc", "qdisc", "add", "dev", "lo", "root", *netem_args(Shape(1.0)), namespace=scratch)
        return None
    except NetworkSetupError as exc:
        return f"this kernel has no netem qdisc ({exc})"
    finally:
        delete_namespace(scratch)


class NetemStar(NamespaceStar):
    """Veth pairs to a bridge in a hub namespace, ``tc netem`` on both ends of each."""

    method = "netem"

    def _links(self) -> list[tuple[str | None, str]]:
        """Each qdisc's (namespace, device): each node's own end, then its end on the bridge."""
        hub = self._hub()
        links: list[tuple[str | None, str]] = [(None, self.device(0))]
        links += [(self.namespaces[w], self.device(i + 1)) for i, w in enumerate(self.workers)]
        links += [(hub, self.device(i, "b")) for i in range(len(self.workers) + 1)]
        return links

    def _hub(self) -> str:
        return f"{PREFIX}{self.run_id}-hub"

    def _make_links(self) -> None:
        hub = self._hub()
        run("ip", "netns", "add", hub)
        self._made.append(hub)
        run("ip", "link", "add", "br0", "type", "bridge", namespace=hub)
        run("ip", "link", "set", "br0", "up", namespace=hub)
        nodes: list[str | None] = [None, *(self.namespaces[w] for w in self.workers)]
        for node, namespace in enumerate(nodes):
            own, bridged = self.device(node), self.device(node, "b")
            run("ip", "link", "add", own, "type", "veth", "peer", "name", bridged)
            run("ip", "link", "set", bridged, "netns", hub)
            run("ip", "link", "set", bridged, "master", "br0", namespace=hub)
            run("ip", "link", "set", bridged, "up", namespace=hub)
            if namespace is not None:
                run("ip", "link", "set", own, "netns", namespace)
            run("ip", "addr", "add", f"{self.address_of(node)}/24", "dev", own, namespace=namespace)
            run("ip", "link", "set", own, "up", namespace=namespace)
        for namespace, device in self._links():
            run("tc", "qdisc", "add", "dev", device, "root", *netem_args(self.shape),
                namespace=namespace)  # fmt: skip

    def _remove_links(self) -> None:
        # veth ends in this namespace go with their peers' namespaces, but a setup that failed
        # before moving them leaves them here
        for node in range(len(self.workers) + 1):
            for device in (self.device(node), self.device(node, "b")):
                with contextlib.suppress(NetworkSetupError):
                    run("ip", "link", "del", device)

    def set_delay(self, delay_ms: float) -> None:
        self.shape = Shape(delay_ms, self.shape.rate_mbit, self.shape.loss_pct)
        for namespace, device in self._links():
            run("tc", "qdisc", "change", "dev", device, "root", *netem_args(self.shape),
                namespace=namespace)  # fmt: skip

    def describe(self) -> str:
        return (
            f"each worker in its own network namespace and the coordinator, each on a veth pair "
            f"to a bridge (subnet {self.subnet}.0/24), tc netem on both ends of every veth with "
            "half the hop's delay: every hop (coordinator to worker, worker to worker, worker to "
            "coordinator) pays the delay once, packet by packet"
        )
