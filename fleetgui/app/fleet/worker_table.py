"""``WorkerTableModel``: the workers the coordinator knows, as a Qt table model the fleet view
shows in a ``QTableView``. No networking here: the fleet code (discovery, heartbeats, pairing)
calls ``upsert`` and ``mark_lost``.

One row per worker, this PC (the coordinator) first, then in the order they were first seen;
one column per entry of :data:`COLUMNS`. Besides the standard model signals (rows inserted,
moved, removed; ``dataChanged`` for one row) it emits domain signals by worker name for code
that does not care about rows (the topology feed, the main window's "worker lost" message).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor

from fleetgui.app.fleet.worker_status import WorkerRow, WorkerStatus
from fleetgui.app.theme import colors
from fleetgui.net.worker_info import WorkerInfo

log = logging.getLogger(__name__)


COLUMNS = ("Name", "Status", "OS", "CPU", "Memory", "OpenVINO devices", "Last seen", "Address")
STATUS_COLUMN = COLUMNS.index("Status")  # red when the worker is not usable
ROW_ROLE = Qt.ItemDataRole.UserRole + 1  # data(): the row's WorkerRow, in any column

Index = QModelIndex | QPersistentModelIndex
_TEXT_ROLES = (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole)


def row_texts(row: WorkerRow, now: float) -> tuple[str, ...]:
    """The texts of ``row`` in :data:`COLUMNS` order, "last seen" counted to ``now``."""
    info = row.info
    cpu = f"{info.cpu} ({info.cpu_cores} threads)" if info.cpu_cores else info.cpu
    return (
        f"{row.name} (coordinator)" if row.coordinator else row.name,
        str(row),
        info.os,
        cpu,
        row.memory_text,
        row.devices_text,
        row.last_seen_text(now),
        "—" if row.coordinator else info.address,
    )


def _order(row: WorkerRow, seen: int) -> tuple[bool, int]:
    return (not row.coordinator, seen)


class WorkerTableModel(QAbstractTableModel):
    """Worker rows by name, the coordinator first, then in the order they were first seen."""

    worker_added = Signal(str)  # name
    worker_changed = Signal(str)  # name
    worker_removed = Signal(str)  # name
    worker_lost = Signal(str, str)  # name, reason (also a worker_changed)

    def __init__(
        self, parent: QObject | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(parent)
        self._rows: list[WorkerRow] = []  # in display order
        self._first_seen: dict[str, int] = {}  # name -> when it was added, as a sequence number
        self._added = 0
        self._clock = clock

    # -- reading ------------------------------------------------------------------------------

    def rows(self) -> list[WorkerRow]:
        return list(self._rows)

    def get(self, name: str) -> WorkerRow | None:
        index = self.row_of(name)
        return None if index is None else self._rows[index]

    def names(self) -> list[str]:
        return [row.name for row in self._rows]

    def row_of(self, name: str) -> int | None:
        """The row number of worker ``name``, or None if it has no row."""
        return next((i for i, row in enumerate(self._rows) if row.name == name), None)

    def row_at(self, index: int) -> WorkerRow:
        return self._rows[index]

    def summary(self) -> str:
        usable = sum(1 for row in self._rows if row.status.usable)
        return f"{len(self._rows)} PC(s) known, {usable} usable"

    # -- writing ------------------------------------------------------------------------------

    def set_coordinator(self, info: WorkerInfo) -> None:
        """This PC, shown first and always online."""
        self.put(WorkerRow(info, WorkerStatus.ONLINE, "", self._clock(), coordinator=True))

    def upsert(
        self, info: WorkerInfo, status: WorkerStatus, reason: str = "", *, seen: bool = True
    ) -> None:
        """A worker answered (or was probed): add it or refresh its row. ``seen=False``: it did
        not answer this time, so its row keeps its last-seen time."""
        if status is WorkerStatus.ONLINE and info.busy:
            status = WorkerStatus.BUSY
        old = self.get(info.name)
        last_seen = self._clock() if seen else (old.last_seen if old is not None else 0.0)
        self.put(WorkerRow(info, status, reason, last_seen))

    def mark_lost(self, name: str, reason: str) -> None:
        """A known worker stopped answering; its row keeps its last-seen time."""
        index = self.row_of(name)
        if index is None or self._rows[index].coordinator:
            log.debug("mark_lost(%s): not a known worker", name)
            return
        self._replace(index, replace(self._rows[index], status=WorkerStatus.LOST, reason=reason))
        log.warning("worker %s lost: %s", name, reason)
        self.worker_changed.emit(name)
        self.worker_lost.emit(name, reason)

    def remove(self, name: str) -> None:
        index = self.row_of(name)
        if index is None:
            return
        self.beginRemoveRows(QModelIndex(), index, index)
        del self._rows[index]
        del self._first_seen[name]  # seen again later, it is listed last, as a new worker
        self.endRemoveRows()
        self.worker_removed.emit(name)

    def put(self, row: WorkerRow) -> None:
        """Add ``row`` as given, or replace the row of the same name."""
        index = self.row_of(row.name)
        if index is not None:
            self._replace(index, row)
            self.worker_changed.emit(row.name)
            return
        self._first_seen[row.name] = self._added
        self._added += 1
        at = self._position(self._rows, row)
        self.beginInsertRows(QModelIndex(), at, at)
        self._rows.insert(at, row)
        self.endInsertRows()
        log.info("worker %s: %s", row.name, row)
        self.worker_added.emit(row.name)

    def refresh(self) -> None:
        """Texts that depend on the time ("last seen") or colours on the theme changed."""
        if self._rows:
            last = self.index(len(self._rows) - 1, len(COLUMNS) - 1)
            self.dataChanged.emit(self.index(0, 0), last)

    def _replace(self, index: int, row: WorkerRow) -> None:
        # A row that becomes (or stops being) the coordinator moves, so the coordinator stays
        # first; otherwise it keeps its place and only its cells change.
        rest = self._rows[:index] + self._rows[index + 1 :]
        at = self._position(rest, row)
        if at != index:
            # Qt counts the destination before the row is taken out
            self.beginMoveRows(QModelIndex(), index, index, QModelIndex(), at + (at > index))
            rest.insert(at, row)
            self._rows = rest
            self.endMoveRows()
        else:
            self._rows[index] = row
        self.dataChanged.emit(self.index(at, 0), self.index(at, len(COLUMNS) - 1))

    def _position(self, rows: list[WorkerRow], row: WorkerRow) -> int:
        """Where ``row`` goes among ``rows`` (sorted): coordinator first, then first seen."""
        keys = [_order(r, self._first_seen[r.name]) for r in rows]
        return bisect.bisect(keys, _order(row, self._first_seen[row.name]))

    # -- QAbstractTableModel ------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt's API)
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        if role == ROW_ROLE:
            return row
        if role in _TEXT_ROLES:  # the tooltip: the whole text, which the cell may elide
            return row_texts(row, self._clock())[index.column()]
        if (
            role == Qt.ItemDataRole.ForegroundRole
            and index.column() == STATUS_COLUMN
            and not row.status.usable
        ):
            return QColor(colors().error)
        return None

    def headerData(  # noqa: N802 (Qt's name)
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(COLUMNS)
        ):
            return COLUMNS[section]
        return None
