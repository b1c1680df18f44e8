"""What a worker says about itself: in its DNS-SD record, its info probe and its HELLO reply.

A worker listens on two consecutive TCP ports: ``port`` carries the CURVE-encrypted protocol,
``port + 1`` answers an unauthenticated info probe with this record (JSON), which is how a
coordinator learns the worker's public key to pin it on first use, the way ssh shows a host key.
The record holds nothing secret.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from fleetgui.addresses import format_address
from fleetgui.errors import FleetguiError

DEFAULT_PORT = 5555  # a worker's protocol port; the info probe answers on the next one
INFO_PORT_OFFSET = 1  # the info probe listens on the protocol port + 1


class WorkerInfoError(FleetguiError):
    """A worker's self-description is malformed."""


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker PC as it describes itself."""

    name: str  # shown to users; unique per fleet by convention (hostname by default)
    host: str  # address coordinators reach it at
    port: int  # the encrypted protocol port (the info probe is port + 1)
    public_key: str  # CURVE public key (Z85, 40 characters)
    version: str  # fleetgui version
    protocol: int  # fleetgui wire protocol version
    os: str = ""  # e.g. "Windows 11 (10.0.22631)", "Linux 6.8 (Ubuntu 24.04)"
    cpu: str = ""  # CPU model name
    cpu_cores: int = 0  # logical cores
    ram_bytes: int = 0  # total memory
    free_ram_bytes: int = 0  # available memory when the record was made
    free_disk_bytes: int = 0  # free space in the worker's shard cache
    devices: tuple[str, ...] = field(default_factory=tuple)  # OpenVINO devices: CPU, GPU.0, NPU
    busy: bool = False  # serving a pipeline right now

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port``) of the encrypted protocol; pinned keys are filed by it."""
        return format_address(self.host, self.port)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> WorkerInfo:
        """Build from a decoded record; raise :class:`WorkerInfoError` naming the bad field."""
        if not isinstance(data, dict):
            raise WorkerInfoError("a worker info record must be a JSON object")
        values: dict[str, Any] = {}
        for name, kind in (("name", str), ("host", str), ("public_key", str), ("version", str)):
            if not isinstance(data.get(name), kind):
                raise WorkerInfoError(f"worker info field {name!r} is missing or not text")
            values[name] = data[name]
        for name in ("port", "protocol"):
            if not isinstance(data.get(name), int):
                raise WorkerInfoError(f"worker info field {name!r} is missing or not a number")
            values[name] = data[name]
        for name in ("os", "cpu"):
            values[name] = str(data.get(name, ""))[:200]
        for name in ("cpu_cores", "ram_bytes", "free_ram_bytes", "free_disk_bytes"):
            value = data.get(name, 0)
            values[name] = value if isinstance(value, int) and value >= 0 else 0
        devices = data.get("devices", [])
        values["devices"] = tuple(str(d)[:40] for d in devices if isinstance(d, str))[:16]
        values["busy"] = bool(data.get("busy", False))
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise WorkerInfoError(f"a worker info record is not JSON: {exc}") from exc
        return cls.from_dict(data)
