"""The fleet: the ring as a picture (who runs which layers, where the time goes, failovers) and
every known worker in a table with its status and why; add one by address; pair."""

from __future__ import annotations

import logging

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fleetgui.app.theme import colors
from fleetgui.app.topology import Topology
from fleetgui.app.views.topology_view import TopologyView
from fleetgui.app.worker_status import WorkerRow

log = logging.getLogger(__name__)

COLUMNS = ("Name", "Status", "OS", "CPU", "Memory", "OpenVINO devices", "Last seen", "Address")


class FleetView(QWidget):
    add_requested = Signal(str)  # host:port
    pair_requested = Signal(str, str)  # worker name, pairing code

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.address = QLineEdit()
        self.address.setPlaceholderText("host:port of a worker")
        add = QPushButton("Add worker")
        add.clicked.connect(self._add)
        self.address.returnPressed.connect(self._add)
        self.code = QLineEdit()
        self.code.setPlaceholderText("pairing code shown by the worker")
        pair = QPushButton("Pair selected")
        pair.clicked.connect(self._pair)
        actions = QHBoxLayout()
        for widget in (self.address, add, self.code, pair):
            actions.addWidget(widget)
        self.summary = QLabel()
        self.picture = TopologyView()
        self.picture.node_clicked.connect(self.select)  # then "Pair selected" pairs it
        self.views = QTabWidget()  # the picture first; the table has every detail and pairing
        self.views.addTab(self.picture, "Ring")
        self.views.addTab(self.table, "Table")
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.views, 1)
        layout.addLayout(actions)

    def _add(self) -> None:
        if self.address.text().strip():
            self.add_requested.emit(self.address.text().strip())

    def show_topology(self, topology: Topology) -> None:
        self.picture.show_topology(topology)

    def select(self, name: str) -> None:
        """Select worker ``name``'s row (a click on its box in the picture does)."""
        for index in range(self.table.rowCount()):
            item = self.table.item(index, 0)
            if item is not None and item.text() == name:
                self.table.selectRow(index)
                return

    def _pair(self) -> None:
        row = self.table.currentRow()
        if row >= 0:
            name_item = self.table.item(row, 0)
            if name_item is not None:
                self.pair_requested.emit(name_item.text(), self.code.text().strip())

    def set_rows(self, rows: list[WorkerRow]) -> None:
        palette = colors()
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            info = row.info
            cpu = f"{info.cpu} ({info.cpu_cores} threads)" if info.cpu_cores else info.cpu
            values = (
                f"{row.name} (coordinator)" if row.coordinator else row.name,
                str(row),
                info.os,
                cpu,
                row.memory_text,
                row.devices_text,
                row.last_seen_text(),
                "—" if row.coordinator else info.address,
            )
            for column, value in enumerate(values):
                item = QTableWidgetItem(value)
                if column == 1 and not row.status.usable:
                    item.setForeground(QColor(palette.error))
                self.table.setItem(index, column, item)
        usable = sum(1 for r in rows if r.status.usable)
        self.summary.setText(f"{len(rows)} PC(s) known, {usable} usable")
