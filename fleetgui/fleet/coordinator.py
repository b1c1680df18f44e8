"""The coordinator's side of a fleet: connect workers, deploy an export, build the ring, fail over.

``FleetSession`` owns one link per worker, the stages the coordinator runs itself and the current
:class:`~fleetgui.fleet.ring_route.Ring`. ``pipeline()`` gives a ``Pipeline`` over the fleet. When
a ring member is lost, :meth:`FleetSession.recover` (called by the route) moves its stages (see
:mod:`assignment`), deploys and loads what changed, and sets up a new ring epoch; lost workers are
retried in the background and rejoin as spares when they answer again.

With :meth:`FleetSession.replan_with` (a deployment made from a plan) the session also re-plans
while it runs: when a device's measured stage speed drifts, or after a failover, it asks a
:class:`~fleetgui.fleet.replanner.LiveReplanner` for a better placement and moves the stages
(:meth:`FleetSession.rebalance`) between requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import openvino as ov
import psutil

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest, read_manifest
from fleetgui.fleet.assignment import (
    Assignment,
    Member,
    StageUnit,
    UnplacedStagesError,
    failover_all,
    initial_assignment,
)
from fleetgui.fleet.deploy import ProgressCallback, load_stages
from fleetgui.fleet.fleet_too_small import FleetTooSmallError, fleet_too_small
from fleetgui.fleet.keys import KeyPair
from fleetgui.fleet.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.fleet.protocol import Message, Op
from fleetgui.fleet.replanner import LiveReplanner, PlanContext, ReplanConfig
from fleetgui.fleet.ring_route import Ring, RingRoute
from fleetgui.fleet.ring_setup import CoordinatorStages, link_members
from fleetgui.fleet.session_config import (
    CoordinatorConfig,
    FleetEvent,
    WorkerEndpoint,
    WorkerLinkStatus,
)
from fleetgui.fleet.session_replanning import SessionReplanning
from fleetgui.runtime.draft_source import DraftSource
from fleetgui.runtime.loader import pipeline_over, safe_stage_config
from fleetgui.runtime.metrics import MetricsBus, TransferTiming
from fleetgui.runtime.pipeline import Pipeline

log = logging.getLogger(__name__)


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
        self.links: dict[str, WorkerLink] = {}
        self.order: list[str] = []  # workers in the order they were given: the ring's order
        self.endpoints: dict[str, WorkerEndpoint] = {}
        self.export_dir: Path | None = None
        self.manifest: Manifest | None = None
        self.assignment: Assignment | None = None  # the layout the ring runs (every stage once)
        self._dropped: set[str] = set()  # lost since: what they had loaded is not trusted
        self.ring: Ring | None = None
        self.route: RingRoute | None = None
        self._core = ov.Core()
        self._local = CoordinatorStages(self._core)
        self._epoch = time.time_ns() // 1_000_000 % 2**40  # distinct from earlier sessions'
        self._rejoin: dict[str, asyncio.Task[None]] = {}
        self.failovers: list[str] = []
        self.replanning: SessionReplanning | None = None
        self.rebalances = 0

    # -- workers ------------------------------------------------------------------------------

    def _event(self, name: str, status: str, reason: str = "") -> None:
        if self.on_event is not None:
            self.on_event(name, status, reason)

    async def connect(self, endpoints: Sequence[WorkerEndpoint]) -> None:
        """Open a link to each worker (in parallel); raise naming any that cannot be reached."""
        self.order.extend(e.name for e in endpoints if e.name not in self.order)
        results = await asyncio.gather(*(self._open(e) for e in endpoints), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self.close()
            raise failures[0]

    async def _open(self, endpoint: WorkerEndpoint) -> WorkerLink:
        link = self._new_link(endpoint)
        try:
            await link.open()
        except BaseException:
            await link.close()
            raise
        self.links[endpoint.name] = link
        self.endpoints[endpoint.name] = endpoint
        self._event(endpoint.name, "online")
        return link

    def _new_link(self, endpoint: WorkerEndpoint) -> WorkerLink:
        return WorkerLink(
            endpoint.name,
            endpoint.endpoint,
            endpoint.public_key,
            self.identity,
            self.dispatcher,
            config=self.config.link,
            on_lost=self._on_lost,
        )

    def _on_lost(self, link: WorkerLink, reason: str) -> None:
        self._event(link.name, "lost", reason)
        in_ring = self.ring is not None and link in self.ring.members
        if in_ring:
            self.dispatcher.fail(WorkerLostError(link.name, reason), owner=Dispatcher.RING)
        if link.name not in self._rejoin:
            task = asyncio.get_running_loop().create_task(self._retry(link.name))
            self._rejoin[link.name] = task

    async def _retry(self, name: str) -> None:
        """Try a lost worker again until it answers; then it is a spare."""
        try:
            while True:
                await asyncio.sleep(self.config.rejoin_interval_s)
                old = self.links.get(name)
                if old is not None and not old.lost:
                    return
                try:
                    link = self._new_link(self.endpoints[name])
                    await link.open()
                except (FleetguiError, OSError) as exc:
                    log.debug("worker %s still away: %s", name, exc)
                    with contextlib.suppress(Exception):
                        await link.close()
                    continue
                if old is not None:
                    await old.close()
                self.links[name] = link
                if self.assignment is not None:
                    self.assignment = self.assignment.with_spare(name)
                log.warning("worker %s is back; it rejoins as a spare", name)
                self._event(name, "online", "rejoined")
                return
        finally:
            self._rejoin.pop(name, None)

    # -- deployment ---------------------------------------------------------------------------

    def _units(self) -> list[StageUnit]:
        if self.manifest is None:
            raise FleetguiError("no export deployed")
        return [
            StageUnit(s.index, s.start_layer, s.end_layer, sum(f.size for f in s.files))
            for s in self.manifest.stages
        ]

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
        self.export_dir = Path(export_dir)
        self.manifest = read_manifest(self.export_dir)
        if self.manifest.layout != "stages":
            raise FleetguiError(
                f"{export_dir} is a monolithic export; export the model in stages to run it on "
                "a fleet (fleetgui export MODEL --stages N)"
            )
        if assignment is None:
            names = list(order or [n for n in self.order if n in self.links])
            assignment = initial_assignment(
                self._units(), names, local_stages=self.config.local_stages
            )
        await self._apply(assignment, progress)
        return assignment

    async def _apply(self, assignment: Assignment, progress: ProgressCallback | None) -> None:
        if self.export_dir is None or self.manifest is None:
            raise FleetguiError("no export deployed")
        assignment.check(len(self.manifest.stages), self.links, self.export_dir)
        previous = self.assignment
        await asyncio.gather(
            *(self._load_member(member, previous, progress) for member in assignment.members)
        )
        config = safe_stage_config(self.config.local.stage, self.manifest.weight_format)
        await self._local.load(self.export_dir, self.manifest, assignment.local, config)
        self.assignment = assignment
        self.ring = await self._setup_ring(assignment)
        if self.route is not None:
            self.route.ring = self.ring
        if self.replanner is not None:
            self.replanner.deployed(assignment)

    async def _load_member(
        self, member: Member, previous: Assignment | None, progress: ProgressCallback | None
    ) -> None:
        loaded = previous is not None and previous.indices_of(member.name) == member.indices
        if loaded and member.name not in self._dropped:
            return  # already loaded there
        self._dropped.discard(member.name)
        assert self.export_dir is not None and self.manifest is not None
        self._event(member.name, "loading", f"stages {list(member.indices)}")
        await load_stages(
            self.links[member.name],
            self.export_dir,
            self.manifest,
            member.indices,
            progress,
            threads=self.config.worker_threads,
            precision=self.config.worker_precision,
        )
        self._event(member.name, "busy", f"stages {list(member.indices)}")

    async def _setup_ring(self, assignment: Assignment) -> Ring:
        self._epoch += 1
        members = [self.links[m.name] for m in assignment.members]
        await link_members(members, self._epoch, hub=self.config.topology == "hub")
        log.info(
            "ring epoch %d: coordinator stages %s, then %s",
            self._epoch,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members) or "nothing",
        )
        n_stages = len(self.manifest.stages) if self.manifest is not None else 0
        local = self._local.stages()
        return Ring(self._epoch, local, tuple(members), self.config.topology, n_stages)

    # -- failover -----------------------------------------------------------------------------

    async def recover(self, exc: Exception) -> Ring:
        """Move the stages of every lost ring member and set up a new ring epoch; raise
        :class:`FleetTooSmallError` when what is left cannot run them all."""
        if self.assignment is None:
            raise FleetguiError("nothing deployed") from exc
        lost = [m.name for m in self.assignment.members if self.links[m.name].lost]
        if not lost and isinstance(exc, WorkerLostError) and exc.worker in self.links:
            lost = [exc.worker] if self.links[exc.worker].lost else []
        # self.assignment stays the last layout that ran (complete) until a new one runs, so a
        # retry after a second loss starts from it; whoever dropped out reloads if used again,
        # also when nobody could take its stages and it is back (restarted, nothing loaded)
        self._dropped.update(lost)
        assignment = self._fail_over(self.assignment, lost)
        await self._apply(assignment, None)
        self.failovers.extend(lost)  # once the new layout runs: a failed attempt is retried
        if self.ring is None:
            raise FleetguiError("the ring could not be rebuilt")
        if self.replanning is not None and lost:
            self.replanning.after_loss(lost)
        return self.ring

    def _fail_over(self, assignment: Assignment, lost: Sequence[str]) -> Assignment:
        """``assignment`` without the ``lost`` workers, their stages moved to whoever has the
        memory (this PC too, if local failover is on)."""
        free = {
            n: int(link.last_status.get("free_ram_bytes", 0))
            for n, link in self.links.items()
            if not link.lost
        }
        here = int(psutil.virtual_memory().available) if self.config.local_failover else 0
        try:
            return failover_all(assignment, self._units(), lost, free, coordinator_free_bytes=here)
        except UnplacedStagesError as exc:
            raise self._too_small(lost, exc) from exc

    def _too_small(self, lost: Sequence[str], exc: UnplacedStagesError) -> FleetTooSmallError:
        """The error when what is left cannot run ``exc.stages``, naming every worker lost by
        now, not only ``lost`` (stages moved on earlier may have been lost with their new
        host)."""
        gone = [n for n in self.order if n in self.links and self.links[n].lost] or list(lost)
        left = [n for n in self.order if n in self.links and not self.links[n].lost]
        return fleet_too_small(self._units(), gone, left, exc, self.config.local_failover)

    # -- re-planning --------------------------------------------------------------------------

    def replan_with(self, context: PlanContext, config: ReplanConfig | None = None) -> None:
        """Re-plan during use (see module doc) from what the deployed plan was made of."""
        if self.replanning is not None:
            self.replanning.close()
        self.replanning = SessionReplanning(self, context, config)

    @property
    def replanner(self) -> LiveReplanner | None:
        return self.replanning.replanner if self.replanning is not None else None

    def usable_workers(self) -> list[str]:
        """Connected workers not lost, in the ring's order."""
        return [name for name in self.order if name in self.links and not self.links[name].lost]

    async def rebalance(self, assignment: Assignment) -> None:
        """Move to ``assignment`` between requests: load what changed, set up a new ring
        epoch (streams replay their tokens into it) and free the workers that left the ring."""
        if self.assignment is None:
            raise FleetguiError("nothing deployed")
        n_stages = len(self.manifest.stages) if self.manifest else 0
        assignment.check(n_stages, self.links, self.export_dir)
        before = {m.name for m in self.assignment.members}

        async def build() -> Ring:
            await self._apply(assignment, None)
            assert self.ring is not None
            return self.ring

        if self.route is not None:
            await self.route.switch(build)
        else:
            await build()
        self.rebalances += 1
        for name in before - {m.name for m in assignment.members}:
            link = self.links.get(name)
            if link is None or link.lost:
                continue
            try:
                await link.call(Message(Op.UNLOAD))
            except FleetguiError as exc:
                log.warning("worker %s did not unload: %s", name, exc)
            self._event(name, "online", "spare after re-planning")

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
        stages = self.assignment.indices_of(name) if self.assignment else ()
        return WorkerLinkStatus.of(self.links[name], stages)

    async def close(self, *, unload: bool = False, timeout_s: float = 5.0) -> None:
        """Close every link. Workers keep running; with ``unload`` they first drop the stages
        this session loaded (else they keep them, and a later deployment reuses them)."""
        for task in list(self._rejoin.values()):
            task.cancel()
        if self.replanning is not None:
            self.replanning.close()
            self.replanning = None
        if unload:
            for link in self.links.values():
                if link.lost:
                    continue
                try:
                    await link.call(Message(Op.UNLOAD), timeout_s=timeout_s)
                except FleetguiError as exc:
                    log.warning("worker %s did not unload: %s", link.name, exc)
        for link in list(self.links.values()):
            await link.close()
        self.links.clear()
