"""Model and deployment: choose a model or export, export it with progress, preview the plan,
deploy with a progress bar per PC, cancel. Also holds the mode panel and the context panel."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fleetgui.app.deploy.interfaces import DeployStep
from fleetgui.app.deploy.jobs import JobState
from fleetgui.app.deploy.model_choice import ModelKind
from fleetgui.app.settings import WEIGHTS
from fleetgui.app.views.context_panel import ContextPanel
from fleetgui.app.views.library_view import LibraryView
from fleetgui.app.views.mode_panel import ModePanel
from fleetgui.planner import Plan

log = logging.getLogger(__name__)

GB = 1e9
PLAN_COLUMNS = ("#", "PC", "Layers", "Memory", "Compute / token", "Hops", "Load")


class DeploymentView(QWidget):
    choose_requested = Signal(str)  # folder
    export_requested = Signal(str, int)  # weights, stages
    preview_requested = Signal()
    deploy_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.library = LibraryView()  # the models found on this PC, above the chosen one
        library_box = QGroupBox("Models on this PC")
        QVBoxLayout(library_box).addWidget(self.library)
        chosen = QWidget()
        left = QVBoxLayout(chosen)
        left.setContentsMargins(0, 0, 0, 0)
        left.addWidget(self._build_model())
        left.addWidget(self._build_plan(), 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(library_box)
        splitter.addWidget(chosen)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        layout = QHBoxLayout(self)
        layout.addWidget(splitter, 3)
        layout.addLayout(self._build_actions(), 2)

    def _build_model(self) -> QGroupBox:
        self.folder = QLineEdit()
        self.folder.setPlaceholderText(
            "a HuggingFace model folder, a .gguf file, a hub id (org/name) or a fleetgui export"
        )
        self.folder.returnPressed.connect(lambda: self.choose_requested.emit(self.folder.text()))
        browse = QPushButton("Choose folder…")
        browse.clicked.connect(self._browse)
        browse_gguf = QPushButton("Choose GGUF file…")
        browse_gguf.clicked.connect(self._browse_gguf)
        self.kind = QLabel("no model chosen")
        self._exportable = True  # the chosen model is not an export already
        row = QHBoxLayout()
        row.addWidget(self.folder, 1)
        row.addWidget(browse)
        row.addWidget(browse_gguf)
        self.weights = QComboBox()
        self.weights.addItems(WEIGHTS)
        self.stages = QSpinBox()
        self.stages.setRange(1, 64)
        self.stages.setValue(2)
        self.export_button = QPushButton("Export")
        self.export_button.clicked.connect(
            lambda: self.export_requested.emit(self.weights.currentText(), self.stages.value())
        )
        export_row = QHBoxLayout()
        export_row.addWidget(QLabel("weights"))
        export_row.addWidget(self.weights)
        export_row.addWidget(QLabel("stages"))
        export_row.addWidget(self.stages)
        export_row.addWidget(self.export_button)
        export_row.addStretch(1)
        model_box = QGroupBox("Model")
        model_form = QFormLayout(model_box)
        model_form.addRow("Folder", row)
        model_form.addRow("", self.kind)
        self.weights_info = QLabel()  # an export's weight format and verified quality
        self.weights_info.setToolTip(
            "top-1: how often the export's next token is the fp32 model's, on verification"
        )
        model_form.addRow("", self.weights_info)
        model_form.addRow("Export", export_row)
        return model_box

    def _build_plan(self) -> QGroupBox:
        self.plan_table = QTableWidget(0, len(PLAN_COLUMNS))
        self.plan_table.setHorizontalHeaderLabels(PLAN_COLUMNS)
        self.plan_table.verticalHeader().hide()
        self.plan_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.plan_table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.plan_table.horizontalHeader().setStretchLastSection(True)
        self.plan_summary = QLabel("press Preview plan to see which PC gets which layers")
        self.plan_summary.setWordWrap(True)
        self.left_out = QLabel()
        self.left_out.setWordWrap(True)
        self.layer_times = QLabel()
        self.layer_times.setWordWrap(True)
        self.layout_info = QLabel()  # the layout for the replies at once, and what Deploy runs
        self.layout_info.setWordWrap(True)
        self.layout_info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        preview = QPushButton("Preview plan")
        preview.clicked.connect(self.preview_requested.emit)
        plan_box = QGroupBox("Plan")
        plan_layout = QVBoxLayout(plan_box)
        plan_layout.addWidget(self.plan_table, 1)
        plan_layout.addWidget(self.plan_summary)
        plan_layout.addWidget(self.left_out)
        plan_layout.addWidget(self.layer_times)
        plan_layout.addWidget(self.layout_info)
        plan_layout.addWidget(preview)
        return plan_box

    def _build_actions(self) -> QVBoxLayout:
        self.status = QLabel("idle")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.workers_box = QGroupBox("Deployment progress per PC")
        self.workers_form = QFormLayout(self.workers_box)
        self.worker_bars: dict[str, QProgressBar] = {}
        self._deployed = False  # the last deployment ended ready: the overall bar stays full
        self.deploy_button = QPushButton("Deploy")
        self.deploy_button.setDefault(True)
        self.deploy_button.clicked.connect(self.deploy_requested.emit)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_requested.emit)
        self.ready = QLabel("nothing deployed")
        self.ready.setWordWrap(True)
        actions = QHBoxLayout()
        actions.addWidget(self.deploy_button)
        actions.addWidget(self.cancel_button)
        actions.addWidget(self.status, 1)
        self.mode_panel = ModePanel()
        right = QVBoxLayout()
        right.addWidget(self.mode_panel)
        self.context_panel = ContextPanel()
        right.addWidget(self.context_panel)
        right.addWidget(self.workers_box)
        right.addWidget(self.progress)
        right.addLayout(actions)
        right.addWidget(self.ready)
        right.addStretch(1)
        return right

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model or export folder")
        if folder:
            self.choose_requested.emit(folder)

    def _browse_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose a GGUF model file", "", "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.choose_requested.emit(path)

    # -- slots --------------------------------------------------------------------------------

    def on_model_changed(self, folder: str, kind: ModelKind) -> None:
        self.folder.setText(folder)
        self.kind.setText(f"{Path(folder).name}: {kind.value}")
        self._exportable = kind is not ModelKind.EXPORT
        self.export_button.setEnabled(self._exportable)
        self.plan_table.setRowCount(0)
        self.plan_summary.setText("press Preview plan to see which PC gets which layers")
        self.left_out.clear()
        self.layer_times.clear()
        self.layout_info.clear()

    def show_export_settings(self, weights: str, stages: int, editable: bool = True) -> None:
        """Show these export settings without asking to keep them (no signal)."""
        blocked = self.weights.blockSignals(True)
        try:
            self.weights.clear()
            self.weights.addItems(WEIGHTS if weights in WEIGHTS else (*WEIGHTS, weights))
            self.weights.setCurrentText(weights)
        finally:
            self.weights.blockSignals(blocked)
        self.stages.setValue(stages)
        self.weights.setEnabled(editable)
        self.stages.setEnabled(editable)

    def on_state(self, state: JobState) -> None:
        busy = state is not JobState.IDLE
        self.status.setText(state.value)
        self.cancel_button.setEnabled(busy)
        self.deploy_button.setEnabled(not busy)
        self.export_button.setEnabled(not busy and self._exportable)
        self.library.set_busy(busy)
        if state is JobState.DEPLOYING:
            self._deployed = False
            self._clear_worker_bars()  # a PC left out of this deployment keeps no old bar
        if busy:
            self.progress.setRange(0, 0)  # busy indicator until a step is reported
        else:
            # full once deployed, as every PC's bar then is; empty otherwise
            self.progress.setRange(0, 1)
            self.progress.setValue(1 if self._deployed else 0)

    def on_weights_described(self, text: str) -> None:
        self.weights_info.setText(text)

    def on_export_progress(self, step: int, total: int, message: str) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(step)
        self.status.setText(f"exporting: {message}")

    def on_plan(self, plan: Plan) -> None:
        self.plan_table.setRowCount(len(plan.stages))
        for index, stage in enumerate(plan.stages):
            values = (
                str(index),
                stage.device,
                f"{stage.shard.start_layer}–{stage.shard.end_layer - 1} "
                f"({stage.shard.n_stage_layers})",
                f"{stage.memory_bytes / GB:.2f} GB",
                f"{stage.compute_ms:.2f} ms",
                f"{stage.hop_in_ms + stage.hop_out_ms:.2f} ms",
                f"{stage.load_s:.1f} s",
            )
            for column, value in enumerate(values):
                self.plan_table.setItem(index, column, QTableWidgetItem(value))
        weights = self.weights_info.text() or plan.weight_format  # an export's, with quality
        self.plan_summary.setText(
            f"{plan.model_id} ({weights}): predicted {plan.predicted_tokens_per_s:.1f} "
            f"tokens/s with {plan.streams} stream(s), {plan.predicted_ms_per_token:.2f} ms per "
            f"token for one user."
        )
        self.left_out.setText(
            "Left out: " + "; ".join(f"{x.device}: {x.reason}" for x in plan.left_out)
            if plan.left_out
            else "Every PC is used."
        )

    def on_layout(self, text: str) -> None:
        self.layout_info.setText(text)

    def on_measuring(self, text: str) -> None:
        self.status.setText(text)

    def on_layer_times(self, text: str) -> None:
        self.layer_times.setText(text)

    def on_deploy_progress(self, progress: DeployStep) -> None:
        bar = self.worker_bars.get(progress.worker)
        if bar is None:
            bar = self.worker_bars[progress.worker] = QProgressBar()
            self.workers_form.addRow(progress.worker, bar)
        bar.setRange(0, 1000)
        bar.setValue(int(progress.fraction * 1000))
        bar.setFormat(f"{progress.step} (%p%)")
        self.status.setText(str(progress))
        # the overall bar: every PC's share done, so it never contradicts the bars above it
        bars = self.worker_bars.values()
        self.progress.setRange(0, 1000 * len(bars))
        self.progress.setValue(sum(b.value() for b in bars))

    def _clear_worker_bars(self) -> None:
        while self.workers_form.rowCount():
            self.workers_form.removeRow(0)
        self.worker_bars.clear()

    def on_deployed(self, description: str) -> None:
        self.ready.setText(f"Ready: {description}. Open Chat to talk to it.")
        self._deployed = True
        self.progress.setRange(0, 1)
        self.progress.setValue(1)

    def on_unloaded(self) -> None:
        self.ready.setText("nothing deployed")
        self._deployed = False
        if not self.cancel_button.isEnabled():  # idle: a redeploy's unloading keeps its bar
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
