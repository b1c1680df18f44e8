"""The coordinator's side of a fleet: connect workers, deploy an export, build the ring, fail over.

``FleetSession`` is what callers hold; it wires together the parts that do the work:

* :mod:`~fleetgui.fleet.session_workers`: one link per worker; lost workers are retried in the
  background and rejoin as spares when they answer again.
* :mod:`~fleetgui.fleet.session_deployment`: the deployed export, the layout of its stages
  (:mod:`~fleetgui.fleet.assignment`), the stages the coordinator runs itself and the current
  :class:`~fleetgui.fleet.ring_route.Ring`.
* :mod:`~fleetgui.fleet.session_failover`: when a ring member is lost, :meth:`FleetSession.recover`
  (called by the route) moves its stages, loads what changed and sets up a new ring epoch.
* :mod:`~fleetgui.fleet.session_replanning`: with :meth:`FleetSession.replan_with` (a deployment
  made from a plan) the session also re-plans while it runs: when a device's measured stage
  speed drifts, or after a failover, a :class:`~fleetgui.fleet.replanner.LiveReplanner` may
  propose a better placement, which :meth:`FleetSession.rebalance` moves to between requests.
* :mod:`~fleetgui.fleet.session_status`: the events and status the session reports per worker.

``pipeline()`` gives a ``Pipeline`` over the fleet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import openvino as ov

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest
from fleetgui.fleet.assignment import Assignment
from fleetgui.fleet.deploy import ProgressCallback
from fleetgui.fleet.link import Dispatcher, WorkerLink
from fleetgui.fleet.replanner import LiveReplanner, PlanContext, ReplanConfig
from fleetgui.fleet.ring_route import Ring, RingRoute
from fleetgui.fleet.session_config import (
    CoordinatorConfig,
    FleetEvent,
    WorkerEndpoint,
    WorkerLinkStatus,
)
from fleetgui.fleet.session_deployment import SessionDeployment
from fleetgui.fleet.session_failover import SessionFailover
from fleetgui.fleet.session_replanning import SessionReplanning
from fleetgui.fleet.session_status import StatusReporter
from fleetgui.fleet.session_workers import SessionWorkers
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.draft_source import DraftSource
from fleetgui.runtime.loader import pipeline_over
from fleetgui.runtime.metrics import MetricsBus, TransferTiming
from fleetgui.runtime.pipeline import Pipeline


class FleetSession:
    """A coordinator's fleet (see module doc)."""

    def __init__(
        self,
        identity: KeyPair,
        config: CoordinatorConfig | None = None,
        *,
        metrics: MetricsBus | None = None,
        on_event: FleetEvent | None = None,
    ) -> None:
        self.identity = identity
        self.config = config or CoordinatorConfig()
        self.metrics = metrics or MetricsBus()
        self.on_event = on_event
        self.dispatcher = Dispatcher()
        self.route: RingRoute | None = None
        self._core = ov.Core()
        self.reporter = StatusReporter(self)
        self.workers = SessionWorkers(self)
        self.deployment = SessionDeployment(self, self._core)
        self.failover = SessionFailover(self)
        self.replanning: SessionReplanning | None = None

    # -- what the parts hold, as callers read it ----------------------------------------------

    @property
    def links(self) -> dict[str, WorkerLink]:
        return self.workers.links

    @property
    def order(self) -> list[str]:
        """Workers in the order they were given: the ring's order."""
        return self.workers.order

    @property
    def endpoints(self) -> dict[str, WorkerEndpoint]:
        return self.workers.endpoints

    @property
    def export_dir(self) -> Path | None:
        return self.deployment.export_dir

    @property
    def manifest(self) -> Manifest | None:
        return self.deployment.manifest

    @property
    def assignment(self) -> Assignment | None:
        """The layout the ring runs (every stage once)."""
        return self.deployment.assignment

    @property
    def ring(self) -> Ring | None:
        return self.deployment.ring

    @property
    def failovers(self) -> list[str]:
        """Every worker whose stages were moved by a failover, once per loss."""
        return self.failover.failovers

    @property
    def rebalances(self) -> int:
        """How many times the session moved to another layout (:meth:`rebalance`)."""
        return self.deployment.rebalances

    # -- workers and deployment ---------------------------------------------------------------

    async def connect(self, endpoints: Sequence[WorkerEndpoint]) -> None:
        """Open a link to each worker (in parallel); raise naming any that cannot be reached."""
        await self.workers.connect(endpoints)

    def usable_workers(self) -> list[str]:
        """Connected workers not lost, in the ring's order."""
        return self.workers.usable()

    async def deploy(
        self,
        export_dir: Path,
        *,
        order: Sequence[str] | None = None,
        assignment: Assignment | None = None,
        progress: ProgressCallback | None = None,
    ) -> Assignment:
        """Assign the export's stages (coordinator first, then ``order`` or the connected
        workers), push and load them, and set up the ring. An explicit ``assignment`` (e.g. from
        the planner's preview) is deployed as given instead."""
        return await self.deployment.deploy(export_dir, order, assignment, progress)

    async def recover(self, exc: Exception) -> Ring:
        """Move the stages of every lost ring member and set up a new ring epoch; raise
        :class:`~fleetgui.fleet.fleet_too_small.FleetTooSmallError` when what is left cannot
        run them all."""
        return await self.failover.recover(exc)

    # -- re-planning --------------------------------------------------------------------------

    def replan_with(self, context: PlanContext, config: ReplanConfig | None = None) -> None:
        """Re-plan during use (see module doc) from what the deployed plan was made of."""
        if self.replanning is not None:
            self.replanning.close()
        self.replanning = SessionReplanning(self, context, config)

    @property
    def replanner(self) -> LiveReplanner | None:
        return self.replanning.replanner if self.replanning is not None else None

    async def rebalance(self, assignment: Assignment) -> None:
        """Move to ``assignment`` between requests: load what changed, set up a new ring
        epoch (streams replay their tokens into it) and free the workers that left the ring."""
        await self.deployment.rebalance(assignment)

    # -- the pipeline -------------------------------------------------------------------------

    def pipeline(self, *, draft_dir: DraftSource | None = None) -> Pipeline:
        """A ``Pipeline`` over the deployed fleet, with an optional local draft model (or
        ``"ngram"``: the draft-free drafter)."""
        if self.ring is None or self.export_dir is None or self.manifest is None:
            raise FleetguiError("deploy an export before asking for a pipeline")

        def on_hop(stream_id: int, ms: float, nbytes: int = 0) -> None:
            self.metrics.emit(TransferTiming(stream_id, 0, ms, nbytes))

        self.route = RingRoute(
            self.ring,
            self.dispatcher,
            recover=self.recover,
            config=self.config.route,
            on_hop=on_hop,
        )
        return pipeline_over(
            self.route,
            self.export_dir,
            self.manifest,
            self.config.local,
            self._core,
            draft_dir=draft_dir,
            metrics=self.metrics,
        )

    async def open_pipeline(self, *, draft_dir: DraftSource | None = None) -> Pipeline:
        """:meth:`pipeline`, with the tokenizer and draft loaded in a thread."""
        return await asyncio.to_thread(self.pipeline, draft_dir=draft_dir)

    def worker_status(self, name: str) -> WorkerLinkStatus:
        """What the coordinator knows of a connected worker right now."""
        return self.reporter.worker(name)

    async def close(self, *, unload: bool = False, timeout_s: float = 5.0) -> None:
        """Close every link. Workers keep running; with ``unload`` they first drop the stages
        this session loaded (else they keep them, and a later deployment reuses them)."""
        self.workers.stop_retrying()
        if self.replanning is not None:
            self.replanning.close()
            self.replanning = None
        await self.workers.close(unload=unload, timeout_s=timeout_s)
