"""Mode: PP, PP+MB, PP+SD or PP+SD+MB; K (1-16 or auto); the draft model; concurrent streams."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QWidget,
)

from fleetgui.app.mode import MAX_STREAMS, ModeSettings
from fleetgui.generation_config import K_MAX, K_MIN
from fleetgui.modes import Mode
from fleetgui.runtime.draft_source import NGRAM, NGRAM_LABEL, DraftSource

log = logging.getLogger(__name__)

DESCRIPTIONS = {
    Mode.PP: "pipeline parallelism: the stages take turns on each token",
    Mode.PP_MB: "plus several conversations interleaved across the stages, no draft needed",
    Mode.PP_SD: "plus speculative decoding: a draft model proposes K tokens, one pass checks them",
    Mode.PP_SD_MB: "plus several conversations interleaved across the stages",
}


class ModePanel(QGroupBox):
    mode_changed = Signal(object)  # ModeSettings
    invalid = Signal(str)  # a setting that cannot be used, and why

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Mode", parent)
        self.buttons: dict[Mode, QRadioButton] = {}
        group = QButtonGroup(self)
        modes = QHBoxLayout()
        for mode in Mode:
            button = QRadioButton(mode.label)
            button.setToolTip(DESCRIPTIONS[mode])
            group.addButton(button)
            modes.addWidget(button)
            self.buttons[mode] = button
            button.toggled.connect(self._changed)
        self.k = QSpinBox()
        self.k.setRange(K_MIN, K_MAX)
        self.k.setValue(4)
        self.k_auto = QCheckBox("auto")
        self.k_auto.setToolTip("choose K from the measured acceptance rate and stage times")
        self.draft = QLineEdit()
        self.draft.setPlaceholderText("draft export folder (one stage), used at the next Deploy")
        self.choose_draft = QPushButton("Choose…")
        self.choose_draft.clicked.connect(self._choose_draft)
        self.ngram = QCheckBox(NGRAM_LABEL)
        self.ngram.setToolTip(
            "draft from the conversation itself (prompt lookup): works with any model, pays "
            "where the reply repeats earlier text"
        )
        draft_row = QHBoxLayout()
        draft_row.addWidget(self.draft, 1)
        draft_row.addWidget(self.choose_draft)
        draft_row.addWidget(self.ngram)
        self.streams = QSpinBox()
        self.streams.setRange(1, MAX_STREAMS)
        k_row = QHBoxLayout()
        k_row.addWidget(self.k)
        k_row.addWidget(self.k_auto)
        k_row.addStretch(1)
        self.description = QLabel()
        self.description.setWordWrap(True)
        form = QFormLayout(self)
        form.addRow("Decoding", modes)
        form.addRow("", self.description)
        form.addRow("K (draft tokens)", k_row)
        form.addRow("Draft model", draft_row)
        form.addRow("Streams", self.streams)
        self.k.valueChanged.connect(self._changed)
        self.k_auto.toggled.connect(self._changed)
        self.streams.valueChanged.connect(self._changed)
        self.draft.editingFinished.connect(self._changed)
        self.ngram.toggled.connect(self._changed)
        self._updating = False
        # In PP and PP+MB nothing drafts: the n-gram box shows unticked and disabled, and
        # whether it was ticked is kept here for a switch back to a speculative mode.
        self._draft_shown = True
        self._ngram_kept = False
        self.set_mode(ModeSettings())

    def _choose_draft(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a draft export")
        if folder:
            self.draft.setText(folder)
            self._changed()

    def current(self) -> ModeSettings:
        mode = next((m for m, b in self.buttons.items() if b.isChecked()), Mode.PP)
        folder = self.draft.text().strip()
        draft: DraftSource | None = Path(folder) if folder else None
        if self.ngram.isChecked() if self._draft_shown else self._ngram_kept:
            draft = NGRAM
        k: int | Literal["auto"] = "auto" if self.k_auto.isChecked() else self.k.value()
        return ModeSettings(mode, k, draft, self.streams.value())

    def _refresh(self, mode: ModeSettings) -> None:
        speculative = mode.mode.speculative
        if speculative != self._draft_shown:
            if not speculative:
                self._ngram_kept = self.ngram.isChecked()
            updating, self._updating = self._updating, True
            try:
                self.ngram.setChecked(speculative and self._ngram_kept)
            finally:
                self._updating = updating
            self._draft_shown = speculative
        self.k.setEnabled(speculative and mode.k != "auto")
        self.k_auto.setEnabled(speculative)
        self.ngram.setEnabled(speculative)
        self.draft.setEnabled(speculative and mode.draft_dir != NGRAM)
        self.choose_draft.setEnabled(speculative and mode.draft_dir != NGRAM)
        self.streams.setEnabled(mode.mode.interleaved)
        self.description.setText(DESCRIPTIONS[mode.mode])

    def _changed(self) -> None:
        if self._updating:
            return
        try:
            mode = self.current()
        except ValueError as exc:
            self.invalid.emit(str(exc))
            return
        self._refresh(mode)
        self.mode_changed.emit(mode)

    def set_mode(self, mode: ModeSettings) -> None:
        """Show ``mode`` without emitting ``mode_changed``."""
        self._updating = True
        try:
            self.buttons[mode.mode].setChecked(True)
            self.k_auto.setChecked(mode.k == "auto")
            if mode.k != "auto":
                self.k.setValue(mode.k)
            self.streams.setValue(mode.streams)
            self.ngram.setChecked(mode.draft_dir == NGRAM)
            self._draft_shown = True  # _refresh hides it in a mode that does not draft
            folder = mode.draft_dir if mode.draft_dir != NGRAM else None
            self.draft.setText(str(folder) if folder else "")
        finally:
            self._updating = False
        self._refresh(mode)
