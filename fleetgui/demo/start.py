"""Start the demo: its models on a local two-worker fleet, ready to chat.

:func:`start_demo` gets the models :func:`~fleetgui.demo.models.prepare_models` names (exporting
what is missing, reusing what is there), starts 2 worker processes on loopback (paired with a
key made for the local fleet), deploys over the real protocol (one stage per worker; the
coordinator drafts) and returns a :class:`DemoRun` whose pipeline serves PP+SD with K auto by
default.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from fleetgui import paths
from fleetgui.assembler import aopen
from fleetgui.demo.models import WORKERS, DemoModels, prepare_models
from fleetgui.fleet.local_fleet.fleet import LocalFleet
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.llm_pipeline import LLMPipeline
from fleetgui.runtime.loader import LocalPipelineConfig, with_context
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.training.progress import ProgressCallback

log = logging.getLogger(__name__)


@dataclass
class DemoRun:
    """A running demo: close it to stop the workers."""

    models: DemoModels
    fleet: LocalFleet
    llm: LLMPipeline  # the target's stages on the workers, the drafter here

    async def close(self) -> None:
        try:
            await self.llm.aclose()
        finally:
            self.fleet.stop()


async def start_demo(
    size: str | None = None,
    *,
    progress: ProgressCallback | None = None,
    weights: str | None = None,
    draft: str | None = None,
    context: int | None = None,
    kv_reuse: bool = True,
    kv_budget: int | None = None,
) -> DemoRun:
    """Everything ``fleetgui demo`` needs, started (see module doc); ``weights`` is the
    target's weight format (benchmarks compare them), ``draft`` as in :func:`prepare_models`;
    ``context``, ``kv_reuse`` and ``kv_budget`` as :func:`fleetgui.open`'s."""
    models = await asyncio.to_thread(prepare_models, size, progress, weights, draft)
    fleet = LocalFleet(paths.data_dir() / "demo-fleet")
    await asyncio.to_thread(fleet.start, list(WORKERS))
    stage = StageConfig(threads=1)
    config = CoordinatorConfig(
        local_stages=0,  # both stages on the workers; the coordinator drafts
        local=with_context(
            LocalPipelineConfig(stage=stage, draft_stage=stage),
            context=context,
            kv_reuse=kv_reuse,
            kv_budget=kv_budget,
        ),
        worker_threads=1,
    )
    try:
        llm = await aopen(
            models.target_export,
            workers=[w.endpoint for w in fleet.workers],
            draft=models.draft,
            max_streams=1,
            identity=fleet.identity(),
            coordinator=config,
        )
    except BaseException:
        fleet.stop()
        raise
    log.info("demo ready: %s on %s, drafts: %s", models.name, ", ".join(WORKERS), models.draft_name)
    return DemoRun(models, fleet, llm)
