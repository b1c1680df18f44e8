"""A worker as the fleet view shows it: what it says about itself and how the coordinator sees
it. Plain data; :class:`fleetgui.app.fleet.worker_table.WorkerTableModel` holds the rows."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

from fleetgui.net.worker_info import WorkerInfo

GB = 1e9


class WorkerStatus(enum.Enum):
    ONLINE = "online"  # answering, paired, same protocol, idle
    BUSY = "busy"  # serving a pipeline
    LOST = "lost"  # was online, stopped answering
    NOT_PAIRED = "not paired"  # answers, but does not trust this coordinator yet
    WRONG_VERSION = "wrong version"  # speaks another protocol version
    NOT_ANSWERING = "not answering"  # never seen: the PC or its worker does not answer
    PORT_CLOSED = "port closed"  # never seen: nothing listens on the worker's port
    NOT_FLEETGUI = "not a fleetgui worker"  # another program owns the port
    KEY_CHANGED = "key changed"  # offers another key than the one pinned on first use

    @property
    def usable(self) -> bool:
        return self in (WorkerStatus.ONLINE, WorkerStatus.BUSY)


@dataclass(frozen=True)
class WorkerRow:
    """One line of the fleet view."""

    info: WorkerInfo
    status: WorkerStatus
    reason: str = ""  # why it is not usable, and what to do (empty when usable)
    last_seen: float = 0.0  # time.time() of its last answer
    coordinator: bool = False  # this PC

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def memory_text(self) -> str:
        info = self.info
        if not info.ram_bytes:
            return "?"
        return f"{info.free_ram_bytes / GB:.1f} of {info.ram_bytes / GB:.1f} GB free"

    @property
    def devices_text(self) -> str:
        return ", ".join(self.info.devices) or "?"

    def last_seen_text(self, now: float | None = None) -> str:
        if self.coordinator:
            return "this PC"
        if not self.last_seen:
            return "never"
        ago = max(0.0, (time.time() if now is None else now) - self.last_seen)
        if ago < 5:
            return "just now"
        if ago < 120:
            return f"{ago:.0f} s ago"
        if ago < 7200:
            return f"{ago / 60:.0f} min ago"
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.last_seen))

    def __str__(self) -> str:
        text = self.status.value
        return f"{text}: {self.reason}" if self.reason else text
