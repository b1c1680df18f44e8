"""A line at the top of the window for errors (with the fix) and notices."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from fleetgui.app.theme import colors

log = logging.getLogger(__name__)


class MessageBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        close = QPushButton("Dismiss")
        close.clicked.connect(self.hide)
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self.hide()

    def show_error(self, text: str) -> None:
        self._show(text, colors().error)

    def show_info(self, text: str) -> None:
        self._show(text, colors().muted)

    def _show(self, text: str, color: str) -> None:
        self.label.setText(text[:1].upper() + text[1:])
        self.label.setStyleSheet(f"color: {color}; font-weight: bold;")
        self.show()
