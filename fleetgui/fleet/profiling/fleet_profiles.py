"""The fleet as a plan made without the app sees it (``fleetgui plan --workers``, ``serve
--layout auto``): this PC and the given workers, each with the memory it has free and its layer
time measured as the app's plan preview measures it
(:func:`~fleetgui.fleet.profiling.layer_times.measure_devices`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from fleetgui.addresses import parse_zmq_endpoint
from fleetgui.fleet.profiling.layer_times import measure_devices
from fleetgui.fleet.profiling.measured import MeasuredDevices
from fleetgui.fleet.profiling.this_pc import (
    ESTIMATED_DISK_BYTES_PER_S,
    ESTIMATED_MS_PER_LAYER,
    coordinator_profile,
)
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.net.info_probe import probe
from fleetgui.net.keys import KeyPair
from fleetgui.planner import DeviceProfile
from fleetgui.runtime.ov_stage import StageConfig


async def _estimated(endpoint: WorkerEndpoint) -> DeviceProfile:
    """A worker as its info probe describes it: its free memory (else its total), the probe's
    round trip and an estimated layer time, until one is measured."""
    started = time.perf_counter()
    info = await probe(*parse_zmq_endpoint(endpoint.endpoint))
    return DeviceProfile(
        name=info.name,
        memory_bytes=info.free_ram_bytes or info.ram_bytes,
        ms_per_layer=ESTIMATED_MS_PER_LAYER,
        disk_read_bytes_per_s=ESTIMATED_DISK_BYTES_PER_S,
        rtt_ms=(time.perf_counter() - started) * 1000,
    )


async def measured_fleet(
    model_dir: Path,
    endpoints: Sequence[WorkerEndpoint],
    identity: KeyPair,
    local_stage: StageConfig,
) -> MeasuredDevices:
    """This PC, then the workers of ``endpoints``, with layer times measured on ``model_dir``'s
    probe stage when it is an export (else estimated, and the result says why)."""
    workers = await asyncio.gather(*(_estimated(endpoint) for endpoint in endpoints))
    base = [coordinator_profile(), *workers]
    return await measure_devices(base, endpoints, identity, model_dir, local_stage=local_stage)
