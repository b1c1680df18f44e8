"""The mode panel (``fleetgui.app.views.mode_panel``): its draft picker offers the n-gram drafter
(chosen, remembered, shown again), and PP+MB with a number of streams and no draft."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")


from fleetgui.app.mode import ModeSettings
from fleetgui.app.settings import Settings
from fleetgui.app.views.mode_panel import ModePanel
from fleetgui.modes import Mode
from fleetgui.runtime.draft_source import NGRAM

QtBot = Any  # pytest-qt's fixture


def test_the_draft_picker_offers_ngram(qtbot: QtBot, tmp_path: Path) -> None:
    panel = ModePanel()
    qtbot.addWidget(panel)
    chosen: list[ModeSettings] = []
    panel.mode_changed.connect(chosen.append)
    assert panel.ngram.text() == "n-gram (no draft model)"
    panel.buttons[Mode.PP_SD].setChecked(True)
    panel.draft.setText("/exports/draft-1s")
    panel.ngram.setChecked(True)
    assert chosen[-1].draft_dir == NGRAM
    assert not panel.draft.isEnabled() and not panel.choose_draft.isEnabled()

    settings = Settings(tmp_path / "settings.json")
    settings.set_mode(chosen[-1])
    restored = Settings(tmp_path / "settings.json").values.mode_settings()
    assert (restored.mode, restored.draft_dir) == (Mode.PP_SD, NGRAM)
    shown = ModePanel()
    qtbot.addWidget(shown)
    shown.set_mode(restored)
    assert shown.ngram.isChecked() and shown.draft.text() == ""
    assert shown.current() == restored

    panel.ngram.setChecked(False)  # back to the folder typed before
    assert chosen[-1].draft_dir == Path("/exports/draft-1s") and panel.draft.isEnabled()


def test_the_mode_panel_offers_pp_mb_with_streams_and_no_draft(qtbot: Any) -> None:
    panel = ModePanel()
    qtbot.addWidget(panel)
    assert [m.value for m in panel.buttons] == ["pp", "pp+mb", "pp+sd", "pp+sd+mb"]
    chosen: list[Any] = []
    panel.mode_changed.connect(chosen.append)
    panel.streams.setValue(3)
    panel.buttons[Mode.PP_MB].setChecked(True)
    mode = panel.current()
    assert mode.mode is Mode.PP_MB and chosen[-1] == mode
    assert not mode.mode.speculative and mode.concurrency == 3
    assert panel.streams.isEnabled() and not panel.k_auto.isEnabled()
    assert str(mode) == "PP+MB, 3 streams"
    panel.buttons[Mode.PP].setChecked(True)
    assert panel.current().concurrency == 1 and not panel.streams.isEnabled()


def test_a_mode_without_a_draft_shows_no_draft_and_keeps_it_for_later(qtbot: QtBot) -> None:
    """PP and PP+MB do not draft: the n-gram box is unticked and disabled there (issue 39: PP
    kept it ticked), and a switch back to PP+SD drafts from n-gram again."""
    panel = ModePanel()
    qtbot.addWidget(panel)
    chosen: list[ModeSettings] = []
    panel.mode_changed.connect(chosen.append)
    panel.set_mode(ModeSettings(Mode.PP, draft_dir=NGRAM))  # as the demo opens in PP
    assert not panel.ngram.isChecked() and not panel.ngram.isEnabled()
    assert not panel.draft.isEnabled() and not panel.choose_draft.isEnabled()
    assert panel.current().draft_dir == NGRAM  # kept for a switch to PP+SD
    panel.buttons[Mode.PP_SD].setChecked(True)
    assert chosen[-1].draft_dir == NGRAM and panel.ngram.isChecked() and panel.ngram.isEnabled()
    panel.buttons[Mode.PP_MB].setChecked(True)
    assert chosen[-1].draft_dir == NGRAM and not panel.ngram.isChecked()
    assert not panel.ngram.isEnabled()
    panel.buttons[Mode.PP_SD_MB].setChecked(True)
    assert chosen[-1].draft_dir == NGRAM and panel.ngram.isChecked()
