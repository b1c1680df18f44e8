"""``TopologyFeed``: keeps the fleet picture (:mod:`fleetgui.app.fleet.topology`) current.

It reads who runs which layers from the deployment (a ``FleetSession``'s assignment, the
sessions of whole copies, or the stages of a pipeline on this PC), the rows of the
:class:`~fleetgui.app.fleet.worker_table.WorkerTableModel`, and the runtime's metric events;
``updated`` says the picture changed (at most every ``UPDATE_INTERVAL_MS``). While the fleet
generates it is re-read on that period, so busy shares decay when generation stops and a failover's
new layout shows as soon as the ring runs again (a stage moved to this PC sends no fleet event).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from fleetgui.app.fleet.topology import FleetLayout, LinkFacts, RingSpec, Topology
from fleetgui.app.fleet.topology_tracker import TopologyTracker
from fleetgui.app.fleet.worker_table import WorkerTableModel
from fleetgui.export.manifest import Manifest
from fleetgui.fleet.placement.assignment import MEMORY_OVERHEAD
from fleetgui.fleet.profiling.this_pc import coordinator_name
from fleetgui.runtime.kv_budget import KvHeld, kv_bytes_per_token_per_layer, kv_element_bytes
from fleetgui.runtime.metrics import MetricEvent
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.paged_stage import PagedStage
from fleetgui.runtime.pipeline import Pipeline

if TYPE_CHECKING:  # the fleet's session modules load when a fleet deploys, not with the app
    from fleetgui.fleet.session.session import FleetSession
    from fleetgui.llm_pipeline import LLMPipeline

log = logging.getLogger(__name__)

UPDATE_INTERVAL_MS = 250

LayoutSource = Callable[[], FleetLayout | None]


def session_rings(session: FleetSession, kv: KvHeld | None = None) -> RingSpec | None:
    """The ring of a ``FleetSession`` (None before it deployed), with the KV its streams hold."""
    assignment = session.deployment.assignment
    if assignment is None:
        return None
    members = tuple((m.name, tuple(m.indices)) for m in assignment.members)
    return RingSpec(tuple(assignment.local), members, kv)


def kv_token_bytes(manifest: Manifest, element_bytes: int) -> tuple[int, ...]:
    """One token's KV on each of ``manifest``'s stages: its layers' share."""
    per_layer = kv_bytes_per_token_per_layer(manifest.config, element_bytes)
    return tuple(shard.n_stage_layers * per_layer for shard in manifest.shards)


def session_links(session: FleetSession) -> list[LinkFacts]:
    out = []
    for name in list(session.workers.links):
        status = session.worker_status(name)
        out.append(LinkFacts(name, status.rtt_ms, status.free_ram_bytes, status.lost))
    return out


def sessions_layout(
    sessions: Sequence[FleetSession],
    deployment: int,
    coordinator: str,
    kv: Mapping[int, KvHeld] | None = None,
) -> FleetLayout | None:
    """The layout of one ``FleetSession`` or of several (whole copies: a ring each); ``kv``:
    the KV each session's pipeline holds, by ``id(session)``."""
    rings, links, spares, lost = [], [], [], []
    manifest = None
    element = 2
    for session in sessions:
        deployed = session.deployment
        ring = session_rings(session, (kv or {}).get(id(session)))
        assignment = deployed.assignment
        if ring is None or assignment is None or deployed.manifest is None:
            continue
        manifest = deployed.manifest
        rings.append(ring)
        links += session_links(session)
        spares += [s for s in assignment.spares if s not in spares]
        lost += [n for n in session.failover.failovers if n not in lost]
        stage = session.config.local.stage
        element = max(
            element,
            kv_element_bytes(stage.precision, stage.kv_cache_precision),
            kv_element_bytes(session.config.worker_precision, None),
        )
    if manifest is None:
        return None
    stages = tuple(manifest.shards)
    need = tuple(int(sum(f.size for f in s.files) * MEMORY_OVERHEAD) for s in manifest.stages)
    return FleetLayout(
        deployment, coordinator, stages, need, tuple(rings), tuple(spares), tuple(lost),
        tuple(links), kv_token_bytes(manifest, element),
    )  # fmt: skip


def local_layout(pipeline: object, deployment: int, coordinator: str) -> FleetLayout | None:
    """A pipeline whose stages all run on this PC (``LocalRoute``)."""
    stages = getattr(getattr(pipeline, "route", None), "stages", None)
    if not stages:
        return None
    shards = tuple(s.shard for s in stages)
    kv = pipeline.kv_held() if isinstance(pipeline, Pipeline) else None
    ring = RingSpec(tuple(range(len(shards))), (), kv)
    per_token: tuple[int, ...] = ()
    if isinstance(pipeline, Pipeline) and stages and isinstance(stages[0], LocalStage | PagedStage):
        config = stages[0].config
        element = kv_element_bytes(config.precision, config.kv_cache_precision)
        per_token = tuple(s.kv_token_bytes(element) for s in stages)
    return FleetLayout(
        deployment, coordinator, shards, (0,) * len(shards), (ring,), kv_token_bytes=per_token
    )


class DeploymentLayout:
    """The layout of whatever the app has deployed: the fleet sessions the deployed pipeline
    runs on (one, or one per replica), else its stages here."""

    def __init__(self, deployed: Callable[[], LLMPipeline | None]) -> None:
        self.deployed = deployed
        self._ids = itertools.count(1)
        self._source: object | None = None
        self._deployment = 0

    def _deployment_of(self, source: object) -> int:
        """A number per deployment: the same while ``source`` is the same object."""
        if source is not self._source:
            self._source, self._deployment = source, next(self._ids)
        return self._deployment

    def __call__(self) -> FleetLayout | None:
        here = coordinator_name()
        llm = self.deployed()
        if llm is None:
            return None
        if llm.sessions:
            return sessions_layout(llm.sessions, self._deployment_of(llm), here, kv_by_session(llm))
        return local_layout(llm.runtime, self._deployment_of(llm), here)


def kv_by_session(llm: LLMPipeline) -> dict[int, KvHeld]:
    """The KV each fleet session's pipeline holds, by ``id(session)``: each replica's, or the
    pipeline's over its one session."""
    from fleetgui.fleet.session.replicas import ReplicatedPipeline

    runtime = llm.runtime
    if isinstance(runtime, ReplicatedPipeline):
        return {id(r.session): r.pipeline.kv_held() for r in runtime.replicas}
    if isinstance(runtime, Pipeline) and len(llm.sessions) == 1:
        return {id(llm.sessions[0]): runtime.kv_held()}
    return {}


class TopologyFeed(QObject):
    """The fleet picture, kept current (see module doc)."""

    updated = Signal()

    def __init__(
        self,
        fleet: WorkerTableModel,
        layout: LayoutSource,
        parent: QObject | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(parent)
        self.fleet = fleet
        self.layout = layout
        self.tracker = TopologyTracker()
        self._clock = clock
        self._topology = Topology()
        self._timer = QTimer(self)
        self._timer.setInterval(UPDATE_INTERVAL_MS)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._update)
        for signal in (fleet.worker_added, fleet.worker_changed, fleet.worker_removed):
            signal.connect(self.refresh)

    def topology(self) -> Topology:
        return self._topology

    def record(self, event: MetricEvent) -> None:
        """A runtime metric event (connect to ``InferenceService.metric``)."""
        self.tracker.record(event, self._clock())
        self.refresh()

    def refresh(self, *_: object) -> None:
        """Read everything again soon (rate-limited)."""
        if not self._timer.isActive():
            self._timer.start()

    def update_now(self) -> Topology:
        """Read everything again now; the picture."""
        self._update()
        return self._topology

    def _update(self) -> None:
        tracker = self.tracker
        tracker.set_rows(self.fleet.rows())
        try:
            tracker.set_layout(self.layout())
        except Exception:  # a deployment being torn down: the next update reads it again
            log.exception("reading the deployment's layout failed")
        topology = tracker.topology(self._clock())
        if topology.generating:
            self._timer.start()  # busy shares change while it generates, and decay after
        if topology != self._topology:
            self._topology = topology
            self.updated.emit()
