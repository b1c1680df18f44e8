"""Live charts of the pipeline's metrics (pyqtgraph), with pause and PNG/CSV export, and below
them the "Benchmark this fleet" panel (:mod:`fleetgui.app.views.bench_panel`)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from fleetgui.app.dashboard.metrics_series import CHARTS, ChartSpec, SeriesStore
from fleetgui.app.dashboard.series_colors import SeriesColors
from fleetgui.app.theme import colors
from fleetgui.app.views.api_panel import ApiPanel
from fleetgui.app.views.bench_panel import BenchPanel

log = logging.getLogger(__name__)

COLUMNS = 3


class DashboardView(QWidget):
    pause_toggled = Signal(bool)
    csv_requested = Signal(str)  # path
    clear_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plots: dict[str, pg.PlotWidget] = {}
        self.curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        self.series_colors = SeriesColors()  # a chat's lines share one colour on every chart
        grid = QGridLayout()
        for index, chart in enumerate(CHARTS):
            plot = pg.PlotWidget(title=chart.title)
            plot.setLabel("left", chart.unit)
            plot.getAxis("left").enableAutoSIPrefix(False)
            plot.setLabel("bottom", "time", "s")
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.addLegend(offset=(5, 5))
            plot.setMinimumSize(200, 150)
            self.plots[chart.key] = plot
            grid.addWidget(plot, index // COLUMNS, index % COLUMNS)
        self.pause = QPushButton("Pause")
        self.pause.setCheckable(True)
        self.pause.toggled.connect(self.pause_toggled.emit)
        png = QPushButton("Export PNG…")
        png.clicked.connect(self._ask_png)
        csv = QPushButton("Export CSV…")
        csv.clicked.connect(self._ask_csv)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.clear_requested.emit)
        self.info = QLabel("charts fill in while the model generates")
        self.replicas = QLabel()  # which whole copy serves how many streams, when copies run
        self.kv = QLabel()  # the KV each PC holds, and what the last reply reused of it
        self._kv_memory = ""
        self._kv_reused: int | None = None
        bar = QHBoxLayout()
        for widget in (self.pause, png, csv, clear):
            bar.addWidget(widget)
        bar.addWidget(self.info, 1)
        self.api = ApiPanel()  # the OpenAI-compatible API's switch, URL, key and requests/s
        self.bench = BenchPanel()  # its results share the height with the charts
        charts = QWidget()
        charts.setLayout(grid)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(charts)
        self.split.addWidget(self.bench)
        self.split.setStretchFactor(0, 3)
        self.split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(self.api)
        layout.addLayout(bar)
        layout.addWidget(self.replicas)
        layout.addWidget(self.kv)
        layout.addWidget(self.split, 1)
        self.apply_theme()

    def apply_theme(self) -> None:
        palette = colors()
        for plot in self.plots.values():
            plot.setBackground(palette.background)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setPen(palette.foreground)
                plot.getAxis(axis).setTextPen(palette.foreground)
        for chart in CHARTS:
            plot = self.plots[chart.key]
            plot.setTitle(chart.title, color=palette.foreground)
            legend = plot.getPlotItem().legend
            if legend is not None:
                legend.setLabelTextColor(palette.foreground)
        for (_, name), curve in self.curves.items():
            color = self.series_colors.color(name, palette.series)
            curve.setPen(pg.mkPen(color, width=2))
            curve.setSymbolBrush(color)

    def _ask_png(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save charts", "charts.png", "PNG (*.png)")
        if path:
            self.save_png(Path(path))

    def _ask_csv(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save data", "metrics.csv", "CSV (*.csv)")
        if path:
            self.csv_requested.emit(path)

    def save_png(self, path: Path) -> bool:
        """Render the charts as they are shown to ``path``."""
        saved = bool(self.grab().save(str(path), "PNG"))
        log.info("charts %s to %s", "saved" if saved else "NOT saved", path)
        return saved

    def set_paused(self, paused: bool) -> None:
        self.pause.blockSignals(True)
        self.pause.setChecked(paused)
        self.pause.setText("Resume" if paused else "Pause")
        self.pause.blockSignals(False)
        self.info.setText("paused: data is still recorded" if paused else "")

    def show_replicas(self, text: str) -> None:
        if text != self.replicas.text():
            self.replicas.setText(text)
        self.replicas.setVisible(bool(text))

    def show_kv(self, memory: str | None = None, reused: int | None = None) -> None:
        """The KV line: ``memory`` as ``kv_text`` says it, and the prompt tokens the last reply
        did not compute again (None: keep what is shown)."""
        if memory is not None:
            self._kv_memory = memory
        if reused is not None:
            self._kv_reused = reused
        parts = [self._kv_memory] if self._kv_memory else []
        if self._kv_reused is not None:
            parts.append(f"last reply reused {self._kv_reused:,} prompt tokens")
        text = "; ".join(parts)
        if text != self.kv.text():
            self.kv.setText(text)
        self.kv.setVisible(bool(text))

    def _curve(self, chart: ChartSpec, name: str) -> pg.PlotDataItem:
        curve = self.curves.get((chart.key, name))
        if curve is None:
            plot = self.plots[chart.key]
            color = self.series_colors.color(name, colors().series)
            symbol = "o" if chart.key == "ttft_ms" else None
            # "finite": a series' NaN entries are its breaks (idle gaps), not drawn across
            curve = plot.plot(
                name=name,
                pen=pg.mkPen(color, width=2),
                symbol=symbol,
                symbolBrush=color,
                connect="finite",
            )
            self.curves[(chart.key, name)] = curve
        return curve

    def show_series(self, store: SeriesStore) -> None:
        """Redraw every chart from ``store``."""
        for chart in CHARTS:
            series_list = store.series(chart)
            if not series_list:
                for key, curve in list(self.curves.items()):
                    if key[0] == chart.key:
                        self.plots[chart.key].removeItem(curve)
                        del self.curves[key]
                continue
            for series in series_list:
                self._curve(chart, series.name).setData(
                    np.fromiter(series.x, float, len(series)),
                    np.fromiter(series.y, float, len(series)),
                    connect="finite",
                )
        self.info.setText(f"{store.total_points()} points")
