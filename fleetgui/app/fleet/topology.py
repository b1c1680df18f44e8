"""The fleet as a picture, as plain data: PCs as nodes, the ring's hops as edges. No Qt here.

A :class:`Topology` is made of:

* who runs which layers: a :class:`FleetLayout` read from the deployment (the coordinator's
  stages, then each ring's workers in order, spares, workers lost so far);
* how each PC is: a :class:`Node` per PC, with the fleet view's status, devices and memory, and
  how busy its stages are;
* the ring's hops: an :class:`Edge` per hop, with what it carries and its derived time and
  bandwidth;
* failovers: a :class:`Move` per lost worker's stages that another PC took.

:class:`~fleetgui.app.fleet.topology_tracker.TopologyTracker` makes it from the layout, the fleet
view's rows and the runtime's metric events.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fleetgui.app.fleet.worker_status import GB
from fleetgui.runtime.kv_budget import KvHeld
from fleetgui.shard import Shard

log = logging.getLogger(__name__)

HIDDEN = "hidden states"
TOKENS = "tokens"


@dataclass(frozen=True)
class RingSpec:
    """One ring: the coordinator's stages, then its workers in ring order with their stages."""

    local: tuple[int, ...]
    members: tuple[tuple[str, tuple[int, ...]], ...]
    kv: KvHeld | None = None  # the KV entries its streams hold on each of its stages

    def kv_of(self, kv_token_bytes: Sequence[int]) -> dict[str, tuple[int, int | None]]:
        """Per PC of the ring (the coordinator as ""): the bytes of KV its stages hold and
        the most the idle conversations may keep there (None: no limit known)."""
        if self.kv is None or not kv_token_bytes:
            return {}
        kv = self.kv
        out: dict[str, tuple[int, int | None]] = {}
        for name, indices in (("", self.local), *self.members):
            per_token = sum(kv_token_bytes[i] for i in indices if i < len(kv_token_bytes))
            if indices:
                budget = None if kv.budget_tokens is None else kv.budget_tokens * per_token
                out[name] = (kv.tokens * per_token, budget)
        return out


@dataclass(frozen=True)
class LinkFacts:
    """What the deployment's link to a worker says (heartbeats)."""

    name: str
    rtt_ms: float | None = None
    free_ram_bytes: int | None = None
    lost: str | None = None  # why the link was lost, or None


@dataclass(frozen=True)
class FleetLayout:
    """Who runs which stages of the deployed export."""

    deployment: int  # tells deployments apart: a new one forgets the last one's moves
    coordinator: str
    stages: tuple[Shard, ...]  # the layers of each stage
    stage_bytes: tuple[int, ...]  # memory each stage needs (weights and overhead)
    rings: tuple[RingSpec, ...]
    spares: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()  # workers lost while deployed, in order
    links: tuple[LinkFacts, ...] = ()
    kv_token_bytes: tuple[int, ...] = ()  # one token's KV on each stage (its layers' share)

    def kv_by_pc(self) -> dict[str, tuple[int, int | None]]:
        """Per PC (the coordinator as ""): the bytes of KV its stages hold over every ring,
        and the most the idle conversations may keep there (None: no limit known)."""
        out: dict[str, tuple[int, int | None]] = {}
        for ring in self.rings:
            for name, (held, budget) in ring.kv_of(self.kv_token_bytes).items():
                before, limit = out.get(name, (0, None))
                if budget is not None:
                    limit = budget + (limit or 0)
                out[name] = (before + held, limit)
        return out

    def holders(self) -> dict[int, str]:
        """Stage index -> the PC that runs it."""
        out: dict[int, str] = {}
        for ring in self.rings:
            out.update({index: self.coordinator for index in ring.local})
            for name, indices in ring.members:
                out.update({index: name for index in indices})
        return out

    def members(self) -> dict[str, tuple[int, ...]]:
        """Every ring worker's stages."""
        return {name: indices for ring in self.rings for name, indices in ring.members}


class Role(enum.Enum):
    COORDINATOR = "coordinator"
    WORKER = "worker"  # in a ring, running stages
    SPARE = "spare"  # connected, ready to take a lost worker's stages
    LOST = "lost"
    IDLE = "not deployed"  # known, not part of the deployment


@dataclass(frozen=True)
class Move:
    """Stages a lost worker ran, now run by ``target``."""

    source: str
    target: str
    stages: tuple[int, ...]
    layers: Shard  # the layers of those stages

    @property
    def text(self) -> str:
        return f"{layers_text(self.layers)}: {self.source} → {self.target}"


def layers_text(layers: Shard | None) -> str:
    if layers is None:
        return "no layers"
    start, end = layers.start_layer, layers.end_layer
    return f"layer {start}" if end - start == 1 else f"layers {start}–{end - 1}"


def size_text(nbytes: float) -> str:
    for unit, scale in (("GB", GB), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


@dataclass(frozen=True)
class Node:
    name: str
    role: Role
    status: str  # the fleet view's status text
    stages: tuple[int, ...] = ()
    layers: Shard | None = None  # the layers of its stages
    device: str = "?"
    stage_bytes: int = 0  # memory its stages need
    free_bytes: int | None = None
    total_bytes: int | None = None
    busy: float = 0.0  # share of the last busy window its stages computed, 0..1
    took: tuple[Move, ...] = ()  # layers it runs since another PC was lost
    gave: tuple[Move, ...] = ()  # a lost PC: where its layers went
    kv_bytes: int | None = None  # KV its stages hold for the streams (None: not known)
    kv_budget_bytes: int | None = None  # what idle conversations may keep on it

    @property
    def layers_text(self) -> str:
        return layers_text(self.layers)

    @property
    def memory_text(self) -> str:
        parts = [f"stages {size_text(self.stage_bytes)}"] if self.stage_bytes else []
        if self.total_bytes:
            free = "?" if self.free_bytes is None else f"{self.free_bytes / GB:.1f}"
            parts.append(f"{free} of {self.total_bytes / GB:.1f} GB free")
        if self.kv_bytes is not None:
            kept = (
                f" (chats kept up to {size_text(self.kv_budget_bytes)})"
                if self.kv_budget_bytes is not None
                else ""
            )
            parts.append(f"KV {size_text(self.kv_bytes)}{kept}")
        return " · ".join(parts) or "memory ?"


@dataclass(frozen=True)
class Edge:
    """A hop of a ring: ``source`` sends ``carries`` to ``target``."""

    source: str
    target: str
    carries: str  # HIDDEN or TOKENS
    ms: float | None = None  # derived per-hop time of a pass (see topology_tracker)
    bytes_per_pass: int | None = None
    bytes_per_s: float | None = None  # effective bandwidth

    @property
    def label(self) -> str:
        """Time and bandwidth ("" before a pass was measured)."""
        if self.ms is None:
            return ""
        text = f"{self.ms:.2f} ms"
        if self.bytes_per_s:
            text += f" · {size_text(self.bytes_per_s)}/s"
        return text

    @property
    def what(self) -> str:
        """What the hop carries, and how much a pass."""
        if self.bytes_per_pass:
            return f"{self.carries}, {size_text(self.bytes_per_pass)}/pass"
        return self.carries


@dataclass(frozen=True)
class Topology:
    nodes: tuple[Node, ...] = ()
    edges: tuple[Edge, ...] = ()
    moves: tuple[Move, ...] = ()
    generating: bool = False
    note: str = ""  # what the picture cannot show (nothing deployed, ...)

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)


def kv_text(topology: Topology, coordinator: str) -> str:
    """The dashboard's line on the KV each PC holds for the streams, e.g. ``"KV in use: this
    PC 35.2 MB · w1 34.8 MB (idle chats kept up to 480.0 MB a PC)"``; "" when not known."""
    held = [n for n in topology.nodes if n.kv_bytes is not None]
    if not held:
        return ""
    parts = [
        f"{'this PC' if n.name == coordinator else n.name} {size_text(n.kv_bytes or 0)}"
        for n in held
    ]
    budgets = [n.kv_budget_bytes for n in held if n.kv_budget_bytes is not None]
    kept = f" (idle chats kept up to {size_text(max(budgets))} a PC)" if budgets else ""
    return "KV in use: " + " · ".join(parts) + kept


def stage_span(stages: Sequence[Shard], indices: Sequence[int]) -> Shard | None:
    """The layers of consecutive stages ``indices``, as one shard (None for none)."""
    if not indices:
        return None
    return replace(stages[min(indices)], end_layer=stages[max(indices)].end_layer)
