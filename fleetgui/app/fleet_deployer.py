"""Deploy on the fleet: a ``FleetSession`` over the usable workers, stage 0 on this PC.

The session pushes each worker's shards (a progress bar per worker), loads them and links the
ring; its events (loading, running, lost, rejoined) go to the fleet view through the
:class:`~fleetgui.app.fleet_controller.FleetController`. Without a usable worker the export is
deployed on this PC alone (:class:`~fleetgui.app.local_deployer.LocalDeployer`).

A cancelled or failed deployment leaves nothing half-loaded: every worker of the session is told
to unload and the session is closed. A new deployment first ends the previous one (workers host
one deployment at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from fleetgui.app.deployer import Deployer, DeployProgress, DeployRequest, ProgressCallback
from fleetgui.app.fleet_controller import FleetController
from fleetgui.app.local_deployer import LocalDeployer
from fleetgui.app.local_pc import coordinator_name
from fleetgui.export.manifest import read_manifest
from fleetgui.fleet import deploy as fleet_deploy
from fleetgui.fleet.coordinator import CoordinatorConfig, FleetSession, WorkerEndpoint
from fleetgui.fleet.protocol import Message, Op
from fleetgui.planner import Plan
from fleetgui.runtime.loader import safe_stage_config
from fleetgui.runtime.metrics import MetricsBus
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.pipeline import Pipeline

log = logging.getLogger(__name__)

UNLOAD_TIMEOUT_S = 10.0


def ring_order(endpoints: Sequence[WorkerEndpoint], plan: Plan | None) -> list[str]:
    """Worker names in ring order: the plan's workers in its order, then the other usable
    workers (spares, or extra stage holders when the export has more stages than the plan)."""
    usable = [e.name for e in endpoints]
    planned = [d for d in (plan.devices[1:] if plan is not None else ()) if d in usable]
    return planned + [name for name in usable if name not in planned]


def app_progress(step: fleet_deploy.DeployProgress) -> DeployProgress:
    """A fleet deployment step as the deployment view's progress bar shows it."""
    match step.phase:
        case "load":
            return DeployProgress(step.worker, "loading the stages", 99, 100)
        case "ready":
            return DeployProgress(step.worker, "ready", 1, 1)
    if step.total == 0:
        return DeployProgress(step.worker, "files already there", 0, 100)
    what = f"sending {Path(step.file).name}" if step.file else "files sent"
    return DeployProgress(step.worker, what, step.sent, step.total)


class FleetDeployer(Deployer):
    """Deploys through a ``FleetSession`` (see module doc)."""

    name = "the fleet"

    def __init__(
        self, controller: FleetController, config: CoordinatorConfig | None = None
    ) -> None:
        self.controller = controller
        self.config = config or CoordinatorConfig()
        self.session: FleetSession | None = None

    async def deploy(self, request: DeployRequest, progress: ProgressCallback) -> Pipeline:
        await self.close()  # workers serve one deployment at a time
        endpoints = self.controller.usable_endpoints()
        if not endpoints:
            log.info("no usable worker: deploying %s on this PC", request.export_dir)
            local = LocalDeployer(self.config.local)
            return await local.deploy(replace(request, plan=None), progress)
        session = FleetSession(
            self.controller.identity,
            self.config,
            metrics=MetricsBus(),
            on_event=self.controller.on_session_event,
        )
        self.controller.session = session  # its heartbeats now speak for its workers
        try:
            pipeline = await self._deploy(session, endpoints, request, progress)
        except BaseException:
            await asyncio.shield(self._discard(session))
            raise
        self.session = session
        return pipeline

    async def _deploy(
        self,
        session: FleetSession,
        endpoints: list[WorkerEndpoint],
        request: DeployRequest,
        progress: ProgressCallback,
    ) -> Pipeline:
        here = coordinator_name()
        await session.connect(endpoints)
        progress(DeployProgress(here, "compiling stage 0", 0, 1))
        await self._compile_local(session, request.export_dir)
        order = ring_order(endpoints, request.plan)
        await session.deploy(
            request.export_dir, order=order, progress=lambda step: progress(app_progress(step))
        )
        loop = asyncio.get_running_loop()
        pipeline = await loop.run_in_executor(
            None, lambda: session.pipeline(draft_dir=request.draft_dir)
        )
        progress(DeployProgress(here, "ready", 1, 1))
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

    async def _compile_local(self, session: FleetSession, export_dir: Path) -> None:
        """Compile the coordinator's stages in an executor before ``session.deploy`` needs
        them (it would compile them in the event loop: the GUI would freeze meanwhile)."""
        local_stages = self.config.local_stages
        stage_config = self.config.local.stage

        def compile_all() -> dict[int, LocalStage]:
            manifest = read_manifest(export_dir)
            if manifest.layout != "stages":
                return {}  # session.deploy refuses it with the fix
            config = safe_stage_config(stage_config, manifest.weight_format)
            compiled = {}
            for index in range(min(local_stages, len(manifest.stages))):
                entry = manifest.stages[index]
                compiled[index] = LocalStage(
                    index,
                    manifest.shard(index),
                    [export_dir / part for part in entry.model_files],
                    config,
                    core=session._core,
                )
            return compiled

        compiled = await asyncio.get_running_loop().run_in_executor(None, compile_all)
        session._local.update(compiled)  # FleetSession._load_local keeps what is there

    async def _discard(self, session: FleetSession) -> None:
        """Unload what the session loaded on its workers and close it."""
        for name, link in list(session.links.items()):
            if link.lost:
                continue
            try:
                await link.call(Message(Op.UNLOAD), timeout_s=UNLOAD_TIMEOUT_S)
            except Exception as exc:
                log.warning("worker %s did not unload: %s", name, exc)
        with contextlib.suppress(Exception):
            await session.close()
        self.controller.session_closed()
        log.info("deployment discarded; the workers unloaded their stages")

    async def close(self) -> None:
        """End the current deployment, if any (its pipeline stops working)."""
        session, self.session = self.session, None
        if session is not None:
            await self._discard(session)
