"""What a coordinator session runs: the deployed export, the layout of its stages and the ring
epoch set up for that layout. The deployment owns the ring in force: the route asks it at each
request (``current_ring``) and shares its :class:`~fleetgui.fleet.ring.route_gate.RouteGate`.

A layout (:class:`~fleetgui.fleet.placement.assignment.Assignment`) is applied by loading only
what changed (a worker that still has its stages loaded keeps them, unless it was lost since),
compiling the coordinator's own stages and setting up a new ring epoch. Moving to another
layout while the fleet serves (:meth:`SessionDeployment.rebalance`) waits for the requests in
flight and frees the workers that leave the ring.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import openvino as ov

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest, read_manifest
from fleetgui.fleet.placement.assignment import (
    Assignment,
    Member,
    StageToPlace,
    initial_assignment,
)
from fleetgui.fleet.ring.epoch_setup import CoordinatorStages, link_members
from fleetgui.fleet.ring.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.fleet.ring.route import Ring
from fleetgui.fleet.ring.route_gate import RouteGate
from fleetgui.fleet.ring.shard_push import ProgressCallback, load_stages
from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.fleet.session.config import CoordinatorConfig, LinkReason, LinkState
from fleetgui.fleet.session.status import StatusReporter
from fleetgui.fleet.session.workers import SessionWorkers
from fleetgui.net.protocol import Message, Op
from fleetgui.runtime.loader import safe_stage_config
from fleetgui.runtime.stage_factory import with_paging_of

log = logging.getLogger(__name__)


class SessionDeployment:
    """The export, layout and ring of one session (see module doc). ``on_applied`` is told of
    every layout once its ring runs (the session's re-planning watches them)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        workers: SessionWorkers,
        dispatcher: Dispatcher,
        reporter: StatusReporter,
        core: ov.Core,
        *,
        on_applied: Callable[[Assignment], None] | None = None,
    ) -> None:
        self.config = config
        self.workers = workers
        self.dispatcher = dispatcher
        self.reporter = reporter
        self.on_applied = on_applied
        self.wiring: Wiring = config.wiring  # of the next ring set up (``rewire`` changes it)
        self.export_dir: Path | None = None
        self.manifest: Manifest | None = None
        self.assignment: Assignment | None = None  # the layout the ring runs (every stage once)
        self.ring: Ring | None = None  # the ring in force
        self.gate = RouteGate()  # moving to another ring waits for the requests in flight
        self.rebalances = 0  # how many times it moved to another layout (``rebalance``)
        self._dropped: set[str] = set()  # lost since: what they had loaded is not trusted
        self._local = CoordinatorStages(core)
        self._epoch = time.time_ns() // 1_000_000 % 2**40  # distinct from earlier sessions'

    def current_ring(self) -> Ring:
        """The ring in force (what a route runs requests through)."""
        if self.ring is None:
            raise FleetguiError("deploy an export before running requests")
        return self.ring

    def units(self) -> list[StageToPlace]:
        """The deployed export's stages, as the assignment functions place them."""
        if self.manifest is None:
            raise FleetguiError("no export deployed")
        return StageToPlace.of_manifest(self.manifest)

    @property
    def paged(self) -> bool:
        """Whether the workers compile the deployed export's stages with paged attention."""
        if self.manifest is None:
            return False
        return with_paging_of(self.config.local.stage, self.manifest.config).paged

    async def deploy(
        self,
        export_dir: Path,
        order: Sequence[str] | None,
        assignment: Assignment | None,
        progress: ProgressCallback | None,
    ) -> Assignment:
        """:meth:`FleetSession.deploy`: read the export, place its stages unless
        ``assignment`` is given, and apply the layout."""
        self.export_dir = Path(export_dir)
        self.manifest = read_manifest(self.export_dir)
        if self.manifest.layout != "stages":
            raise FleetguiError(
                f"{export_dir} is a monolithic export; export the model in stages to run it on "
                "a fleet (fleetgui export MODEL --stages N)"
            )
        if assignment is None:
            names = list(order or self.workers.connected())
            assignment = initial_assignment(
                self.units(), names, local_stages=self.config.local_stages
            )
        await self.apply(assignment, progress)
        return assignment

    def add_spare(self, name: str) -> None:
        """A worker that is back joins the layout as a spare (if anything is deployed)."""
        if self.assignment is not None:
            self.assignment = self.assignment.with_spare(name)

    def worker_lost(self, link: WorkerLink, reason: str) -> None:
        """``link``'s worker was lost: if it is a member of the ring in force, the requests
        waiting on the ring fail (the route then asks the session to fail over)."""
        if self.ring is not None and link in self.ring.members:
            error = WorkerLostError(link.name, reason)
            self.dispatcher.fail(error, owner=Dispatcher.RING)

    def distrust(self, names: Sequence[str]) -> None:
        """``names`` were lost: whatever they had loaded is loaded again if they are used."""
        self._dropped.update(names)

    async def apply(self, assignment: Assignment, progress: ProgressCallback | None) -> None:
        """Load what changed for ``assignment`` and set up a new ring epoch for it."""
        if self.export_dir is None or self.manifest is None:
            raise FleetguiError("no export deployed")
        assignment.check(len(self.manifest.stages), self.workers.links, self.export_dir)
        previous = self.assignment
        await asyncio.gather(
            *(self._load_member(member, previous, progress) for member in assignment.members)
        )
        config = safe_stage_config(self.config.local.stage, self.manifest.weight_format)
        config = with_paging_of(config, self.manifest.config)
        await self._local.load(self.export_dir, self.manifest, assignment.local, config)
        self.assignment = assignment
        self.ring = await self._setup_ring(assignment)
        if self.on_applied is not None:
            self.on_applied(assignment)

    async def _load_member(
        self, member: Member, previous: Assignment | None, progress: ProgressCallback | None
    ) -> None:
        loaded = previous is not None and previous.indices_of(member.name) == member.indices
        if loaded and member.name not in self._dropped:
            return  # already loaded there
        self._dropped.discard(member.name)
        assert self.export_dir is not None and self.manifest is not None
        self.reporter.event(member.name, LinkState.LOADING, f"stages {list(member.indices)}")
        await load_stages(
            self.workers.links[member.name],
            self.export_dir,
            self.manifest,
            member.indices,
            progress,
            threads=self.config.worker_threads,
            precision=self.config.worker_precision,
            paged=self.paged,
        )
        self.reporter.event(member.name, LinkState.BUSY, f"stages {list(member.indices)}")

    async def _setup_ring(self, assignment: Assignment) -> Ring:
        self._epoch += 1
        members = [self.workers.links[m.name] for m in assignment.members]
        await link_members(members, self._epoch, hub=self.wiring is Wiring.HUB)
        log.info(
            "ring epoch %d: coordinator stages %s, then %s",
            self._epoch,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members) or "nothing",
        )
        n_stages = len(self.manifest.stages) if self.manifest is not None else 0
        local = self._local.stages()
        return Ring(self._epoch, local, tuple(members), self.wiring, n_stages)

    async def rebalance(self, assignment: Assignment) -> None:
        """:meth:`FleetSession.rebalance`: move to ``assignment`` once no request is in flight
        and free the workers that left the ring."""
        if self.assignment is None:
            raise FleetguiError("nothing deployed")
        n_stages = len(self.manifest.stages) if self.manifest else 0
        assignment.check(n_stages, self.workers.links, self.export_dir)
        before = {m.name for m in self.assignment.members}
        async with self.gate.exclusive():
            await self.apply(assignment, None)
        self.rebalances += 1
        for name in before - {m.name for m in assignment.members}:
            link = self.workers.links.get(name)
            if link is None or link.lost:
                continue
            try:
                await link.call(Message(Op.UNLOAD))
            except FleetguiError as exc:
                log.warning("worker %s did not unload: %s", name, exc)
            self.reporter.event(name, LinkState.ONLINE, LinkReason.SPARE_AFTER_REPLANNING)

    async def rewire(self, wiring: Wiring) -> None:
        """Form the layout in force into ``wiring`` (a ring or a hub: ``fleetgui bench``
        compares them): a :meth:`rebalance` to the same layout, its ring set up anew."""
        if self.assignment is None:
            raise FleetguiError("nothing deployed")
        self.wiring = wiring
        await self.rebalance(self.assignment)
