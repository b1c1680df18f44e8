"""This PC (the coordinator) as a fleet row and as a planner device profile.

This PC's OS and CPU are read by the same probes a worker's info uses
(:mod:`fleetgui.net.sysinfo`), so this PC's row reads like the rows of workers on the same
machine; no port or key, since it is not a worker.
"""

from __future__ import annotations

import functools
import logging
import os
import socket

import psutil

from fleetgui import __version__
from fleetgui.net.sysinfo import cpu_model, os_description
from fleetgui.net.worker_info import WorkerInfo
from fleetgui.planner import DeviceProfile

log = logging.getLogger(__name__)

# Until a device benchmark has run, the planner preview assumes this decode time per layer: a
# 1B-class int4 layer on a recent laptop CPU. The preview says the figure is an estimate.
ESTIMATED_MS_PER_LAYER = 1.0
ESTIMATED_DISK_BYTES_PER_S = 1e9


@functools.cache
def openvino_devices() -> tuple[str, ...]:
    try:
        import openvino as ov

        return tuple(ov.Core().available_devices)
    except Exception as exc:  # a broken driver must not stop the app
        log.warning("could not list OpenVINO devices: %s", exc)
        return ()


def coordinator_name() -> str:
    return socket.gethostname().split(".")[0] or "this PC"


def coordinator_info() -> WorkerInfo:
    """This PC as a ``WorkerInfo`` (no key or port: it is not a worker)."""
    memory = psutil.virtual_memory()
    return WorkerInfo(
        name=coordinator_name(),
        host="localhost",
        port=0,
        public_key="",
        version=__version__,
        protocol=0,
        os=os_description(),
        cpu=cpu_model(),  # the model name, as workers report it (not platform.machine())
        cpu_cores=os.cpu_count() or 0,
        ram_bytes=int(memory.total),
        free_ram_bytes=int(memory.available),
        devices=openvino_devices(),
    )


def coordinator_profile(ms_per_layer: float = ESTIMATED_MS_PER_LAYER) -> DeviceProfile:
    """The planner's view of this PC: its available memory and a layer time."""
    return DeviceProfile(
        name=coordinator_name(),
        memory_bytes=int(psutil.virtual_memory().available),
        ms_per_layer=ms_per_layer,
        disk_read_bytes_per_s=ESTIMATED_DISK_BYTES_PER_S,
    )
