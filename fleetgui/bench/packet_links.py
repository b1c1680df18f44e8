"""User-space links for a benchmark fleet where the kernel has no netem (see
:mod:`fleetgui.bench.netns`): a TUN device per node, joined by :mod:`fleetgui.bench.packet_hub`."""

from __future__ import annotations

import subprocess
import sys

from fleetgui.bench.netns import NamespaceStar, NetworkSetupError, Shape, run


class PacketStar(NamespaceStar):
    """TUN devices and :mod:`fleetgui.bench.packet_hub` (see module doc)."""

    method = "packets"

    def __init__(self, workers: list[str], shape: Shape) -> None:
        super().__init__(workers, shape)
        self._hub: subprocess.Popen[str] | None = None

    def _make_links(self) -> None:
        nodes = [f":{self.device(0)}:{self.address_of(0)}"]
        nodes += [
            f"{self.namespaces[w]}:{self.device(i + 1)}:{self.address_of(i + 1)}"
            for i, w in enumerate(self.workers)
        ]
        command = [sys.executable, "-m", "fleetgui.bench.packet_hub"]
        command += [arg for node in nodes for arg in ("--node", node)]
        command += ["--delay-ms", f"{self.shape.delay_ms:g}"]
        command += ["--rate-mbit", f"{self.shape.rate_mbit:g}"]
        command += ["--loss-pct", f"{self.shape.loss_pct:g}"]
        self._hub = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        said = self._answer()
        if said != "ready":
            raise NetworkSetupError(f"the packet hub did not start: {said}")
        for node, namespace in enumerate([None, *(self.namespaces[w] for w in self.workers)]):
            device = self.device(node)
            run("ip", "addr", "add", f"{self.address_of(node)}/24", "dev", device,
                namespace=namespace)  # fmt: skip
            # a real NIC's MTU, so TCP's segments and slow start are a real link's
            run("ip", "link", "set", device, "up", "mtu", "1500", "txqueuelen", "10000",
                namespace=namespace)  # fmt: skip

    def _answer(self) -> str:
        assert self._hub is not None and self._hub.stdout is not None
        line = self._hub.stdout.readline().strip()
        return line or f"it exited with code {self._hub.poll()}"

    def _remove_links(self) -> None:
        hub, self._hub = self._hub, None
        if hub is None:
            return
        if hub.stdin is not None:
            hub.stdin.close()  # the hub's cue to end; its TUN devices go with it
        try:
            hub.wait(5)
        except subprocess.TimeoutExpired:
            hub.kill()
            hub.wait(5)

    def set_delay(self, delay_ms: float) -> None:
        if self._hub is None or self._hub.stdin is None:
            raise NetworkSetupError("the packet hub is not running")
        self.shape = Shape(delay_ms, self.shape.rate_mbit, self.shape.loss_pct)
        self._hub.stdin.write(f"delay {delay_ms:g}\n")
        self._hub.stdin.flush()
        said = self._answer()
        if said != "ok":
            raise NetworkSetupError(f"the packet hub did not take the delay: {said}")

    def describe(self) -> str:
        return (
            f"each worker in its own network namespace and the coordinator, each on a TUN device "
            f"(subnet {self.subnet}.0/24, MTU 1500) of a user-space switch that forwards every "
            "IP packet after the hop's delay (this kernel has no netem): every hop (coordinator "
            "to worker, worker to worker, worker to coordinator) pays the delay once, packet by "
            "packet"
        )
