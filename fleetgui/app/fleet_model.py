"""``FleetModel``: the workers the coordinator knows, for the fleet view. No networking here:
the fleet code (discovery, heartbeats, pairing) calls ``upsert`` and ``mark_lost``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QObject, Signal

from fleetgui.app.worker_status import WorkerRow, WorkerStatus
from fleetgui.net.worker_info import WorkerInfo

log = logging.getLogger(__name__)


class FleetModel(QObject):
    """Worker rows by name, the coordinator first, then in the order they were first seen."""

    worker_added = Signal(str)  # name
    worker_changed = Signal(str)  # name
    worker_removed = Signal(str)  # name
    worker_lost = Signal(str, str)  # name, reason (also a worker_changed)

    def __init__(
        self, parent: QObject | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(parent)
        self._rows: dict[str, WorkerRow] = {}
        self._clock = clock

    def rows(self) -> list[WorkerRow]:
        return sorted(self._rows.values(), key=lambda r: not r.coordinator)

    def get(self, name: str) -> WorkerRow | None:
        return self._rows.get(name)

    def names(self) -> list[str]:
        return [row.name for row in self.rows()]

    def set_coordinator(self, info: WorkerInfo) -> None:
        """This PC, shown first and always online."""
        self._put(WorkerRow(info, WorkerStatus.ONLINE, "", self._clock(), coordinator=True))

    def upsert(
        self, info: WorkerInfo, status: WorkerStatus, reason: str = "", *, seen: bool = True
    ) -> None:
        """A worker answered (or was probed): add it or refresh its row. ``seen=False``: it did
        not answer this time, so its row keeps its last-seen time."""
        if status is WorkerStatus.ONLINE and info.busy:
            status = WorkerStatus.BUSY
        old = self._rows.get(info.name)
        last_seen = self._clock() if seen else (old.last_seen if old is not None else 0.0)
        self._put(WorkerRow(info, status, reason, last_seen))

    def mark_lost(self, name: str, reason: str) -> None:
        """A known worker stopped answering; its row keeps its last-seen time."""
        row = self._rows.get(name)
        if row is None or row.coordinator:
            log.debug("mark_lost(%s): not a known worker", name)
            return
        self._rows[name] = replace(row, status=WorkerStatus.LOST, reason=reason)
        log.warning("worker %s lost: %s", name, reason)
        self.worker_changed.emit(name)
        self.worker_lost.emit(name, reason)

    def remove(self, name: str) -> None:
        if self._rows.pop(name, None) is not None:
            self.worker_removed.emit(name)

    def _put(self, row: WorkerRow) -> None:
        known = row.name in self._rows
        self._rows[row.name] = row
        if known:
            self.worker_changed.emit(row.name)
        else:
            log.info("worker %s: %s", row.name, row)
            self.worker_added.emit(row.name)
