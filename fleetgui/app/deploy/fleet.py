"""Deploy on the fleet: the assembler (:func:`fleetgui.assembler.aopen`) over the usable
workers, exactly as planned.

With a plan (the deployment view's preview) each device runs the export's stages the plan gives
it (:func:`~fleetgui.fleet.placement.preview.plan_assignment`), the other usable workers are
spares, and a plan that uses this PC alone deploys here
(:class:`~fleetgui.app.deploy.local.LocalDeployer`); without a plan, stage 0 runs on this PC and
the other stages are spread over the usable workers (or all run here when none is usable). The
session pushes each worker's shards (a progress bar per worker), loads them and links the ring;
its events (loading, running, lost, rejoined) go to the fleet view through the
:class:`~fleetgui.app.fleet.controller.FleetController`. A deployment made from a plan keeps
re-planning while it runs (``FleetSession.replan_with``): a worker whose measured speed drifts,
or the failover after a lost one, can move stages.

When the preview chose replicas (``DeployRequest.groups``), each group of workers gets the model
instead, a whole copy on a group of one (:mod:`fleetgui.app.deploy.replicas`), and the chat is
served by the replicas together.

A cancelled or failed deployment leaves nothing half-loaded: the assembler unloads and closes
what it opened. A new deployment first ends the previous one (workers host one deployment at a
time).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from fleetgui.app.deploy.interfaces import (
    Deployer,
    DeployRequest,
    DeployStep,
    ProgressCallback,
)
from fleetgui.app.deploy.local import LocalDeployer
from fleetgui.app.deploy.replicas import (
    announce_replicas,
    loading_steps,
    pick_endpoints,
)
from fleetgui.app.fleet.controller import FleetController
from fleetgui.assembler import OpenHooks, Placement, aopen
from fleetgui.fleet.placement.preview import (
    export_stages,
    in_plan_order,
    plan_assignment,
    replicas_phrase,
)
from fleetgui.fleet.profiling.this_pc import coordinator_name
from fleetgui.fleet.replanning.live_replanner import PlanContext
from fleetgui.fleet.ring import shard_push
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.replicas import ReplicatedPipeline
from fleetgui.fleet.session.session import FleetSession
from fleetgui.llm_pipeline import LLMPipeline
from fleetgui.planner import Plan, load_model_profile

log = logging.getLogger(__name__)


def ring_order(endpoints: Sequence[WorkerEndpoint], plan: Plan | None) -> list[str]:
    """Worker names in ring order: the plan's workers in its order, then the other usable
    workers (spares, or extra stage holders when the export has more stages than the plan)."""
    usable = [e.name for e in endpoints]
    planned = [d for d in (plan.devices[1:] if plan is not None else ()) if d in usable]
    return planned + [name for name in usable if name not in planned]


def app_progress(step: shard_push.DeployProgress) -> DeployStep:
    """A fleet deployment step as the deployment view's progress bar shows it."""
    match step.phase:
        case shard_push.DeployPhase.LOAD:
            return DeployStep(step.worker, "loading the stages", 99, 100)
        case shard_push.DeployPhase.READY:
            return DeployStep(step.worker, "ready", 1, 1)
    if step.total == 0:
        return DeployStep(step.worker, "files already there", 0, 100)
    what = f"sending {Path(step.file).name}" if step.file else "files sent"
    return DeployStep(step.worker, what, step.sent, step.total)


def plan_context(request: DeployRequest) -> PlanContext:
    """What ``request``'s plan was made from, for re-planning while the fleet runs (reads the
    export's manifest)."""
    assert request.plan is not None and request.plan_config is not None
    return PlanContext(
        tuple(in_plan_order(request.devices, request.plan)),
        load_model_profile(request.export_dir, streams=request.plan.streams),
        tuple(export_stages(request.export_dir)),
        request.plan_config,
    )


class FleetDeployer(Deployer):
    """Deploys through the assembler on the usable workers, as planned (see module doc)."""

    name = "the fleet"

    def __init__(
        self, controller: FleetController, config: CoordinatorConfig | None = None
    ) -> None:
        self.controller = controller
        self.config = config or CoordinatorConfig()
        self.llm: LLMPipeline | None = None  # the deployment on the workers, if any

    @property
    def session(self) -> FleetSession | None:
        """The fleet session of a pipeline deployment (None: none, or replicas)."""
        sessions = self.llm.sessions if self.llm is not None else ()
        return sessions[0] if len(sessions) == 1 and not self.replicas else None

    @property
    def replicas(self) -> ReplicatedPipeline | None:
        """The replicas deployed, if that is what serves."""
        runtime = self.llm.runtime if self.llm is not None else None
        return runtime if isinstance(runtime, ReplicatedPipeline) else None

    async def deploy(self, request: DeployRequest, progress: ProgressCallback) -> LLMPipeline:
        await self.close()  # workers serve one deployment at a time
        endpoints = self.controller.usable_endpoints()
        plan, here = request.plan, coordinator_name()
        alone = (plan is None and not endpoints) or (plan is not None and plan.devices == (here,))
        if alone and not request.groups:
            why = "no usable worker" if plan is None else "the plan uses this PC only"
            log.info("%s: deploying %s on this PC", why, request.export_dir)
            llm = await LocalDeployer(self.config.local).deploy(
                replace(request, plan=None), progress
            )
            self.name = LocalDeployer.name  # what the status line says it runs on
            return llm
        if request.groups:
            for step in loading_steps(request.groups):
                progress(step)
        else:
            progress(DeployStep(here, "compiling stage 0", 0, 1))
        controller = self.controller

        def fleet_progress(step: shard_push.DeployProgress) -> None:
            progress(app_progress(step))

        async def placement(export: Path, usable: Sequence[WorkerEndpoint]) -> Placement:
            return await placement_of(request, usable, here)

        hooks = OpenHooks(
            progress=None if request.groups else fleet_progress,
            plan=placement,
            on_event=controller.on_session_event,
            # a session's heartbeats speak for its workers from the start
            on_session=self._opened,
        )
        try:
            llm = await aopen(
                request.export_dir,
                workers=endpoints,
                draft=request.draft_dir,
                identity=controller.identity,
                coordinator=replace(self.config, local=request.local_config(self.config.local)),
                hooks=hooks,
            )
        except BaseException:
            controller.session_closed()  # the assembler unloaded and closed what it opened
            raise
        self.llm = llm
        if isinstance(llm.runtime, ReplicatedPipeline):
            for step in announce_replicas(
                llm.runtime, request.export_dir, controller.on_session_event
            ):
                progress(step)
            controller.sessions = llm.sessions
            self.name = f"the fleet, as {replicas_phrase(request.groups)}"
        else:
            progress(DeployStep(here, "ready", 1, 1))
            self.name = type(self).name
            _log_layout(request, llm.sessions[0])
        return llm

    def _opened(self, session: FleetSession) -> None:
        self.controller.sessions = (*self.controller.sessions, session)

    async def close(self) -> None:
        """End the current deployment, if any: its workers unload their stages."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        try:
            await llm.aclose(unload=True)
        except Exception as exc:
            log.warning("closing the fleet deployment failed: %s", exc)
        self.controller.session_closed()
        log.info("deployment discarded; the workers unloaded their stages")


async def placement_of(
    request: DeployRequest, usable: Sequence[WorkerEndpoint], here: str
) -> Placement:
    """Where the app's deployment puts the stages: the replicas the preview chose, or the
    plan's layout in its ring order (re-planned while it serves), or, without a plan, this PC's
    first stage and then the usable workers."""
    if request.groups:
        for group in request.groups:
            pick_endpoints(usable, group)  # a worker gone since the preview: preview again
        return Placement(replicas=request.groups)
    plan = request.plan
    if plan is None:
        return Placement()
    names = [e.name for e in usable]
    assignment = plan_assignment(plan, request.export_dir, names, coordinator=here)
    replan = None
    if request.devices and request.plan_config is not None:
        replan = await asyncio.to_thread(plan_context, request)
    return Placement(assignment=assignment, order=tuple(ring_order(usable, plan)), replan=replan)


def _log_layout(request: DeployRequest, session: FleetSession) -> None:
    assignment = session.deployment.assignment
    if assignment is not None:
        log.info(
            "deployed %s: this PC %s, %s; spares %s",
            request.export_dir.name,
            list(assignment.local),
            ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members),
            list(assignment.spares) or "none",
        )
