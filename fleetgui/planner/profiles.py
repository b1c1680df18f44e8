"""Device profiles: what the planner knows about each PC, and the ``DEVICES.json`` file format.

A :class:`DeviceProfile` is the planner's input for one PC: memory it may use, the measured time of
one decoder layer, disk read speed and its link to the coordinator. A :class:`MachineProfile` is
what :mod:`fleetgui.planner.device_bench` measures on a PC (one timing per OpenVINO device); its
:meth:`MachineProfile.device_profile` picks the OpenVINO device a stage would run on.

``DEVICES.json`` is a JSON list of device profiles, the coordinator first::

    [{"name": "desk", "memory_bytes": 17179869184, "ms_per_layer": 1.2,
      "disk_read_bytes_per_s": 2e9, "rtt_ms": 0, "bandwidth_bytes_per_s": 1.25e8}, ...]

``rtt_ms`` and ``bandwidth_bytes_per_s`` are measured to the coordinator (the coordinator's own
are ignored). Optional fields: ``ov_device`` (e.g. ``"GPU.0"``).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

REQUIRED_FIELDS = (
    "name",
    "memory_bytes",
    "ms_per_layer",
    "disk_read_bytes_per_s",
    "rtt_ms",
    "bandwidth_bytes_per_s",
)
OPTIONAL_FIELDS = ("ov_device",)


class DevicesFileError(FleetguiError):
    """``DEVICES.json`` is missing, not JSON, or an entry has a missing or invalid field."""


@dataclass(frozen=True)
class DeviceProfile:
    """One PC as the planner sees it. The first profile of a fleet is the coordinator."""

    name: str  # unique name of the PC (host name or the user's label)
    memory_bytes: int  # memory a stage may use: free RAM, or GPU memory if it runs on a GPU
    ms_per_layer: float  # measured decode time of one decoder layer at the plan's weight format
    disk_read_bytes_per_s: float  # sequential read speed of the disk holding the shards
    rtt_ms: float = 0.0  # round trip to the coordinator (ignored for the coordinator itself)
    bandwidth_bytes_per_s: float = math.inf  # throughput to the coordinator (ignored for it)
    ov_device: str = "CPU"  # OpenVINO device the stage runs on

    def __post_init__(self) -> None:
        problem = field_problem(
            self.memory_bytes,
            self.ms_per_layer,
            self.disk_read_bytes_per_s,
            self.rtt_ms,
            self.bandwidth_bytes_per_s,
        )
        if not self.name.strip():
            problem = ("name", "must not be empty")
        if problem is not None:
            raise ValueError(f"device {self.name!r}: {problem[0]} {problem[1]}")

    def with_ms_per_layer(self, ms_per_layer: float) -> DeviceProfile:
        """A copy with a new layer time (e.g. a drifted runtime measurement)."""
        return replace(self, ms_per_layer=ms_per_layer)  # validated again by __post_init__

    def to_dict(self) -> dict[str, Any]:
        """The ``DEVICES.json`` entry of this profile."""
        return {
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "ms_per_layer": self.ms_per_layer,
            "disk_read_bytes_per_s": self.disk_read_bytes_per_s,
            "rtt_ms": self.rtt_ms,
            # JSON has no infinity: an unmeasured (perfect) link is written as 0
            "bandwidth_bytes_per_s": (
                self.bandwidth_bytes_per_s if math.isfinite(self.bandwidth_bytes_per_s) else 0
            ),
            "ov_device": self.ov_device,
        }


def field_problem(
    memory_bytes: float,
    ms_per_layer: float,
    disk_read_bytes_per_s: float,
    rtt_ms: float,
    bandwidth_bytes_per_s: float,
) -> tuple[str, str] | None:
    """The first invalid numeric field of a device profile and why, or None."""
    checks = (
        ("memory_bytes", memory_bytes, memory_bytes > 0, "must be positive"),
        (
            "ms_per_layer",
            ms_per_layer,
            math.isfinite(ms_per_layer) and ms_per_layer > 0,
            "must be a positive number",
        ),
        (
            "disk_read_bytes_per_s",
            disk_read_bytes_per_s,
            disk_read_bytes_per_s > 0,
            "must be positive",
        ),
        ("rtt_ms", rtt_ms, math.isfinite(rtt_ms) and rtt_ms >= 0, "must be zero or positive"),
        (
            "bandwidth_bytes_per_s",
            bandwidth_bytes_per_s,
            bandwidth_bytes_per_s > 0,
            "must be positive",
        ),
    )
    for key, value, ok, message in checks:
        if not ok:
            return key, f"{message}, got {value}"
    return None


@dataclass(frozen=True)
class ComputeProfile:
    """One OpenVINO device of a PC, measured with the model's kind of layer."""

    ov_device: str  # "CPU", "GPU.0", ...
    ms_per_layer: float  # trimmed-mean decode-step time of a real 1-layer shard after warm-up
    memory_bytes: int  # memory a stage on this device may use (free RAM, or GPU memory)


@dataclass(frozen=True)
class MachineProfile:
    """What one PC measured about itself for one model and weight format."""

    name: str  # the PC's name in the fleet
    model_id: str  # the model whose layer was timed (``name@hash``)
    weight_format: str  # "fp32", "fp16", "int8" or "int4"
    compute: tuple[ComputeProfile, ...]  # one entry per OpenVINO device, in name order
    free_ram_bytes: int  # psutil's available memory when measured
    disk_read_bytes_per_s: float  # measured sequential read speed of the shard cache's disk
    rtt_ms: float | None = None  # round trip to the coordinator; measured later by the fleet
    bandwidth_bytes_per_s: float | None = None  # to the coordinator; measured later by the fleet

    def best_compute(self) -> ComputeProfile:
        """The fastest OpenVINO device (ties broken by name)."""
        if not self.compute:
            raise ValueError(f"machine {self.name!r} has no measured OpenVINO device")
        return min(self.compute, key=lambda c: (c.ms_per_layer, c.ov_device))

    def device_profile(self, ov_device: str | None = None) -> DeviceProfile:
        """The planner's view of this PC running its stage on ``ov_device`` (default: fastest).

        Link fields not measured yet are taken as a perfect link (the coordinator's own case).
        """
        if ov_device is None:
            chosen = self.best_compute()
        else:
            matches = [c for c in self.compute if c.ov_device == ov_device]
            if not matches:
                known = ", ".join(c.ov_device for c in self.compute) or "none"
                raise ValueError(f"{self.name} has no measured {ov_device} (measured: {known})")
            chosen = matches[0]
        return DeviceProfile(
            name=self.name,
            memory_bytes=chosen.memory_bytes,
            ms_per_layer=chosen.ms_per_layer,
            disk_read_bytes_per_s=self.disk_read_bytes_per_s,
            rtt_ms=self.rtt_ms if self.rtt_ms is not None else 0.0,
            bandwidth_bytes_per_s=(
                self.bandwidth_bytes_per_s if self.bandwidth_bytes_per_s is not None else math.inf
            ),
            ov_device=chosen.ov_device,
        )


def _number(entry: dict[str, Any], key: str, where: str) -> float:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DevicesFileError(f"{where}: field {key!r} must be a number, got {value!r}")
    return float(value)


def parse_devices(data: Any, source: str = "DEVICES.json") -> list[DeviceProfile]:
    """Validate the parsed JSON of a devices file; errors name the entry and the field."""
    if not isinstance(data, list) or not data:
        raise DevicesFileError(
            f"{source} must be a non-empty JSON list of device profiles (coordinator first)"
        )
    devices: list[DeviceProfile] = []
    seen: set[str] = set()
    for index, entry in enumerate(data):
        where = f"{source} entry {index}"
        if not isinstance(entry, dict):
            raise DevicesFileError(f"{where} must be a JSON object, got {type(entry).__name__}")
        if isinstance(entry.get("name"), str) and entry["name"].strip():
            where += f" ({entry['name']!r})"
        missing = [key for key in REQUIRED_FIELDS if key not in entry]
        if missing:
            raise DevicesFileError(f"{where}: missing field {missing[0]!r}")
        unknown = sorted(set(entry) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
        if unknown:
            known = ", ".join(REQUIRED_FIELDS + OPTIONAL_FIELDS)
            raise DevicesFileError(f"{where}: unknown field {unknown[0]!r} (known: {known})")
        name = entry["name"]
        if not isinstance(name, str) or not name.strip():
            raise DevicesFileError(f"{where}: field 'name' must be a non-empty string")
        if name in seen:
            raise DevicesFileError(f"{where}: field 'name' repeats {name!r}; names must be unique")
        seen.add(name)
        ov_device = entry.get("ov_device", "CPU")
        if not isinstance(ov_device, str) or not ov_device:
            raise DevicesFileError(f"{where}: field 'ov_device' must be a non-empty string")
        memory = _number(entry, "memory_bytes", where)
        if not math.isfinite(memory) or memory != int(memory):
            raise DevicesFileError(f"{where}: field 'memory_bytes' must be a whole number")
        values = {key: _number(entry, key, where) for key in REQUIRED_FIELDS[2:]}
        if index == 0:  # the coordinator's link to itself is perfect whatever the file says
            values["rtt_ms"], values["bandwidth_bytes_per_s"] = 0.0, math.inf
        problem = field_problem(memory, **values)
        if problem is not None:
            raise DevicesFileError(f"{where}: field {problem[0]!r} {problem[1]}")
        device = DeviceProfile(name=name, memory_bytes=int(memory), ov_device=ov_device, **values)
        devices.append(device)
    log.debug("read %d device profiles from %s", len(devices), source)
    return devices


def load_devices(path: Path) -> list[DeviceProfile]:
    """Read and validate ``DEVICES.json`` (see the module docstring for the format)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DevicesFileError(f"cannot read devices file {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DevicesFileError(f"{path} is not valid JSON ({exc})") from exc
    return parse_devices(data, str(path))


def save_devices(path: Path, devices: list[DeviceProfile]) -> None:
    """Write ``devices`` as a ``DEVICES.json`` file (coordinator first)."""
    from fleetgui.fsutil import atomic_write_text

    atomic_write_text(Path(path), json.dumps([d.to_dict() for d in devices], indent=2) + "\n")
