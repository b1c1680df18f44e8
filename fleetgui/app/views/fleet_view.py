"""The fleet: the ring as a picture (who runs which layers, where the time goes, failovers) and
every known worker in a table with its status and why; add one by address; pair."""

from __future__ import annotations

import logging

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fleetgui.app.fleet.topology import Topology
from fleetgui.app.fleet.worker_table import ROW_ROLE, WorkerTableModel
from fleetgui.app.views.topology_view import TopologyView

log = logging.getLogger(__name__)

# No column grows wider than this to fit its text: a long one (an error and its fix, a CPU's
# name) is elided in its cell and read whole in its tooltip, so the columns stay on screen.
MAX_COLUMN_PX = 240


class FleetView(QWidget):
    """Renders the workers' table model and the ring's picture; emits what the user asks for."""

    add_requested = Signal(str)  # host:port
    pair_requested = Signal(str, str)  # worker name, pairing code
    forget_requested = Signal(str)  # worker name

    def __init__(self, workers: WorkerTableModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workers = workers
        self.table = QTableView()
        self.table.setModel(workers)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)  # pair one
        self.table.setWordWrap(False)  # one line per worker: long texts are elided instead
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setMaximumSectionSize(MAX_COLUMN_PX)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)  # the table fills the tab's width
        self.address = QLineEdit()
        self.address.setPlaceholderText("host:port of a worker")
        add = QPushButton("Add worker")
        add.clicked.connect(self._add)
        self.address.returnPressed.connect(self._add)
        self.code = QLineEdit()
        self.code.setPlaceholderText("pairing code shown by the worker")
        pair = QPushButton("Pair selected")
        pair.clicked.connect(self._pair)
        # a dead or mistyped worker would otherwise stay listed for good
        forget = QPushButton("Forget selected")
        forget.setToolTip("Remove the selected worker from this list and forget its key")
        forget.clicked.connect(self._forget)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._show_menu)
        actions = QHBoxLayout()
        for widget in (self.address, add, self.code, pair, forget):
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
        for changed in (
            workers.rowsInserted,
            workers.rowsRemoved,
            workers.dataChanged,
            workers.modelReset,
        ):
            changed.connect(self._show_changes)
        self._show_changes()

    def _add(self) -> None:
        if self.address.text().strip():
            self.add_requested.emit(self.address.text().strip())

    def show_topology(self, topology: Topology) -> None:
        self.picture.show_topology(topology)

    def select(self, name: str) -> None:
        """Select worker ``name``'s row (a click on its box in the picture does)."""
        row = self.workers.row_of(name)
        if row is not None:
            self.table.selectRow(row)

    def selected_worker(self) -> str | None:
        """The name of the worker whose row is selected, if any."""
        selected = self.table.selectionModel().selectedRows()
        return selected[0].data(ROW_ROLE).name if selected else None

    def _pair(self) -> None:
        name = self.selected_worker()
        if name is not None:
            self.pair_requested.emit(name, self.code.text().strip())

    def _forget(self) -> None:
        name = self.selected_worker()
        if name is not None:
            self.forget_requested.emit(name)

    def forget_menu(self, row: int) -> QMenu | None:
        """The context menu of ``row`` (None for this PC's, which cannot be forgotten)."""
        worker = self.workers.row_at(row) if 0 <= row < self.workers.rowCount() else None
        if worker is None or worker.coordinator:
            return None
        menu = QMenu(self.table)
        action = menu.addAction(f"Forget {worker.name}")
        action.triggered.connect(lambda: self.forget_requested.emit(worker.name))
        return menu

    def _show_menu(self, position: QPoint) -> None:
        index = self.table.indexAt(position)
        menu = self.forget_menu(index.row()) if index.isValid() else None
        if menu is not None:
            menu.exec(self.table.viewport().mapToGlobal(position))

    def _show_changes(self, *_: object) -> None:
        self.summary.setText(self.workers.summary())
        # the header fits its columns to their contents on resizes only, not on new rows or texts
        self.table.horizontalHeader().resizeSections()
