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
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    need_bytes,
    size_text,
    stages_text,
)
from fleetgui.fleet.deploy import ProgressCallback, load_stages
from fleetgui.fleet.keys import KeyPair
from fleetgui.fleet.link import Dispatcher, LinkConfig, WorkerLink, WorkerLostError
from fleetgui.fleet.protocol import Message, Op
from fleetgui.fleet.replanner import LiveReplanner, PlanContext, ReplanConfig
from fleetgui.fleet.ring_route import Ring, RingRoute, RouteConfig
from fleetgui.planner.replan import SpeedDrift
from fleetgui.runtime.draft_source import DraftSource
from fleetgui.runtime.loader import (
    LocalPipelineConfig,
    context_limit_of,
    load_draft,
    safe_stage_config,
)
from fleetgui.runtime.metrics import MetricEvent, MetricsBus, StageTiming, TransferTiming
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerEndpoint:
    """A worker to connect to: its name, ``tcp://host:port`` and pinned public key."""

    name: str
    endpoint: str
    public_key: str


@dataclass(frozen=True)
class CoordinatorConfig:
    """How the coordinator runs a fleet."""

    link: LinkConfig = field(default_factory=LinkConfig)
    route: RouteConfig = field(default_factory=RouteConfig)
    topology: str = "ring"  # ring | hub (hub only to compare against)
    local_stages: int = 1  # stages the coordinator runs itself
    local: LocalPipelineConfig = field(default_factory=LocalPipelineConfig)
    worker_threads: int = 0  # asked of workers; a worker's own --threads wins
    worker_precision: str = "auto"
    rejoin_interval_s: float = 2.0  # how often a lost worker is tried again
    # when no worker left can take a lost worker's stages, this PC runs them if its free memory
    # allows; off, the generation ends with an error instead (a PC that must stay responsive)
    local_failover: bool = True


@dataclass(frozen=True)
class WorkerLinkStatus:
    """A connected worker as the coordinator sees it."""

    name: str
    lost: str | None  # why it was lost, or None
    rtt_ms: float | None  # last heartbeat round trip
    free_ram_bytes: int | None  # from its last heartbeat
    stages: tuple[int, ...]  # the export stages it runs
    last_seen: float  # time.monotonic() of its last message


FleetEvent = Callable[[str, str, str], None]  # (worker name, status, reason)


class FleetTooSmallError(FleetguiError):
    """Workers were lost and what is left cannot run every stage: the generation ends here
    rather than run an incomplete ring. The message names who was lost, which stages have no
    place and what to do."""

    def __init__(self, message: str, lost: Sequence[str], stages: Sequence[int]) -> None:
        super().__init__(message)
        self.lost = tuple(lost)  # every worker of the session that is lost now, in ring order
        self.stages = tuple(stages)  # the stages nobody left can run


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


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
        self._local: dict[int, LocalStage] = {}
        self._core = ov.Core()
        self._epoch = time.time_ns() // 1_000_000 % 2**40  # distinct from earlier sessions'
        self._rejoin: dict[str, asyncio.Task[None]] = {}
        self.failovers: list[str] = []
        self.replanner: LiveReplanner | None = None
        self._replanning: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
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
                if self.assignment is not None and name not in self.assignment.spares:
                    names = {m.name for m in self.assignment.members}
                    if name not in names:
                        self.assignment = Assignment(
                            self.assignment.local,
                            self.assignment.members,
                            (*self.assignment.spares, name),
                        )
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

    def _check(self, assignment: Assignment, n_stages: int) -> None:
        """Every layout the ring runs must run every stage once, in ring order, on connected
        workers: after a double failure one that lacked the lost stage ran stage 0 straight
        into stage 2 and printed garbage."""
        indices = [*assignment.local, *(i for m in assignment.members for i in m.indices)]
        if indices != list(range(n_stages)) or any(not m.indices for m in assignment.members):
            raise FleetguiError(
                f"the assignment runs stages {indices}, but {self.export_dir} has {n_stages}: "
                "each must run once, in order"
            )
        unknown = [m.name for m in assignment.members if m.name not in self.links]
        if unknown:
            raise FleetguiError(
                f"the assignment uses {', '.join(unknown)}, which this session is not connected "
                "to: connect them first"
            )

    async def _apply(self, assignment: Assignment, progress: ProgressCallback | None) -> None:
        if self.export_dir is None or self.manifest is None:
            raise FleetguiError("no export deployed")
        self._check(assignment, len(self.manifest.stages))
        previous = self.assignment
        await asyncio.gather(
            *(self._load_member(member, previous, progress) for member in assignment.members)
        )
        await self._load_local(assignment.local)
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

    async def _load_local(self, indices: Sequence[int]) -> None:
        """Compile the coordinator's stages that are not compiled yet, in a thread (the event
        loop may be the GUI's)."""
        assert self.export_dir is not None and self.manifest is not None
        export_dir, manifest = self.export_dir, self.manifest
        config = safe_stage_config(self.config.local.stage, manifest.weight_format)
        for index in list(self._local):
            if index not in indices:
                del self._local[index]

        def compile_stage(index: int) -> LocalStage:
            entry = manifest.stages[index]
            return LocalStage(
                index,
                manifest.shard(index),
                [export_dir / part for part in entry.model_files],
                config,
                core=self._core,
            )

        for index in indices:
            if index not in self._local:
                self._local[index] = await asyncio.to_thread(compile_stage, index)

    async def _setup_ring(self, assignment: Assignment) -> Ring:
        self._epoch += 1
        members = [self.links[m.name] for m in assignment.members]
        hub = self.config.topology == "hub"
        for position in range(len(members) - 1, -1, -1):
            link = members[position]
            nxt = None
            if not hub and position + 1 < len(members):
                after = members[position + 1]
                nxt = {
                    "endpoint": after.endpoint,
                    "public_key": after.public_key,
                    "name": after.name,
                }
            peers = [members[position - 1].public_key] if position > 0 and not hub else []
            meta = {"epoch": self._epoch, "next": nxt, "peers": peers}
            await link.call(Message(Op.RING, meta=meta))
        local = tuple(self._local[i] for i in sorted(self._local))
        log.info(
            "ring epoch %d: coordinator stages %s, then %s",
            self._epoch,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members) or "nothing",
        )
        n_stages = len(self.manifest.stages) if self.manifest is not None else 0
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
        if self.replanner is not None and lost:
            self._start_replan(self._replan_after_loss(lost))
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
        units = self._units()
        gone = [n for n in self.order if n in self.links and self.links[n].lost] or list(lost)
        left = [n for n in self.order if n in self.links and not self.links[n].lost]
        unplaced, free = exc.stages, exc.free_bytes
        need = need_bytes(units, unplaced)
        if not left:
            room = "no worker is left"
        elif len(left) == 1:
            room = f"worker {left[0]} has {size_text(max(0, free.get(left[0], 0)))} free"
        else:
            best = max(left, key=lambda n: free.get(n, 0))
            room = (
                f"the most any of workers {_and(left)} has free is "
                f"{size_text(max(0, free.get(best, 0)))}"
            )
        if not self.config.local_failover:
            room += ", and this PC is set not to take them (--no-local-failover)"
        elif exc.coordinator_free_bytes is not None:
            room += f", and this PC has {size_text(max(0, exc.coordinator_free_bytes))} free"
        workers = "worker" if len(gone) == 1 else "workers"
        verb = "was" if len(gone) == 1 else "were"
        message = (
            f"{workers} {_and(gone)} {verb} lost, and what is left cannot run "
            f"{stages_text(units, unplaced)}, which need {size_text(need)}: {room}. "
            f"Restart {_and(gone)} or add a worker, then try again."
        )
        return FleetTooSmallError(message, gone, unplaced)

    # -- re-planning --------------------------------------------------------------------------

    def replan_with(self, context: PlanContext, config: ReplanConfig | None = None) -> None:
        """Re-plan during use (see module doc) from what the deployed plan was made of."""
        self.replanner = LiveReplanner(context, config)
        if self.assignment is not None:
            self.replanner.deployed(self.assignment)
        if self._unsubscribe is None:
            self._unsubscribe = self.metrics.subscribe(self._on_metric)

    def _usable(self) -> list[str]:
        return [name for name in self.order if name in self.links and not self.links[name].lost]

    def _on_metric(self, event: MetricEvent) -> None:
        if self.replanner is None or not isinstance(event, StageTiming):
            return
        drift = self.replanner.observe(event.stage, event.positions, event.compute_ms)
        if drift is not None:
            self._start_replan(self._replan_after_drift(drift))

    def _start_replan(self, work: Coroutine[Any, Any, None]) -> None:
        if self._replanning is not None and not self._replanning.done():
            work.close()  # one re-plan at a time; the monitor will speak again if needed
            return
        self._replanning = asyncio.get_running_loop().create_task(work)

    async def _replan_after_drift(self, drift: SpeedDrift) -> None:
        if self.replanner is None or self.assignment is None:
            return
        try:
            better = self.replanner.on_drift(drift, self.assignment, self._usable())
        except FleetguiError as exc:
            log.warning("re-planning after %s changed speed failed: %s", drift.device, exc)
            return
        if better is not None:
            await self._rebalance_logged(better, f"{drift.device} changed speed")

    async def _replan_after_loss(self, lost: Sequence[str]) -> None:
        if self.replanner is None:
            return
        better = None
        for name in lost:
            if self.assignment is None:
                return
            try:
                better = self.replanner.on_lost(name, self.assignment, self._usable()) or better
            except FleetguiError as exc:
                log.warning("re-planning after losing %s failed: %s", name, exc)
                return
        if better is not None:
            await self._rebalance_logged(better, f"{', '.join(lost)} lost")

    async def _rebalance_logged(self, assignment: Assignment, why: str) -> None:
        try:
            await self.rebalance(assignment)
        except (FleetguiError, OSError) as exc:
            log.warning("re-planned layout after %s not applied: %s", why, exc)
            return
        log.warning(
            "re-planned after %s: coordinator stages %s, then %s",
            why,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members) or "nothing",
        )

    async def rebalance(self, assignment: Assignment) -> None:
        """Move to ``assignment`` between requests: load what changed, set up a new ring
        epoch (streams replay their tokens into it) and free the workers that left the ring."""
        if self.assignment is None:
            raise FleetguiError("nothing deployed")
        self._check(assignment, len(self.manifest.stages) if self.manifest else 0)
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
        local = self.config.local
        tokenizer = Tokenizer(tokenizer_dir_of(self.export_dir), self._core)
        draft = (
            load_draft(draft_dir, self.manifest, tokenizer, local, self._core)
            if draft_dir
            else None
        )

        def on_hop(stream_id: int, ms: float, nbytes: int = 0) -> None:
            self.metrics.emit(TransferTiming(stream_id, 0, ms, nbytes))

        self.route = RingRoute(
            self.ring,
            self.dispatcher,
            recover=self.recover,
            config=self.config.route,
            on_hop=on_hop,
        )
        return Pipeline(
            self.route,
            tokenizer,
            context_limit=context_limit_of(self.manifest, local.context_limit),
            draft=draft,
            prefill_chunk=local.prefill_chunk,
            metrics=self.metrics,
        )

    async def open_pipeline(self, *, draft_dir: DraftSource | None = None) -> Pipeline:
        """:meth:`pipeline`, with the tokenizer and draft loaded in a thread."""
        return await asyncio.to_thread(self.pipeline, draft_dir=draft_dir)

    def worker_status(self, name: str) -> WorkerLinkStatus:
        """What the coordinator knows of a connected worker right now."""
        link = self.links[name]
        return WorkerLinkStatus(
            name,
            lost=link.lost,
            rtt_ms=link.rtt_ms,
            free_ram_bytes=int(link.last_status.get("free_ram_bytes", 0)) or None,
            stages=tuple(self.assignment.indices_of(name)) if self.assignment else (),
            last_seen=link.last_seen,
        )

    async def close(self, *, unload: bool = False, timeout_s: float = 5.0) -> None:
        """Close every link. Workers keep running; with ``unload`` they first drop the stages
        this session loaded (else they keep them, and a later deployment reuses them)."""
        for task in list(self._rejoin.values()):
            task.cancel()
        if self._replanning is not None:
            self._replanning.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
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
