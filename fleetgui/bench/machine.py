"""What a benchmark ran on: the CPU, cores, memory, system and the software versions."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from fleetgui import __version__


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what the platform says)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cores() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_record() -> dict[str, Any]:
    """The machine, as the JSON output records it."""
    return {
        "cpu": cpu_name(),
        "cores": len(usable_cores()),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "system": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
    }


def versions_record() -> dict[str, str | None]:
    """fleetgui's and OpenVINO's versions (genai's too, when installed)."""
    import openvino

    return {
        "fleetgui": __version__,
        "openvino": openvino.get_version(),
        "openvino_genai": _version("openvino-genai"),
    }
