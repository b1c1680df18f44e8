"""Deploy on this PC: every stage compiled in this process (``load_local_pipeline``), in an
executor so the GUI stays responsive."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from fleetgui.app.deploy.interfaces import (
    DeployCancelledError,
    Deployer,
    DeployRequest,
    DeployStep,
    DeviceSource,
    ProgressCallback,
)
from fleetgui.app.local_pc import coordinator_name, coordinator_profile
from fleetgui.planner import DeviceProfile
from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
from fleetgui.runtime.pipeline import Pipeline

log = logging.getLogger(__name__)


class LocalDeployer(Deployer):
    """Loads the whole export here; the plan, if any, is only checked to name this PC."""

    name = "this PC"

    def __init__(self, config: LocalPipelineConfig | None = None) -> None:
        self.config = config or LocalPipelineConfig()

    async def deploy(self, request: DeployRequest, progress: ProgressCallback) -> Pipeline:
        worker = coordinator_name()
        if request.plan is not None and set(request.plan.devices) - {worker}:
            others = ", ".join(sorted(set(request.plan.devices) - {worker}))
            raise DeployCancelledError(
                f"the plan uses other PCs ({others}) but the fleet is not available in this "
                "version: plan for this PC only"
            )
        progress(DeployStep(worker, "compiling the stages", 0, 1))
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            None,
            lambda: load_local_pipeline(
                request.export_dir, draft_dir=request.draft_dir, config=self.config
            ),
        )
        try:
            pipeline = await asyncio.shield(future)
        except asyncio.CancelledError:
            # the load cannot be interrupted; close whatever it builds once it is done
            future.add_done_callback(_close_when_loaded)
            raise
        progress(DeployStep(worker, "ready", 1, 1))
        return pipeline


def _close_when_loaded(future: asyncio.Future[Pipeline]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    pipeline = future.result()
    asyncio.get_running_loop().create_task(pipeline.close())
    log.info("a cancelled deployment's pipeline was closed")


class LocalDeviceSource(DeviceSource):
    """Only this PC; its layer time is an estimate until one is measured."""

    def __init__(self) -> None:
        self.measured_ms_per_layer: float | None = None

    def device_profiles(self) -> list[DeviceProfile]:
        profile = coordinator_profile()
        if self.measured_ms_per_layer:
            profile = replace(profile, ms_per_layer=self.measured_ms_per_layer)
        return [profile]
