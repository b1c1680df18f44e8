"""Deploy on the fleet: a ``FleetSession`` over the usable workers, exactly as planned.

With a plan (the deployment view's preview) each device runs the export's stages the plan gives
it (:func:`~fleetgui.app.plan_preview.plan_assignment`), the other usable workers are spares, and
a plan that uses this PC alone deploys here (:class:`~fleetgui.app.deploy.local.LocalDeployer`);
without a plan, stage 0 runs on this PC and the other stages are spread over the usable workers
(or all run here when none is usable). The session pushes each worker's shards (a progress bar
per worker), loads them and links the ring; its events (loading, running, lost, rejoined) go to
the fleet view through the :class:`~fleetgui.app.fleet_controller.FleetController`. A deployment
made from a plan keeps re-planning while it runs (:meth:`FleetSession.replan_with`): a worker
whose measured speed drifts, or the failover after a lost one, can move stages.

When the preview chose replicas (``DeployRequest.groups``), each group of workers gets the model
instead, a whole copy on a group of one (:mod:`fleetgui.app.deploy.replicas`), and the chat is
served by the replicas together.

A cancelled or failed deployment leaves nothing half-loaded: every worker of the session is told
to unload and the session is closed. A new deployment first ends the previous one (workers host
one deployment at a time).
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
    ServedPipeline,
)
from fleetgui.app.deploy.local import LocalDeployer
from fleetgui.app.deploy.replicas import ReplicaSessions, close_replicas, deploy_replicas
from fleetgui.app.fleet_controller import FleetController
from fleetgui.app.local_pc import coordinator_name
from fleetgui.app.plan_preview import (
    export_stages,
    in_plan_order,
    plan_assignment,
    replicas_phrase,
)
from fleetgui.fleet import deploy as fleet_deploy
from fleetgui.fleet.assignment import Assignment
from fleetgui.fleet.coordinator import FleetSession
from fleetgui.fleet.replanner import PlanContext
from fleetgui.fleet.replicas import ReplicatedPipeline
from fleetgui.fleet.session_config import CoordinatorConfig, WorkerEndpoint
from fleetgui.planner import Plan, load_model_profile
from fleetgui.runtime.metrics import MetricsBus
from fleetgui.runtime.pipeline import Pipeline

log = logging.getLogger(__name__)

UNLOAD_TIMEOUT_S = 10.0


def ring_order(endpoints: Sequence[WorkerEndpoint], plan: Plan | None) -> list[str]:
    """Worker names in ring order: the plan's workers in its order, then the other usable
    workers (spares, or extra stage holders when the export has more stages than the plan)."""
    usable = [e.name for e in endpoints]
    planned = [d for d in (plan.devices[1:] if plan is not None else ()) if d in usable]
    return planned + [name for name in usable if name not in planned]


def app_progress(step: fleet_deploy.DeployProgress) -> DeployStep:
    """A fleet deployment step as the deployment view's progress bar shows it."""
    match step.phase:
        case fleet_deploy.DeployPhase.LOAD:
            return DeployStep(step.worker, "loading the stages", 99, 100)
        case fleet_deploy.DeployPhase.READY:
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
    """Deploys through a ``FleetSession`` (see module doc)."""

    name = "the fleet"

    def __init__(
        self, controller: FleetController, config: CoordinatorConfig | None = None
    ) -> None:
        self.controller = controller
        self.config = config or CoordinatorConfig()
        self.session: FleetSession | None = None
        self.replicas: ReplicatedPipeline | None = None  # when replicas are deployed

    async def deploy(self, request: DeployRequest, progress: ProgressCallback) -> ServedPipeline:
        await self.close()  # workers serve one deployment at a time
        endpoints = self.controller.usable_endpoints()
        if request.groups:
            return await self._deploy_replicas(request, endpoints, progress)
        plan = request.plan
        here = coordinator_name()
        if (plan is None and not endpoints) or (plan is not None and plan.devices == (here,)):
            why = "no usable worker" if plan is None else "the plan uses this PC only"
            log.info("%s: deploying %s on this PC", why, request.export_dir)
            local = LocalDeployer(self.config.local)
            pipeline = await local.deploy(replace(request, plan=None), progress)
            self.name = LocalDeployer.name  # what the status line says it runs on
            return pipeline
        usable = [e.name for e in endpoints]
        planned = (
            plan_assignment(plan, request.export_dir, usable, coordinator=here)
            if plan is not None
            else None
        )
        session = FleetSession(
            self.controller.identity,
            self.config,
            metrics=MetricsBus(),
            on_event=self.controller.on_session_event,
        )
        self.controller.session = session  # its heartbeats now speak for its workers
        try:
            pipeline = await self._deploy(session, endpoints, request, planned, progress)
        except BaseException:
            await asyncio.shield(self._discard(session))
            raise
        self.session = session
        self.name = type(self).name
        return pipeline

    async def _deploy(
        self,
        session: FleetSession,
        endpoints: list[WorkerEndpoint],
        request: DeployRequest,
        planned: Assignment | None,
        progress: ProgressCallback,
    ) -> Pipeline:
        here = coordinator_name()
        await session.connect(endpoints)
        progress(DeployStep(here, "compiling stage 0", 0, 1))
        order = ring_order(endpoints, request.plan)
        await session.deploy(
            request.export_dir,
            order=order,
            assignment=planned,
            progress=lambda step: progress(app_progress(step)),
        )
        pipeline = await session.open_pipeline(draft_dir=request.draft_dir)
        if request.plan is not None and request.devices and request.plan_config is not None:
            session.replan_with(await asyncio.to_thread(plan_context, request))
        progress(DeployStep(here, "ready", 1, 1))
        assignment = session.assignment
        if assignment is not None:
            log.info(
                "deployed %s: this PC %s, %s; spares %s",
                request.export_dir.name,
                list(assignment.local),
                ", ".join(f"{m.name} {list(m.indices)}" for m in assignment.members),
                list(assignment.spares) or "none",
            )
        return pipeline

    async def _deploy_replicas(
        self, request: DeployRequest, endpoints: list[WorkerEndpoint], progress: ProgressCallback
    ) -> ReplicatedPipeline:
        controller = self.controller
        replicas = await deploy_replicas(
            request,
            endpoints,
            controller.identity,
            self.config,
            progress=progress,
            on_event=controller.on_session_event,
        )
        # the replicas' heartbeats speak for their workers, each from its own session
        controller.session = ReplicaSessions([r.session for r in replicas.replicas])
        self.replicas = replicas
        self.name = f"the fleet, as {replicas_phrase(request.groups)}"
        return replicas

    async def _discard(self, session: FleetSession) -> None:
        """Unload what the session loaded on its workers and close it."""
        try:
            await session.close(unload=True, timeout_s=UNLOAD_TIMEOUT_S)
        except Exception as exc:
            log.warning("closing the fleet session failed: %s", exc)
        self.controller.session_closed()
        log.info("deployment discarded; the workers unloaded their stages")

    async def close(self) -> None:
        """End the current deployment, if any (its pipeline stops working)."""
        session, self.session = self.session, None
        if session is not None:
            await self._discard(session)
        replicas, self.replicas = self.replicas, None
        if replicas is not None:
            await close_replicas(replicas)
            self.controller.session_closed()
            log.info("replicas discarded; the workers unloaded them")
