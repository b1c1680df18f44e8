"""The model library: the models found on this PC (the demo model first), what each is, whether
fleetgui can use it and why not, and "Use on the fleet"."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fleetgui.app.deploy.model_library import library_summary
from fleetgui.app.theme import colors
from fleetgui.library import Format, ModelEntry, Source
from fleetgui.library.entry import parameters_text, size_text

log = logging.getLogger(__name__)

COLUMNS = ("Name", "Source", "Architecture", "Parameters", "Quantization", "Size", "Usable",
           "Export")  # fmt: skip
USABLE_COLUMN = COLUMNS.index("Usable")
_SHORT_REASON = 90  # characters of the reason in the table; the tooltip has all of it
FIRST_RUN_TEXT = (
    "No model is deployed yet. Start with the demo model, or pick one of the models found on "
    "this PC, and press Use on the fleet: it is exported (if needed) and its plan previewed; "
    "then press Deploy."
)


def usable_text(entry: ModelEntry) -> str:
    if entry.problem is None:
        return "yes"
    reason = entry.problem
    return "no: " + (reason if len(reason) <= _SHORT_REASON else reason[: _SHORT_REASON - 1] + "…")


def export_text(entry: ModelEntry) -> str:
    if entry.format is Format.EXPORT:
        return "is one"
    if not entry.exports:
        return entry.note if entry.source is Source.DEMO else "—"  # what using it will do
    more = f" (+{len(entry.exports) - 1})" if len(entry.exports) > 1 else ""
    return entry.exports[0].name + more


def source_text(entry: ModelEntry) -> str:
    if entry.source is Source.FOLDER and entry.origin is not None:
        return f"folder {entry.origin.name}"
    return entry.source.value


def tooltip(entry: ModelEntry) -> str:
    lines = [str(entry.path)]
    if entry.note:
        lines.append(entry.note)
    if entry.problem:
        lines.append(f"Cannot be used: {entry.problem}")
    lines += [f"export: {path}" for path in entry.exports]
    return "\n".join(lines)


class LibraryView(QWidget):
    use_requested = Signal(object)  # ModelEntry
    refresh_requested = Signal()
    add_folder_requested = Signal(str)
    remove_folder_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entries: list[ModelEntry] = []
        self._busy = False
        self._first_run = False
        self.first_run = QLabel(FIRST_RUN_TEXT)
        self.first_run.setWordWrap(True)
        self.first_run.hide()
        self.status = QLabel("looking for models…")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.cellDoubleClicked.connect(lambda *_: self._use())
        self.use_button = QPushButton("Use on the fleet")
        self.use_button.setToolTip("export the model if needed and preview its plan")
        self.use_button.clicked.connect(self._use)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh_requested.emit)
        add = QPushButton("Add folder…")
        add.clicked.connect(self._browse)
        self.forget_button = QPushButton("Forget folder")
        self.forget_button.setToolTip("stop listing the folder the selected model was found in")
        self.forget_button.clicked.connect(self._forget)
        buttons = QHBoxLayout()
        buttons.addWidget(self.use_button)
        buttons.addStretch(1)
        for button in (self.refresh_button, add, self.forget_button):
            buttons.addWidget(button)
        top = QHBoxLayout()
        top.addWidget(self.status, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.first_run)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        self._update_buttons()

    # -- what the user does -------------------------------------------------------------------

    def selected_entry(self) -> ModelEntry | None:
        row = self.table.currentRow()
        selected = self.table.selectionModel().isRowSelected(row) if row >= 0 else False
        return self.entries[row] if selected and row < len(self.entries) else None

    def select(self, path: Path) -> bool:
        """Select the entry of ``path``; False if none is listed."""
        for row, entry in enumerate(self.entries):
            if entry.path == path:
                self.table.selectRow(row)
                return True
        return False

    def _use(self) -> None:
        entry = self.selected_entry()
        if entry is not None and entry.supported and not self._busy:
            self.use_requested.emit(entry)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder that holds models")
        if folder:
            self.add_folder_requested.emit(folder)

    def _forget(self) -> None:
        entry = self.selected_entry()
        if entry is not None and entry.origin is not None:
            self.remove_folder_requested.emit(str(entry.origin))

    def _update_buttons(self) -> None:
        entry = self.selected_entry()
        self.use_button.setEnabled(entry is not None and entry.supported and not self._busy)
        self.forget_button.setEnabled(entry is not None and entry.origin is not None)

    # -- slots --------------------------------------------------------------------------------

    def set_entries(self, entries: list[ModelEntry]) -> None:
        """Show ``entries``, keeping the selected model selected."""
        chosen = self.selected_entry()
        self.entries = list(entries)
        muted = QColor(colors().muted)
        self.table.setRowCount(len(entries))
        for row, entry in enumerate(entries):
            values = (
                entry.name,
                source_text(entry),
                entry.architecture or "?",
                parameters_text(entry.n_parameters),
                entry.quantization or "?",
                size_text(entry.size_bytes),
                usable_text(entry),
                export_text(entry),
            )
            tip = tooltip(entry)
            for column, value in enumerate(values):
                item = QTableWidgetItem(value)
                item.setToolTip(tip)
                if not entry.supported:
                    item.setForeground(muted)
                self.table.setItem(row, column, item)
        if chosen is None or not self.select(chosen.path):
            self.table.clearSelection()
            if self._first_run and entries:
                self.table.selectRow(0)  # the demo: where a new user starts
        self.status.setText(library_summary(entries))
        self._update_buttons()

    def set_scanning(self, scanning: bool) -> None:
        self.refresh_button.setEnabled(not scanning)
        if scanning:
            self.status.setText("looking for models…")

    def set_first_run(self, first_run: bool) -> None:
        """With no model deployed, say where to start (the demo is the first row)."""
        self._first_run = first_run
        self.first_run.setVisible(first_run)
        if first_run and self.entries and self.selected_entry() is None:
            self.table.selectRow(0)

    def set_busy(self, busy: bool) -> None:
        """A deployment job is running: Use on the fleet waits for it (Cancel stops it)."""
        self._busy = busy
        self._update_buttons()
