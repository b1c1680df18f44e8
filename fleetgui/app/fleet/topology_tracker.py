"""``TopologyTracker``: collects what the fleet picture (:mod:`fleetgui.app.fleet.topology`) is made
of and gives a :class:`~fleetgui.app.fleet.topology.Topology`. No Qt here.

* who runs which layers: the deployment's :class:`~fleetgui.app.fleet.topology.FleetLayout`;
* how each PC is: the fleet view's rows (status, devices, memory);
* what runs now: the runtime's metric events. A node's *busy* share is the time its stages
  computed (``StageTiming``) over the last ``busy_window_s`` of wall time; events arrive per
  pass, after it, so at a hundred tokens a second "which stage computes this instant" would
  flicker, where the share shows where the time goes (the bottleneck is the busiest node).

Failover: when a worker that ran stages is lost and the next layout has its stages elsewhere,
the tracker keeps a :class:`~fleetgui.app.fleet.topology.Move` per new holder until the next
deployment; the lost node stays in the picture, marked, with where its layers went, and the
taker shows what it took.

Per-hop time and bandwidth are derived, since no hop is timed on its own: a ring pass's
``TransferTiming`` is its time in the ring less the workers' reported compute, so it is every
hop's transfer together (sending, the wire, decoding, queueing). It is split over the ring's
hops in proportion to each hop's latency estimated from the heartbeat round trips (each PC's
share of its round trip to the coordinator, the coordinator counted as fast as the best worker;
equal shares without round trips). A hop's bandwidth is the bytes it carried (the hidden states
of the pass) over its share of the time: an effective figure, a lower bound of the link's.
"""

from __future__ import annotations

import collections
import itertools
import logging
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetgui.app.fleet.topology import (
    HIDDEN,
    TOKENS,
    Edge,
    FleetLayout,
    Move,
    Node,
    RingSpec,
    Role,
    Topology,
    stage_span,
)
from fleetgui.app.fleet.worker_status import WorkerRow, WorkerStatus
from fleetgui.runtime.metrics import MetricEvent, StageTiming, TransferTiming

log = logging.getLogger(__name__)

BUSY_WINDOW_S = 1.0
TRANSFER_SAMPLES = 32  # ring passes the per-hop figures are taken over


def failover_moves(old: FleetLayout, new: FleetLayout, lost: set[str]) -> list[Move]:
    """Where the stages of the ``lost`` workers of ``old`` went in ``new``, one move per run
    of consecutive stages with the same new holder."""
    holders = new.holders()
    still = new.members()
    moves: list[Move] = []
    for name, indices in old.members().items():
        if name not in lost or name in still:
            continue
        run: list[int] = []
        for index in [*indices, -1]:  # -1 ends the last run
            target = holders.get(index)
            if run and (index == -1 or target != holders.get(run[-1])):
                taker = holders.get(run[0])
                if taker is not None:
                    span = stage_span(new.stages, run)
                    assert span is not None
                    moves.append(Move(name, taker, tuple(run), span))
                run = []
            if index != -1:
                run.append(index)
    return moves


def hop_shares(path: Sequence[str], rtt_ms: Mapping[str, float], coordinator: str) -> list[float]:
    """Each hop's share of a ring pass's transfer time, for the ring ``path`` (its PCs in
    order, back to the first): proportional to the hop's latency as the round trips to the
    coordinator estimate it (see module doc)."""
    hops = len(path) - 1
    workers = [n for n in path if n != coordinator]
    known = [rtt_ms[n] for n in workers if rtt_ms.get(n)]
    if hops <= 0:
        return []
    if not known:
        return [1.0 / hops] * hops
    here = min(known) / 4  # the coordinator's own part of a round trip
    fallback = statistics.fmean(known)

    def part(name: str) -> float:
        if name == coordinator:
            return here
        return max(rtt_ms.get(name) or fallback, 0.0) / 2 - here

    latency = [max(part(a) + part(b), 1e-6) for a, b in itertools.pairwise(path)]
    total = sum(latency)
    return [x / total for x in latency]


@dataclass
class _Transfer:
    ms: float
    nbytes: int


class TopologyTracker:
    """Collects layout, rows and metric events; :meth:`topology` gives the picture."""

    def __init__(self, busy_window_s: float = BUSY_WINDOW_S) -> None:
        self.busy_window_s = busy_window_s
        self.rows: tuple[WorkerRow, ...] = ()
        self.layout: FleetLayout | None = None
        self.moves: list[Move] = []  # failovers of this deployment, oldest first
        self._compute: collections.deque[tuple[float, int, float]] = collections.deque()
        self._transfers: collections.deque[_Transfer] = collections.deque(maxlen=TRANSFER_SAMPLES)

    def set_rows(self, rows: Sequence[WorkerRow]) -> None:
        self.rows = tuple(rows)

    def set_layout(self, layout: FleetLayout | None) -> None:
        """The deployment's layout now (None: nothing deployed on the fleet)."""
        old = self.layout
        self.layout = layout
        if layout is None or old is None or old.deployment != layout.deployment:
            self.moves = []
            self._transfers.clear()
            return
        if old.rings == layout.rings:
            return
        lost = set(layout.lost) | {f.name for f in layout.links if f.lost}
        lost |= {r.name for r in self.rows if r.status is WorkerStatus.LOST}
        for move in failover_moves(old, layout, lost):
            if move not in self.moves:
                log.info("failover shown: %s", move.text)
                self.moves.append(move)

    def record(self, event: MetricEvent, now: float) -> None:
        """A runtime metric event, received at ``now`` (seconds, the tracker's clock)."""
        match event:
            case StageTiming(stage=stage, compute_ms=ms):
                self._compute.append((now, stage, ms))
                self._forget(now)
            case TransferTiming(ms=ms, bytes_sent=nbytes):
                self._transfers.append(_Transfer(ms, nbytes))

    def _forget(self, now: float) -> None:
        while self._compute and self._compute[0][0] <= now - self.busy_window_s:
            self._compute.popleft()

    def busy_by_stage(self, now: float) -> dict[int, float]:
        """Stage -> share of the last busy window it computed."""
        self._forget(now)
        out: dict[int, float] = collections.defaultdict(float)
        for _, stage, ms in self._compute:
            out[stage] += ms / (self.busy_window_s * 1000.0)
        return dict(out)

    def generating(self, now: float) -> bool:
        self._forget(now)
        return bool(self._compute)

    # -- the picture ------------------------------------------------------------------------

    def topology(self, now: float) -> Topology:
        layout = self.layout
        busy = self.busy_by_stage(now)
        rows = {row.name: row for row in self.rows}
        coordinator_row = next((r for r in self.rows if r.coordinator), None)
        links = {f.name: f for f in layout.links} if layout is not None else {}
        kv = layout.kv_by_pc() if layout is not None else {}
        nodes: dict[str, Node] = {}

        def make(name: str, role: Role, indices: Sequence[int] = ()) -> Node:
            row = coordinator_row if role is Role.COORDINATOR else rows.get(name)
            link = links.get(name)
            stages = layout.stages if layout is not None else ()
            need = layout.stage_bytes if layout is not None else ()
            free = link.free_ram_bytes if link is not None and link.free_ram_bytes else None
            if free is None and row is not None and row.info.free_ram_bytes:
                free = row.info.free_ram_bytes
            status = str(row) if row is not None else role.value
            says_lost = row is None or row.status is WorkerStatus.LOST  # no row: the role says
            if role is Role.LOST and link is not None and link.lost and not says_lost:
                status = f"lost: {link.lost}"  # before the row says so, the link says why
            held, kept = kv.get("" if role is Role.COORDINATOR else name, (None, None))
            return Node(
                name=name,
                role=role,
                status=status,
                stages=tuple(indices),
                layers=stage_span(stages, indices) if stages else None,
                device=row.devices_text if row is not None else "?",
                stage_bytes=sum(need[i] for i in indices if i < len(need)),
                free_bytes=None if free is None else int(free),
                total_bytes=row.info.ram_bytes if row is not None and row.info.ram_bytes else None,
                busy=min(1.0, float(sum(busy.get(i, 0.0) for i in indices))),
                took=tuple(m for m in self.moves if m.target == name),
                gave=tuple(m for m in self.moves if m.source == name),
                kv_bytes=held,
                kv_budget_bytes=kept,
            )

        here = layout.coordinator if layout is not None else None
        if here is None and coordinator_row is not None:
            here = coordinator_row.name
        if here is not None:
            local = [i for ring in layout.rings for i in ring.local] if layout else []
            nodes[here] = make(here, Role.COORDINATOR, sorted(set(local)))
        edges: list[Edge] = []
        if layout is not None:
            for ring in layout.rings:
                for name, indices in ring.members:
                    # lost, its stages not moved yet: the ring is being rebuilt
                    gone = (name in links and links[name].lost is not None) or (
                        name in rows and rows[name].status is WorkerStatus.LOST
                    )
                    nodes[name] = make(name, Role.LOST if gone else Role.WORKER, indices)
                edges += self._ring_edges(layout, ring)
            for name in layout.spares:
                if name not in nodes:
                    lost = name in links and links[name].lost is not None
                    nodes[name] = make(name, Role.LOST if lost else Role.SPARE)
            for name in layout.lost:
                if name not in nodes:
                    nodes[name] = make(name, Role.LOST)
        for row in self.rows:
            if row.name not in nodes and not row.coordinator:
                gave = any(m.source == row.name for m in self.moves)
                lost = row.status is WorkerStatus.LOST or gave
                nodes[row.name] = make(row.name, Role.LOST if lost else Role.IDLE)
        note = "" if layout is not None else "nothing deployed: the ring shows once a model runs"
        return Topology(
            tuple(nodes.values()), tuple(edges), tuple(self.moves), self.generating(now), note
        )

    def _ring_edges(self, layout: FleetLayout, ring: RingSpec) -> list[Edge]:
        if not ring.members:
            return []
        here = layout.coordinator
        path = [here, *(name for name, _ in ring.members), here]
        carries = [HIDDEN if ring.local else TOKENS]
        carries += [HIDDEN] * (len(ring.members) - 1) + [TOKENS]
        rtt = {f.name: f.rtt_ms for f in layout.links if f.rtt_ms}
        shares = hop_shares(path, rtt, here)
        samples = list(self._transfers)
        typical = statistics.median(s.ms for s in samples) if samples else None
        sized = [s for s in samples if s.nbytes]  # passes that said what they carried
        total_ms = sum(s.ms for s in sized)
        total_bytes = sum(s.nbytes for s in sized)
        per_pass = int(statistics.median(s.nbytes for s in sized)) if sized else None
        edges = []
        for (source, target), kind, share in zip(
            itertools.pairwise(path), carries, shares, strict=True
        ):
            hidden = kind == HIDDEN and bool(total_bytes)
            edges.append(
                Edge(
                    source,
                    target,
                    kind,
                    ms=None if typical is None else typical * share,
                    bytes_per_pass=per_pass if hidden else None,
                    bytes_per_s=(
                        total_bytes / (total_ms * share / 1000.0)
                        if hidden and total_ms > 0
                        else None
                    ),
                )
            )
        return edges
