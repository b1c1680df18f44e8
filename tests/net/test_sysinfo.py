"""What a worker reports about its PC: real values from this machine, parsers on real texts."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

import psutil
import pytest
from net_support import KEY

from fleetgui import __version__
from fleetgui.net import sysinfo
from fleetgui.net.protocol import PROTOCOL_VERSION
from fleetgui.net.worker_info import WorkerInfo


def test_collect_describes_this_pc(tmp_path: Path) -> None:
    info = sysinfo.collect_worker_info("pc-1", "127.0.0.1", 5555, KEY, tmp_path, busy=True)
    assert (info.name, info.host, info.port, info.public_key) == ("pc-1", "127.0.0.1", 5555, KEY)
    assert info.version == __version__
    assert info.protocol == PROTOCOL_VERSION
    assert info.cpu_cores == os.cpu_count()
    assert info.ram_bytes == psutil.virtual_memory().total
    assert 0 < info.free_ram_bytes <= info.ram_bytes
    free = shutil.disk_usage(tmp_path).free
    assert abs(info.free_disk_bytes - free) < 512 * 1024**2  # other writers share the disk
    assert "CPU" in info.devices  # OpenVINO's CPU plugin is always there
    assert info.cpu and info.os
    assert info.busy
    # the record survives the JSON the info probe sends
    assert WorkerInfo.from_json(info.to_json()) == info


def test_default_name_is_the_host_name(tmp_path: Path) -> None:
    info = sysinfo.collect_worker_info(None, "0.0.0.0", 5555, KEY, tmp_path)
    assert info.name == sysinfo.default_worker_name()
    assert info.name and "." not in info.name


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc and os-release")
def test_linux_os_and_cpu_match_the_system() -> None:
    release = platform.release()
    assert sysinfo.os_description().startswith("Linux " + ".".join(release.split(".")[:2]))
    pretty = platform.freedesktop_os_release().get("PRETTY_NAME")
    if pretty:
        assert f"({pretty})" in sysinfo.os_description()
    cpuinfo = Path("/proc/cpuinfo").read_text()
    assert sysinfo.cpu_model() == " ".join(sysinfo.cpu_model_from_cpuinfo(cpuinfo).split())


X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) Ultra 7 155H
flags\t\t: fpu vme

processor\t: 1
model name\t: Intel(R) Core(TM) Ultra 7 155H
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
CPU implementer\t: 0x41

Hardware\t: BCM2835
Model\t\t: Raspberry Pi 4 Model B Rev 1.4
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (X86_CPUINFO, "Intel(R) Core(TM) Ultra 7 155H"),
        (ARM_CPUINFO, "BCM2835"),
        ("processor\t: 0\n", ""),
        ("", ""),
    ],
)
def test_cpu_model_from_cpuinfo(text: str, expected: str) -> None:
    assert sysinfo.cpu_model_from_cpuinfo(text) == expected


@pytest.mark.parametrize(
    ("release", "version", "edition", "expected"),
    [
        ("10", "10.0.22631", "Professional", "Windows 11 Professional (10.0.22631)"),
        ("11", "10.0.26100", "", "Windows 11 (10.0.26100)"),
        ("10", "10.0.19045", "Core", "Windows 10 Core (10.0.19045)"),
        ("10", "", "", "Windows 10"),
    ],
)
def test_windows_description(release: str, version: str, edition: str, expected: str) -> None:
    assert sysinfo.windows_description(release, version, edition) == expected


def test_free_disk_of_a_cache_that_does_not_exist_yet(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "yet" / "created"
    assert sysinfo.free_disk_bytes(missing) > 0
    assert not missing.exists()  # measuring never creates the cache
    assert abs(sysinfo.free_disk_bytes(missing) - shutil.disk_usage(tmp_path).free) < 512 * 1024**2


def test_openvino_devices_are_cached() -> None:
    assert sysinfo.openvino_devices() is sysinfo.openvino_devices()
