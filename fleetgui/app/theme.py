"""Look and feel: high-DPI defaults before the app starts, the system's light or dark scheme, and
colours for charts and code blocks taken from the current palette."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication, QPalette

log = logging.getLogger(__name__)

MONOSPACE = "'Cascadia Mono', 'DejaVu Sans Mono', Consolas, 'Liberation Mono', monospace"


def configure_high_dpi() -> None:
    """Call before the QApplication exists: exact (fractional) scaling on 125 % / 150 % screens."""
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(
        Qt.HighDpiScaleFactorRoundingPolicy.PassThrough
    )


def is_dark() -> bool:
    """Whether the system (or the palette Qt derived from it) is in dark mode."""
    app = QGuiApplication.instance()
    if not isinstance(app, QGuiApplication):
        return False
    scheme = app.styleHints().colorScheme()
    if scheme != Qt.ColorScheme.Unknown:
        return scheme == Qt.ColorScheme.Dark
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


@dataclass(frozen=True)
class Colors:
    background: str
    foreground: str
    code_background: str
    code_border: str
    muted: str
    user: str
    error: str
    series: tuple[str, ...]


LIGHT = Colors(
    "#ffffff", "#1f2328", "#f3f4f6", "#d0d7de", "#656d76", "#0969da", "#cf222e",
    ("#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bc4c00", "#1b7c83"),
)  # fmt: skip
DARK = Colors(
    "#0d1117", "#e6edf3", "#161b22", "#30363d", "#8d96a0", "#58a6ff", "#ff7b72",
    ("#58a6ff", "#ff7b72", "#3fb950", "#d29922", "#bc8cff", "#ffa657", "#39c5cf"),
)  # fmt: skip


def colors() -> Colors:
    return DARK if is_dark() else LIGHT


class ThemeWatcher(QObject):
    """Emits ``changed(Colors)`` when the app switches between light and dark while it runs.

    Two sources: Qt's colour scheme (``QStyleHints.colorSchemeChanged``) and the application
    palette, which Qt replaces when the system theme changes on platforms that report no colour
    scheme (and which code may set). ``window`` is watched for the palette change events Qt sends
    every window; the application object itself is not filtered (that would see every event of
    every widget)."""

    changed = Signal(object)  # Colors

    def __init__(self, window: QObject) -> None:
        super().__init__(window)
        self.colors = colors()
        window.installEventFilter(self)
        app = QGuiApplication.instance()
        if isinstance(app, QGuiApplication):
            app.styleHints().colorSchemeChanged.connect(self.check)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() in (QEvent.Type.ApplicationPaletteChange, QEvent.Type.PaletteChange):
            self.check()
        return False

    def check(self) -> None:
        """Emit ``changed`` if the colours differ from the last ones seen."""
        current = colors()
        if current != self.colors:
            self.colors = current
            self.changed.emit(current)
