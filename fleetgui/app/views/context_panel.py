"""The deployment tab's context and memory settings: how many tokens a conversation may hold,
whether conversations stay on the fleet between turns, and how much memory idle ones may keep
on each PC (``fleetgui serve --context``, ``--no-kv-reuse`` and ``--kv-budget``)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QFormLayout, QGroupBox, QSpinBox, QWidget

MAX_CONTEXT = 1 << 20  # the model's own limit is checked when it is planned and deployed
MAX_BUDGET_MB = 1 << 20


class ContextPanel(QGroupBox):
    """Emits ``changed(context, kv_reuse, kv_budget_mb)`` when the user edits a value (0:
    automatic); :meth:`show_values` sets them without emitting."""

    changed = Signal(int, bool, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Context and memory", parent)
        self.context = QSpinBox()
        self.context.setRange(0, MAX_CONTEXT)
        self.context.setSingleStep(1024)
        self.context.setSuffix(" tokens")
        self.context.setSpecialValueText("the model's (at most 4,096)")
        self.context.setToolTip(
            "The most tokens a prompt and its answer may hold, up to the model's own limit; the "
            "plan preview says what the KV cache of that context takes"
        )
        self.kv_reuse = QCheckBox("Keep conversations on the fleet between turns")
        self.kv_reuse.setChecked(True)
        self.kv_reuse.setToolTip(
            "A finished answer's KV cache stays on the PCs, so the next turn (or a prompt that "
            "starts the same) computes only what is new"
        )
        self.kv_budget = QSpinBox()
        self.kv_budget.setRange(0, MAX_BUDGET_MB)
        self.kv_budget.setSingleStep(256)
        self.kv_budget.setSuffix(" MB")
        self.kv_budget.setSpecialValueText("automatic (half of free memory)")
        self.kv_budget.setToolTip(
            "Memory each PC may give idle conversations' KV cache; beyond it the least "
            "recently used are dropped (and computed again if they return)"
        )
        form = QFormLayout(self)
        form.addRow("Context", self.context)
        form.addRow("", self.kv_reuse)
        form.addRow("Kept per PC", self.kv_budget)
        self.context.editingFinished.connect(self._emit)
        self.kv_budget.editingFinished.connect(self._emit)
        self.kv_reuse.toggled.connect(self._emit)
        self.kv_reuse.toggled.connect(self.kv_budget.setEnabled)

    def show_values(self, context: int, kv_reuse: bool, kv_budget_mb: int) -> None:
        for widget in (self.context, self.kv_reuse, self.kv_budget):
            widget.blockSignals(True)
        self.context.setValue(context)
        self.kv_reuse.setChecked(kv_reuse)
        self.kv_budget.setValue(kv_budget_mb)
        self.kv_budget.setEnabled(kv_reuse)
        for widget in (self.context, self.kv_reuse, self.kv_budget):
            widget.blockSignals(False)

    def _emit(self, *_: object) -> None:
        self.changed.emit(self.context.value(), self.kv_reuse.isChecked(), self.kv_budget.value())
