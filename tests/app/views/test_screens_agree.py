"""What the app shows in two places says the same thing (issue 39, "contradictions on screen"):
the library's count and its table, the overall deployment bar and each PC's, the Export row and
the chosen export's own weights, and the tab the app opens on once the model given at start is
deployed. Offscreen, on a real tiny export deployed on this PC."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import deploy, drive, make_window

from fleetgui.app.views.library_view import USABLE_COLUMN, LibraryView
from fleetgui.library import Source
from fleetgui.library.demo import demo_entry

QtBot = Any  # pytest-qt's fixture


def test_the_librarys_count_agrees_with_its_table(qtbot: QtBot, fleetgui_home: Path) -> None:
    view = LibraryView()
    qtbot.addWidget(view)
    demo = demo_entry(fleetgui_home / "exports")
    view.set_entries([demo])  # nothing found on this PC: the demo alone, usable
    table = view.table
    assert table.rowCount() == 1 and table.item(0, USABLE_COLUMN).text() == "yes"
    assert view.status.text() == (
        "1 model(s), 1 usable by fleetgui: the demo model and 0 found on this PC"
    )
    found = replace(demo, name="acme/tiny-llama", source=Source.HF_CACHE, note="")
    view.set_entries([demo, found])
    assert view.status.text() == (
        "2 model(s), 2 usable by fleetgui: the demo model and 1 found on this PC"
    )


def test_the_export_row_the_bars_and_the_open_tab_agree_with_the_deployment(
    qtbot: QtBot, qloop: Any, tmp_path: Path, tiny_export: Callable[..., Path],
    tiny_models: Callable[..., Path],
) -> None:  # fmt: skip
    core, window = make_window(tmp_path)
    qtbot.addWidget(window)
    view = window.deploy_view
    assert core.deployment.export_weights == "int4"  # the setting for the next export
    window.show_chat_when_deployed()  # as `fleetgui gui EXPORT` and the demo start
    deploy(qtbot, core, window, tiny_export(2))
    # the export's own weights and stages, not the next export's (nothing to export here)
    assert view.weights.currentText() == "fp32" and not view.weights.isEnabled()
    assert view.stages.value() == 2 and not view.export_button.isEnabled()
    assert core.settings.values.export_weights == "int4"  # showing it changed no setting
    # every PC's bar is full, and so is the overall one
    bars = list(view.worker_bars.values())
    assert bars and all(b.value() == b.maximum() for b in bars)
    assert view.progress.maximum() > 0 and view.progress.value() == view.progress.maximum()
    assert window.tabs.currentWidget() is window.chat  # the chat is ready: it is open
    # a model to export shows the settings its export will use again
    view.choose_requested.emit(str(tiny_models("llama")))
    qtbot.waitUntil(view.weights.isEnabled)
    assert view.weights.currentText() == "int4"
    # a deployment started from the window does not move the user off the tab they are on
    window.tabs.setCurrentWidget(view)
    deploy(qtbot, core, window, tiny_export(2))
    assert window.tabs.currentWidget() is view
    drive(core.inference.unload())
