"""What a coordinator session runs: the deployed export, the layout of its stages and the ring
epoch set up for that layout.

A layout (:class:`~fleetgui.fleet.assignment.Assignment`) is applied by loading only what
changed (a worker that still has its stages loaded keeps them, unless it was lost since),
compiling the coordinator's own stages and setting up a new ring epoch. Moving to another
layout while the fleet serves (:meth:`SessionDeployment.rebalance`) waits for the requests in
flight and frees the workers that leave the ring.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import openvino as ov

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest, read_manifest
from fleetgui.fleet.assignment import Assignment, Member, StageUnit, initial_assignment
from fleetgui.fleet.deploy import ProgressCallback, load_stages
from fleetgui.fleet.ring_route import Ring
from fleetgui.fleet.ring_setup import CoordinatorStages, link_members
from fleetgui.fleet.ring_topology import Topology
from fleetgui.fleet.session_config import LinkReason, LinkState
from fleetgui.net.protocol import Message, Op
from fleetgui.runtime.loader import safe_stage_config

if TYPE_CHECKING:
    from fleetgui.fleet.coordinator import FleetSession

log = logging.getLogger(__name__)


class SessionDeployment:
    """The export, layout and ring of one session (see module doc)."""

    def __init__(self, session: FleetSession, core: ov.Core) -> None:
        self.session = session
        self.export_dir: Path | None = None
        self.manifest: Manifest | None = None
        self.assignment: Assignment | None = None  # the layout the ring runs (every stage once)
        self.ring: Ring | None = None
        self.rebalances = 0
        self._dropped: set[str] = set()  # lost since: what they had loaded is not trusted
        self._local = CoordinatorStages(core)
        self._epoch = time.time_ns() // 1_000_000 % 2**40  # distinct from earlier sessions'

    def units(self) -> list[StageUnit]:
        """The deployed export's stages, as the assignment functions place them."""
        if self.manifest is None:
            raise FleetguiError("no export deployed")
        stages = zip(self.manifest.stages, self.manifest.shards, strict=True)
        return [StageUnit(s.index, shard, sum(f.size for f in s.files)) for s, shard in stages]

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
            workers = self.session.workers
            names = list(order or [n for n in workers.order if n in workers.links])
            assignment = initial_assignment(
                self.units(), names, local_stages=self.session.config.local_stages
            )
        await self.apply(assignment, progress)
        return assignment

    def add_spare(self, name: str) -> None:
        """A worker that is back joins the layout as a spare (if anything is deployed)."""
        if self.assignment is not None:
            self.assignment = self.assignment.with_spare(name)

    def distrust(self, names: Sequence[str]) -> None:
        """``names`` were lost: whatever they had loaded is loaded again if they are used."""
        self._dropped.update(names)

    async def apply(self, assignment: Assignment, progress: ProgressCallback | None) -> None:
        """Load what changed for ``assignment`` and set up a new ring epoch for it."""
        if self.export_dir is None or self.manifest is None:
            raise FleetguiError("no export deployed")
        session = self.session
        assignment.check(len(self.manifest.stages), session.links, self.export_dir)
        previous = self.assignment
        await asyncio.gather(
            *(self._load_member(member, previous, progress) for member in assignment.members)
        )
        config = safe_stage_config(session.config.local.stage, self.manifest.weight_format)
        await self._local.load(self.export_dir, self.manifest, assignment.local, config)
        self.assignment = assignment
        self.ring = await self._setup_ring(assignment)
        if session.route is not None:
            session.route.ring = self.ring
        if session.replanner is not None:
            session.replanner.deployed(assignment)

    async def _load_member(
        self, member: Member, previous: Assignment | None, progress: ProgressCallback | None
    ) -> None:
        loaded = previous is not None and previous.indices_of(member.name) == member.indices
        if loaded and member.name not in self._dropped:
            return  # already loaded there
        self._dropped.discard(member.name)
        assert self.export_dir is not None and self.manifest is not None
        session = self.session
        session.reporter.event(member.name, LinkState.LOADING, f"stages {list(member.indices)}")
        await load_stages(
            session.links[member.name],
            self.export_dir,
            self.manifest,
            member.indices,
            progress,
            threads=session.config.worker_threads,
            precision=session.config.worker_precision,
        )
        session.reporter.event(member.name, LinkState.BUSY, f"stages {list(member.indices)}")

    async def _setup_ring(self, assignment: Assignment) -> Ring:
        self._epoch += 1
        members = [self.session.links[m.name] for m in assignment.members]
        await link_members(members, self._epoch, hub=self.session.config.topology is Topology.HUB)
        log.info(
            "ring epoch %d: coordinator stages %s, then %s",
            self._epoch,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members) or "nothing",
        )
        n_stages = len(self.manifest.stages) if self.manifest is not None else 0
        local = self._local.stages()
        return Ring(self._epoch, local, tuple(members), self.session.config.topology, n_stages)

    async def rebalance(self, assignment: Assignment) -> None:
        """:meth:`FleetSession.rebalance`: move to ``assignment`` once no request is in flight
        and free the workers that left the ring."""
        if self.assignment is None:
            raise FleetguiError("nothing deployed")
        session = self.session
        n_stages = len(self.manifest.stages) if self.manifest else 0
        assignment.check(n_stages, session.links, self.export_dir)
        before = {m.name for m in self.assignment.members}

        async def build() -> Ring:
            await self.apply(assignment, None)
            assert self.ring is not None
            return self.ring

        if session.route is not None:
            await session.route.switch(build)
        else:
            await build()
        self.rebalances += 1
        for name in before - {m.name for m in assignment.members}:
            link = session.links.get(name)
            if link is None or link.lost:
                continue
            try:
                await link.call(Message(Op.UNLOAD))
            except FleetguiError as exc:
                log.warning("worker %s did not unload: %s", name, exc)
            session.reporter.event(name, LinkState.ONLINE, LinkReason.SPARE_AFTER_REPLANNING)
