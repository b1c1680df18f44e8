"""The dashboard's API panel: the switch that serves the deployed model on the OpenAI-compatible
API, its URL, its key (hidden, with a copy button) and the requests per second."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from fleetgui.app.dashboard.api_service import ApiState

OFF_TEXT = "off: other programs (editors, web UIs, scripts) can use the model through it"


class ApiPanel(QGroupBox):
    serve_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("OpenAI-compatible API", parent)
        self.switch = QCheckBox("Serve the deployed model")
        self.switch.toggled.connect(self.serve_toggled.emit)
        self.url = QLabel(OFF_TEXT)
        self.url.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.key = QLineEdit()
        self.key.setReadOnly(True)
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("API key")
        self.key.setMaximumWidth(220)
        self.copy_key = QPushButton("Copy key")
        self.copy_key.clicked.connect(self._copy_key)
        self.rate = QLabel("")
        row = QHBoxLayout(self)
        row.addWidget(self.switch)
        row.addWidget(self.url, 1)
        row.addWidget(self.key)
        row.addWidget(self.copy_key)
        row.addWidget(self.rate)
        self.show_state(ApiState(False))

    def show_state(self, state: ApiState) -> None:
        """Show ``state`` without emitting ``serve_toggled``."""
        blocked = self.switch.blockSignals(True)
        try:
            self.switch.setChecked(state.serving)
        finally:
            self.switch.blockSignals(blocked)
        if state.serving:
            note = f"; {state.note}" if state.note else ""
            self.url.setText(f"{state.url}  (model {state.model}{note})")
        else:
            self.url.setText(state.note or OFF_TEXT)
        self.key.setText(state.key)
        self.copy_key.setEnabled(bool(state.key))
        self.key.setEnabled(state.serving)
        self.rate.setText("0.0 requests/s" if state.serving else "")

    def show_rate(self, per_s: float) -> None:
        if self.switch.isChecked():
            self.rate.setText(f"{per_s:.1f} requests/s")

    def _copy_key(self) -> None:
        clipboard = QGuiApplication.clipboard()
        if clipboard is not None and self.key.text():
            clipboard.setText(self.key.text())
