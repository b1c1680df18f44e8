"""The demo end to end: the demo pair, exported, on a local two-worker fleet, ready to chat.

``start_demo`` builds or reuses the pair, exports the target in 2 stages and the draft whole
(both reused when already there), starts 2 worker processes on loopback (paired with a key made
for the local fleet), deploys over the real protocol (one stage per worker; the coordinator
runs the draft) and returns a ``DemoRun`` whose pipeline serves PP+SD with K auto by default.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from fleetgui import paths
from fleetgui.demo.builder import DemoPair, ensure_demo_pair
from fleetgui.demo.progress import ProgressCallback
from fleetgui.fleet.coordinator import CoordinatorConfig, FleetSession
from fleetgui.fleet.local_fleet import LocalFleet
from fleetgui.runtime.loader import LocalPipelineConfig
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.runtime.pipeline import Pipeline

log = logging.getLogger(__name__)

#: The target's weights. int8 (per channel) lets its K+1-position verify passes run on the CPU's
#: int8 matrix kernels: on the small pair, one thread, a 5-position pass of the whole target
#: took 3.1 ms with int8 weights against 7.7 ms with fp16 ones (computed in f32); in one
#: process on one core, interleaved, PP decoded 424 vs 302 tok/s and PP+SD 359 vs 284, with
#: greedy acceptance 75.2 % vs 77.3 % (the fp16 draft imitates the fp16 target).
DEMO_WEIGHTS = "int8"
#: The draft's weights: int8 made its one-position passes no faster (0.76 vs 0.77 ms: a model
#: that small is bound by per-operation costs, not by reading its weights).
DRAFT_WEIGHTS = "fp16"
WORKERS = ("worker-1", "worker-2")


@dataclass
class DemoRun:
    """A running demo: close it to stop the workers."""

    pair: DemoPair
    target_export: Path
    draft_export: Path
    fleet: LocalFleet
    session: FleetSession
    pipeline: Pipeline

    async def close(self) -> None:
        try:
            await self.pipeline.close()
            await self.session.close()
        finally:
            self.fleet.stop()


def export_pair(pair: DemoPair, size: str, weights: str = DEMO_WEIGHTS) -> tuple[Path, Path]:
    """The target in 2 stages with ``weights`` and the draft whole, in the shard cache (reused
    when complete; an export in another weight format is rebuilt)."""
    from fleetgui.export.exporter import ExportRequest, export_model

    cache = paths.shards_cache_dir()
    suffix = "" if weights == DEMO_WEIGHTS else f"-{weights}"
    target = cache / f"demo-{size}-target-2stages{suffix}"
    draft = cache / f"demo-{size}-draft"
    export_model(ExportRequest(pair.target_dir, target, stages=2, weights=weights))
    export_model(ExportRequest(pair.draft_dir, draft, stages=1, weights=DRAFT_WEIGHTS))
    return target, draft


async def start_demo(
    size: str = "small",
    *,
    progress: ProgressCallback | None = None,
    weights: str = DEMO_WEIGHTS,
) -> DemoRun:
    """Everything ``fleetgui demo`` needs, started (see module doc); ``weights`` is the
    target's weight format (benchmarks compare them)."""
    pair = await asyncio.to_thread(ensure_demo_pair, size, None, False, progress)
    target, draft = await asyncio.to_thread(export_pair, pair, size, weights)
    fleet = LocalFleet(paths.data_dir() / "demo-fleet")
    await asyncio.to_thread(fleet.start, list(WORKERS))
    stage = StageConfig(threads=1)
    config = CoordinatorConfig(
        local_stages=0,  # both stages on the workers; the coordinator runs the draft
        local=LocalPipelineConfig(stage=stage, draft_stage=stage),
        worker_threads=1,
    )
    session = FleetSession(fleet.identity(), config)
    try:
        await session.connect([w.endpoint for w in fleet.workers])
        await session.deploy(target)
        pipeline = session.pipeline(draft_dir=draft)
    except BaseException:
        await session.close()
        fleet.stop()
        raise
    log.info("demo ready: %s on %s", pair.root.name, ", ".join(WORKERS))
    return DemoRun(pair, target, draft, fleet, session, pipeline)
