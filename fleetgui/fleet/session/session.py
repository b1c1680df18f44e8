"""The coordinator's side of a fleet: connect workers, deploy an export, build the ring, fail over.

``FleetSession`` is what callers hold; it wires together the parts that do the work, handing
each, in its constructor, only the collaborators it uses (never the session itself):

* ``workers`` (:mod:`~fleetgui.fleet.session.workers`): one link per worker (``links``, in the
  ring's ``order``; ``endpoints``); lost workers are retried in the background and rejoin as
  spares when they answer again. Given the identity, the dispatcher, the link config, the
  status reporter and two callbacks: a lost worker goes to the deployment (which fails the
  ring's requests if it was a member), a rejoined one becomes the deployment's spare.
* ``deployment`` (:mod:`~fleetgui.fleet.session.deployment`): the deployed ``export_dir`` and
  ``manifest``, the layout of its stages (``assignment``,
  :mod:`~fleetgui.fleet.placement.assignment`), the stages the coordinator runs itself and the
  ring in force (``ring``): its only owner; the route asks it at each request. Given the
  config, the workers, the dispatcher, the status reporter and ``on_applied`` (each layout that
  runs, for re-planning). ``rebalances`` counts its moves to other layouts.
* ``failover`` (:mod:`~fleetgui.fleet.session.failover`): when a ring member is lost,
  :meth:`FleetSession.recover` (called by the route) moves its stages, loads what changed and
  sets up a new ring epoch; ``failovers`` names who was lost. Given the workers, the deployment,
  whether this PC may take stages and ``on_failed_over`` (for re-planning).
* ``replanning`` (:mod:`~fleetgui.fleet.replanning.watcher`): with :meth:`replan_with` (a
  deployment made from a plan) the session also re-plans while it runs: when a device's
  measured stage speed drifts, or after a failover, its ``replanner`` may propose a better
  placement, which :meth:`rebalance` moves to between requests. Given the metrics, the layout
  in force, the usable workers and ``rebalance``.
* ``reporter`` (:mod:`~fleetgui.fleet.session.status`): tells ``on_event`` each worker's state
  as it changes (``reporter.on_event`` may be replaced while the session runs).

``pipeline()`` gives a ``Pipeline`` over the fleet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import openvino as ov
import psutil

from fleetgui.errors import FleetguiError
from fleetgui.fleet.placement.assignment import Assignment
from fleetgui.fleet.replanning.live_replanner import PlanContext, ReplanConfig
from fleetgui.fleet.replanning.watcher import ReplanWatcher
from fleetgui.fleet.ring.link import Dispatcher, WorkerEndpoint, WorkerLink
from fleetgui.fleet.ring.route import Ring, RingRoute
from fleetgui.fleet.ring.shard_push import ProgressCallback
from fleetgui.fleet.session.config import CoordinatorConfig, FleetEvent, WorkerLinkStatus
from fleetgui.fleet.session.deployment import SessionDeployment
from fleetgui.fleet.session.failover import SessionFailover
from fleetgui.fleet.session.status import StatusReporter
from fleetgui.fleet.session.workers import SessionWorkers
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.draft_source import DraftSource
from fleetgui.runtime.kv_budget import KvHolder
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
        self.dispatcher = Dispatcher()
        self.route: RingRoute | None = None  # of the last pipeline()
        self._core = ov.Core()
        self.reporter = StatusReporter(on_event)
        self.workers = SessionWorkers(
            identity,
            self.dispatcher,
            self.config.link,
            self.reporter,
            rejoin_interval_s=self.config.rejoin_interval_s,
            on_lost=self._worker_lost,
            on_rejoined=self._worker_rejoined,
        )
        self.deployment = SessionDeployment(
            self.config,
            self.workers,
            self.dispatcher,
            self.reporter,
            self._core,
            on_applied=self._layout_applied,
        )
        self.failover = SessionFailover(
            self.workers,
            self.deployment,
            local_failover=self.config.local_failover,
            on_failed_over=self._failed_over,
        )
        self.replanning: ReplanWatcher | None = None

    # -- how the parts hear of each other -----------------------------------------------------

    def _worker_lost(self, link: WorkerLink, reason: str) -> None:
        self.deployment.worker_lost(link, reason)

    def _worker_rejoined(self, name: str) -> None:
        self.deployment.add_spare(name)

    def _layout_applied(self, assignment: Assignment) -> None:
        if self.replanning is not None:
            self.replanning.deployed(assignment)

    def _failed_over(self, lost: list[str]) -> None:
        if self.replanning is not None:
            self.replanning.after_loss(lost)

    # -- workers and deployment ---------------------------------------------------------------

    async def connect(self, endpoints: Sequence[WorkerEndpoint]) -> None:
        """Open a link to each worker (in parallel); raise naming any that cannot be reached,
        having closed every link, so the session is connected to all of them or to none."""
        failures = await self.workers.connect(endpoints)
        if failures:
            await self.close()
            raise failures[0]

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
        :class:`~fleetgui.fleet.placement.fleet_too_small.FleetTooSmallError` when what is
        left cannot run them all."""
        return await self.failover.recover(exc)

    # -- re-planning --------------------------------------------------------------------------

    def replan_with(self, context: PlanContext, config: ReplanConfig | None = None) -> None:
        """Re-plan during use (see module doc) from what the deployed plan was made of."""
        if self.replanning is not None:
            self.replanning.close()
        self.replanning = ReplanWatcher(
            context,
            config,
            metrics=self.metrics,
            layout=self._layout,
            usable=self.workers.usable,
            rebalance=self.rebalance,
        )

    def _layout(self) -> Assignment | None:
        return self.deployment.assignment

    async def rebalance(self, assignment: Assignment) -> None:
        """Move to ``assignment`` between requests: load what changed, set up a new ring
        epoch (streams replay their tokens into it) and free the workers that left the ring."""
        await self.deployment.rebalance(assignment)

    # -- the pipeline -------------------------------------------------------------------------

    def pipeline(self, *, draft_dir: DraftSource | None = None) -> Pipeline:
        """A ``Pipeline`` over the deployed fleet, with an optional local draft model (or
        ``"ngram"``: the draft-free drafter)."""
        deployment = self.deployment
        export_dir, manifest = deployment.export_dir, deployment.manifest
        if deployment.ring is None or export_dir is None or manifest is None:
            raise FleetguiError("deploy an export before asking for a pipeline")

        def on_hop(stream_id: int, ms: float, nbytes: int = 0) -> None:
            self.metrics.emit(TransferTiming(stream_id, 0, ms, nbytes))

        self.route = RingRoute(
            deployment.current_ring,
            deployment.gate,
            self.dispatcher,
            recover=self.recover,
            config=self.config.route,
            on_hop=on_hop,
        )
        return pipeline_over(
            self.route,
            export_dir,
            manifest,
            self.config.local,
            self._core,
            draft_dir=draft_dir,
            metrics=self.metrics,
            holders=self._kv_holders(),
        )

    def _kv_holders(self) -> list[KvHolder]:
        """This PC and each ring member, with the layers it holds and the free memory it
        reported last: what the idle conversations' KV budget is made of."""
        deployment = self.deployment
        assignment, manifest = deployment.assignment, deployment.manifest
        if assignment is None or manifest is None:
            return []

        def layers(indices: tuple[int, ...]) -> int:
            return sum(manifest.shard(i).n_stage_layers for i in indices)

        free_here = int(psutil.virtual_memory().available)
        holders = [KvHolder("this PC", layers(assignment.local), free_here)]
        for member in assignment.members:
            link = self.workers.links.get(member.name)
            free = link.last_status.get("free_ram_bytes") if link is not None else None
            holders.append(KvHolder(member.name, layers(member.indices), free and int(free)))
        return holders

    async def open_pipeline(self, *, draft_dir: DraftSource | None = None) -> Pipeline:
        """:meth:`pipeline`, with the tokenizer and draft loaded in a thread."""
        return await asyncio.to_thread(self.pipeline, draft_dir=draft_dir)

    def worker_status(self, name: str) -> WorkerLinkStatus:
        """What the coordinator knows of a connected worker right now (``KeyError`` for a
        worker the session has no link to)."""
        assignment = self.deployment.assignment
        stages = assignment.indices_of(name) if assignment else ()
        return WorkerLinkStatus.of(self.workers.links[name], stages)

    async def close(self, *, unload: bool = False, timeout_s: float = 5.0) -> None:
        """Close every link. Workers keep running; with ``unload`` they first drop the stages
        this session loaded (else they keep them, and a later deployment reuses them)."""
        self.workers.stop_retrying()
        if self.replanning is not None:
            self.replanning.close()
            self.replanning = None
        await self.workers.close(unload=unload, timeout_s=timeout_s)
