"""Deploy on this PC: every stage compiled in this process by the assembler (which loads in a
thread, so the GUI stays responsive)."""

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
from fleetgui.fleet.profiling.this_pc import coordinator_name, coordinator_profile
from fleetgui.llm_pipeline import LLMPipeline
from fleetgui.planner import DeviceProfile
from fleetgui.runtime.loader import LocalPipelineConfig

log = logging.getLogger(__name__)


class LocalDeployer(Deployer):
    """Loads the whole export here; the plan, if any, is only checked to name this PC."""

    name = "this PC"

    def __init__(self, config: LocalPipelineConfig | None = None) -> None:
        self.config = config or LocalPipelineConfig()

    async def deploy(self, request: DeployRequest, progress: ProgressCallback) -> LLMPipeline:
        worker = coordinator_name()
        if request.plan is not None and set(request.plan.devices) - {worker}:
            others = ", ".join(sorted(set(request.plan.devices) - {worker}))
            raise DeployCancelledError(
                f"the plan uses other PCs ({others}) but the fleet is not available in this "
                "version: plan for this PC only"
            )
        from fleetgui.assembler import aopen
        from fleetgui.fleet.session.config import CoordinatorConfig

        progress(DeployStep(worker, "compiling the stages", 0, 1))
        opening = asyncio.ensure_future(
            aopen(
                request.export_dir,
                draft=request.draft_dir,
                coordinator=CoordinatorConfig(local=request.local_config(self.config)),
            )
        )
        try:
            llm = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # the load cannot be interrupted; close whatever it builds once it is done
            opening.add_done_callback(_close_when_loaded)
            raise
        progress(DeployStep(worker, "ready", 1, 1))
        return llm


def _close_when_loaded(opening: asyncio.Future[LLMPipeline]) -> None:
    if opening.cancelled() or opening.exception() is not None:
        return
    asyncio.get_running_loop().create_task(opening.result().aclose())
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
