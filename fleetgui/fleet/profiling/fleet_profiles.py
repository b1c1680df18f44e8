"""The fleet as ``fleetgui plan --workers`` sees it: this PC and the workers given by address,
each with the memory it has free and its layer time measured as the app's plan preview measures
it (:func:`~fleetgui.fleet.profiling.layer_times.measure_devices`), so a plan from the command
line needs no hand-written device profiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fleetgui.fleet.pairing.worker_addresses import probe_workers
from fleetgui.fleet.profiling.layer_times import measure_devices
from fleetgui.fleet.profiling.measured import MeasuredDevices
from fleetgui.fleet.profiling.this_pc import (
    ESTIMATED_DISK_BYTES_PER_S,
    ESTIMATED_MS_PER_LAYER,
    coordinator_profile,
)
from fleetgui.net.keys import KeyPair
from fleetgui.net.worker_info import WorkerInfo
from fleetgui.planner import DeviceProfile
from fleetgui.runtime.ov_stage import StageConfig


def estimated_profile(info: WorkerInfo) -> DeviceProfile:
    """A worker as its info probe describes it: its free memory (else its total) and an
    estimated layer time, until one is measured."""
    return DeviceProfile(
        name=info.name,
        memory_bytes=info.free_ram_bytes or info.ram_bytes,
        ms_per_layer=ESTIMATED_MS_PER_LAYER,
        disk_read_bytes_per_s=ESTIMATED_DISK_BYTES_PER_S,
    )


async def profile_fleet(
    model_dir: Path,
    addresses: Sequence[tuple[str, int]],
    identity: KeyPair,
    *,
    local_stage: StageConfig | None = None,
) -> MeasuredDevices:
    """This PC, then the workers at ``addresses`` (keys pinned or checked), with layer times
    measured on ``model_dir``'s probe stage when it is an export (else estimated, and the
    result says why)."""
    found = await probe_workers(addresses)
    base = [coordinator_profile(), *(estimated_profile(info) for info, _ in found)]
    return await measure_devices(
        base,
        [endpoint for _, endpoint in found],
        identity,
        model_dir,
        local_stage=local_stage or StageConfig(),
    )
