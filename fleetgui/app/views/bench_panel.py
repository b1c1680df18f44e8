"""The dashboard's "Benchmark this fleet" panel: the button and its few settings, the progress
of a run with Cancel, then the run's plot, its table and where its files are. It only shows
and asks: :class:`~fleetgui.app.dashboard.fleet_bench.FleetBench` runs the benchmark."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from fleetgui.app.dashboard.bench_record import BenchReport, BenchSettings
from fleetgui.app.dashboard.fleet_bench import BenchStep

log = logging.getLogger(__name__)

PLOT_WIDTH = 640  # pixels the plot is shown at (the file keeps its own size)
IDLE_TEXT = "measures every decoding mode on the deployed model, as your network is"


class BenchPanel(QGroupBox):
    start_requested = Signal(int, int, str)  # tokens per stream, repeats, Ks ("1,3,auto")
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Benchmark", parent)
        defaults = BenchSettings()
        self.start = QPushButton("Benchmark this fleet")
        self.start.clicked.connect(self._start)
        self.tokens = QSpinBox()
        self.tokens.setRange(2, 4096)
        self.tokens.setValue(defaults.tokens)
        self.tokens.setToolTip("new tokens each stream generates in each run")
        self.repeats = QSpinBox()
        self.repeats.setRange(1, 20)
        self.repeats.setValue(defaults.repeats)
        self.ks = QLineEdit(",".join(str(k) for k in defaults.ks))
        self.ks.setToolTip("the Ks PP+SD is measured at, comma-separated; auto: K auto")
        self.ks.setMaximumWidth(160)
        self.cancel = QPushButton("Cancel")
        self.cancel.setToolTip("stop after the configuration under way; what ran is kept")
        self.cancel.clicked.connect(self.cancel_requested.emit)
        self.bar = QProgressBar()
        self.bar.setMaximumWidth(180)
        self.bar.hide()
        self.status = QLabel(IDLE_TEXT)
        self.status.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.start)
        for label, field in (
            ("tokens/stream", self.tokens),
            ("repeats", self.repeats),
            ("Ks", self.ks),
        ):
            row.addWidget(QLabel(label))
            row.addWidget(field)
        row.addWidget(self.cancel)
        row.addWidget(self.bar)
        row.addWidget(self.status, 1)
        self.plot = QLabel()
        self.plot.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignHCenter)
        self.table = QTextBrowser()
        self.files = QLabel()
        self.files.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.files.setOpenExternalLinks(True)
        self.files.setWordWrap(True)
        self.results = QSplitter()
        self.results.addWidget(self.plot)
        self.results.addWidget(self.table)
        self.results.hide()
        self.files.hide()
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.results, 1)
        layout.addWidget(self.files)
        self._why_not = ""
        self.set_running(False)
        self.set_available("deploy a model first: the benchmark measures the deployed one")

    def _start(self) -> None:
        self.start_requested.emit(self.tokens.value(), self.repeats.value(), self.ks.text())

    def set_available(self, why_not: str) -> None:
        """Enable the button when ``why_not`` is "", else say why it is off."""
        self.start.setEnabled(not why_not)
        self.start.setToolTip(why_not or "run every mode on the deployed model now")
        # the status line keeps a run's outcome; only the idle text follows the app's state
        if self.status.text() in (IDLE_TEXT, self._why_not):
            self.status.setText(why_not or IDLE_TEXT)
        self._why_not = why_not

    def set_running(self, running: bool) -> None:
        self.cancel.setEnabled(running)
        for field in (self.tokens, self.repeats, self.ks):
            field.setEnabled(not running)
        self.bar.setVisible(running)
        if running:
            self.bar.setRange(0, 0)  # busy until the first step says how many
            self.status.setText("starting…")

    def show_step(self, step: BenchStep) -> None:
        if step.total:
            self.bar.setRange(0, step.total)
            self.bar.setValue(step.done)
        self.status.setText(step.text() if step.total else step.what)

    def show_stopped(self, text: str) -> None:
        self.status.setText(text)

    def show_report(self, report: BenchReport) -> None:
        """The plot, the table and the files' paths."""
        pixmap = QPixmap(str(report.plot_path)) if report.plot_path is not None else QPixmap()
        if pixmap.isNull():
            self.plot.setText("\n".join(report.notes) or "no plot")
        else:
            self.plot.setPixmap(
                pixmap.scaledToWidth(PLOT_WIDTH, Qt.TransformationMode.SmoothTransformation)
            )
        self.table.setMarkdown(report.markdown)
        links = " · ".join(
            f'<a href="{QUrl.fromLocalFile(str(p)).toString()}">{p}</a>' for p in report.paths
        )
        self.files.setText(f"Saved: {links}")
        self.files.show()
        self.results.show()
        stopped = " (stopped early: fewer runs)" if report.info.interrupted else ""
        self.status.setText(
            f"measured {len(report.results.cells)} configurations in "
            f"{report.info.duration_s:g} s{stopped}"
        )
