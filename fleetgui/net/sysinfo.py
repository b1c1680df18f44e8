"""What this PC is: OS, CPU, memory, disk and OpenVINO devices, as a :class:`WorkerInfo`.

The slow or fixed parts (OS name, CPU model, OpenVINO devices) are computed once per process and
cached; memory and disk are read on every call, so a worker can build a fresh record for each
info probe. Nothing here raises because of an odd machine: a value that cannot be read is left
empty (and logged), since a worker must start even where ``/proc`` or the registry differ.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from fleetgui import __version__
from fleetgui.net.protocol import PROTOCOL_VERSION
from fleetgui.net.worker_info import WorkerInfo

logger = logging.getLogger(__name__)

_SYSCTL_TIMEOUT_S = 2.0
_WINDOWS_11_FIRST_BUILD = 22000  # Windows 11 still reports release "10"; its builds start here


def default_worker_name() -> str:
    """The name a worker shows by default: the host name without its domain."""
    return socket.gethostname().split(".")[0] or "worker"


def _major_minor(release: str) -> str:
    parts = release.split("-", maxsplit=1)[0].split(".")
    return ".".join(parts[:2])


def windows_description(release: str, version: str, edition: str = "") -> str:
    """``"Windows 11 Professional (10.0.22631)"`` from ``platform.win32_ver()`` values."""
    try:
        build = int(version.split(".")[2])
    except (IndexError, ValueError):
        build = 0
    name = "11" if release == "10" and build >= _WINDOWS_11_FIRST_BUILD else release
    words = ["Windows", name, edition]
    text = " ".join(word for word in words if word)
    return f"{text} ({version})" if version else text


@functools.cache
def os_description() -> str:
    """A readable OS name: ``"Linux 6.8 (Ubuntu 24.04.1 LTS)"``, ``"Windows 11 Pro (10.0.…)"``,
    ``"macOS 14.5"``."""
    system = platform.system()
    if system == "Windows":
        release, version, _, _ = platform.win32_ver()
        return windows_description(release, version, platform.win32_edition() or "")
    if system == "Darwin":
        mac_version = platform.mac_ver()[0]
        return f"macOS {mac_version}" if mac_version else "macOS"
    if system == "Linux":
        kernel = f"Linux {_major_minor(platform.release())}"
        try:
            distro = platform.freedesktop_os_release().get("PRETTY_NAME", "")
        except OSError:
            distro = ""
        return f"{kernel} ({distro})" if distro else kernel
    return f"{system} {platform.release()}".strip() or sys.platform


def cpu_model_from_cpuinfo(text: str) -> str:
    """The CPU model in the text of ``/proc/cpuinfo`` (x86 ``model name``; ARM ``Hardware``,
    ``Model`` or ``Processor``), or ``""``."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if sep and value and key not in fields:
            fields[key] = value
    for key in ("model name", "Hardware", "Model", "Processor", "cpu model"):
        if key in fields:
            return fields[key]
    return ""


def _windows_cpu_model() -> str:
    if sys.platform != "win32":  # lets type checkers on other systems skip winreg
        return ""
    import winreg

    try:
        path = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, path) as key:
            value, _ = winreg.QueryValueEx(key, "ProcessorNameString")
        return str(value).strip()
    except OSError as exc:
        logger.debug("CPU name not in the registry: %s", exc)
        return ""


def _macos_cpu_model() -> str:
    try:
        done = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"],
            capture_output=True,
            text=True,
            timeout=_SYSCTL_TIMEOUT_S,
            check=True,
        )
        return done.stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("sysctl gave no CPU name: %s", exc)
        return ""


@functools.cache
def cpu_model() -> str:
    """The CPU's model name, e.g. ``"Intel(R) Core(TM) Ultra 7 155H"``."""
    system = platform.system()
    name = ""
    if system == "Linux":
        try:
            name = cpu_model_from_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
        except OSError as exc:
            logger.debug("cannot read /proc/cpuinfo: %s", exc)
    elif system == "Windows":
        name = _windows_cpu_model()
    elif system == "Darwin":
        name = _macos_cpu_model()
    return " ".join((name or platform.processor() or platform.machine()).split())


@functools.cache
def openvino_devices() -> tuple[str, ...]:
    """OpenVINO's available devices (``("CPU", "GPU.0", "NPU")``), or ``()`` if OpenVINO fails.

    Computed once per process: enumerating devices loads the plugins, which takes a moment."""
    try:
        import openvino

        return tuple(str(device) for device in openvino.Core().available_devices)
    except Exception as exc:  # a broken driver must not stop the worker from starting
        logger.warning("OpenVINO lists no devices: %s", exc)
        return ()


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (its nearest existing parent), or 0."""
    candidate = Path(path).expanduser().absolute()
    for folder in (candidate, *candidate.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError as exc:
                logger.debug("disk usage of %s: %s", folder, exc)
                return 0
    return 0


def collect_worker_info(
    name: str | None,
    host: str,
    port: int,
    public_key: str,
    cache_dir: Path,
    *,
    busy: bool = False,
) -> WorkerInfo:
    """Describe this PC as a worker listening on ``host:port`` with CURVE key ``public_key``.

    ``name`` defaults to the host name; ``cache_dir`` is the shard cache whose disk is reported.
    Cheap after the first call (memory and disk are read fresh, the rest is cached).
    """
    memory = psutil.virtual_memory()
    return WorkerInfo(
        name=name or default_worker_name(),
        host=host,
        port=port,
        public_key=public_key,
        version=__version__,
        protocol=PROTOCOL_VERSION,
        os=os_description(),
        cpu=cpu_model(),
        cpu_cores=os.cpu_count() or 0,
        ram_bytes=int(memory.total),
        free_ram_bytes=int(memory.available),
        free_disk_bytes=free_disk_bytes(cache_dir),
        devices=openvino_devices(),
        busy=busy,
    )
