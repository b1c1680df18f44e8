"""The assignment problem as plain numbers, shared by the exact (MILP) and heuristic solvers.

Device 0 is the coordinator. Memory is measured in units of one layer (weights plus KV cache):
device d can hold ``room[d]`` layers once the runtime (and, on the coordinator, the embedding) is
paid; the last device also holds the lm_head, ``head_room`` layers' worth. A :class:`Choice` says
how many layers each device runs and which device is last; the ring order between the first and
the last device does not change the predicted time (see :mod:`fleetgui.planner.cost`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from fleetgui.planner import cost
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import LeftOut, Plan, PlanConfig
from fleetgui.planner.profiles import DeviceProfile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    """Layers per device (0: not used), indexed like the problem's devices, and the last one."""

    counts: tuple[int, ...]
    last: int

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(i for i, n in enumerate(self.counts) if n > 0)


@dataclass(frozen=True)
class Problem:
    """Per-device coefficients of the time and memory model."""

    devices: tuple[DeviceProfile, ...]  # coordinator first, workers sorted by (ms, name)
    model: ModelProfile
    config: PlanConfig
    ms: tuple[float, ...]  # ms per layer
    head_ms: tuple[float, ...]  # lm_head compute if last
    join_ms: tuple[float, ...]  # hops a member adds to every token (0 for the coordinator)
    busy_ms: tuple[float, ...]  # link busy time per token (0 for the coordinator)
    room: tuple[float, ...]  # layers that fit beside the runtime (and embedding on device 0)
    head_room: float  # the lm_head's memory in layers

    @property
    def n_layers(self) -> int:
        return self.model.n_layers

    @property
    def streams(self) -> int:
        return self.model.streams

    def max_layers(self, device: int, last: bool) -> int:
        """Most layers ``device`` can hold (as the last device if ``last``)."""
        room = self.room[device] - (self.head_room if last else 0.0)
        return max(0, min(self.n_layers, math.floor(room + 1e-9)))

    def token_ms(self, choice: Choice) -> float:
        """Predicted time per token of one user."""
        total = self.head_ms[choice.last]
        for d, n in enumerate(choice.counts):
            if n:
                total += n * self.ms[d] + self.join_ms[d]
        return total

    def bottleneck_ms(self, choice: Choice) -> float:
        worst = 0.0
        for d, n in enumerate(choice.counts):
            if n:
                compute = n * self.ms[d] + (self.head_ms[d] if d == choice.last else 0.0)
                worst = max(worst, compute, self.busy_ms[d])
        return worst

    def score(self, choice: Choice) -> tuple[float, float]:
        """(objective, time per token): smaller is better, compared in this order."""
        token = self.token_ms(choice)
        if self.config.objective == "throughput":
            return max(token / self.streams, self.bottleneck_ms(choice)), token
        return token, token

    def feasible(self, choice: Choice) -> bool:
        counts = choice.counts
        if sum(counts) != self.n_layers or counts[0] < 1 or counts[choice.last] < 1:
            return False
        if choice.last == 0 and any(counts[1:]):
            return False
        return all(n <= self.max_layers(d, d == choice.last) for d, n in enumerate(counts) if n)

    def ring(self, choice: Choice) -> list[tuple[DeviceProfile, int]]:
        """Coordinator first, the last device last, the others by (ms_per_layer, name)."""
        middle = sorted(
            (d for d in choice.members if d not in (0, choice.last)),
            key=lambda d: (self.ms[d], self.devices[d].name),
        )
        order = [0, *middle] + ([choice.last] if choice.last != 0 else [])
        return [(self.devices[d], choice.counts[d]) for d in order]

    def plan(self, choice: Choice, left_out: Sequence[LeftOut], solver: str) -> Plan:
        return cost.evaluate(
            self.ring(choice), self.model, self.config, left_out=left_out, solver=solver
        )


def build_problem(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> Problem:
    """Coefficients for ``devices`` (the first is the coordinator; the others are sorted by
    ``(ms_per_layer, name)`` so that equal inputs give equal plans whatever the file order)."""
    if not devices:
        raise ValueError("a fleet needs at least one device (the coordinator)")
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ValueError(f"device names must be unique: {names}")
    ordered = (devices[0], *sorted(devices[1:], key=lambda d: (d.ms_per_layer, d.name)))
    layer = model.layer_memory_bytes
    room = []
    for index, device in enumerate(ordered):
        free = cost.capacity_bytes(device, config) - config.runtime_bytes
        free -= model.embedding_bytes if index == 0 else 0
        room.append(free / layer)
    return Problem(
        devices=ordered,
        model=model,
        config=config,
        ms=tuple(d.ms_per_layer for d in ordered),
        head_ms=tuple(cost.lm_head_ms(d, model) for d in ordered),
        join_ms=tuple(cost.ring_link_ms(d, model, i == 0) for i, d in enumerate(ordered)),
        busy_ms=tuple(cost.link_busy_ms(d, model, i == 0) for i, d in enumerate(ordered)),
        room=tuple(room),
        head_room=model.lm_head_bytes / layer,
    )
