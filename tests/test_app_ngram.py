"""The app's draft picker offers the n-gram drafter: chosen, remembered, shown again and
deployed (a real tiny export on this PC)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

from runtime_support import EXACT, export

from fleetgui.app.deploy.interfaces import DeployRequest
from fleetgui.app.deploy.local import LocalDeployer
from fleetgui.app.mode import ModeSettings
from fleetgui.app.settings import Settings
from fleetgui.app.views.mode_panel import ModePanel
from fleetgui.generation_config import GenerationConfig
from fleetgui.modes import Mode
from fleetgui.runtime.draft_source import NGRAM
from fleetgui.runtime.ngram_draft import NgramDraft

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


@pytest.mark.slow
def test_deploying_with_ngram_speculates_without_a_draft_model(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    target = export(tiny_models("llama"), tmp_path / "llama-2s", stages=2)

    async def main() -> None:
        llm = await LocalDeployer(EXACT).deploy(DeployRequest(target, NGRAM), lambda _: None)
        try:
            assert isinstance(llm.runtime.draft, NgramDraft)
            options = GenerationConfig(max_new_tokens=12, k=3)
            result = await llm.agenerate_result("def add(a, b):\n    return", options)
            assert len(result.token_ids) == 12 and result.acceptance_rate is not None
        finally:
            await llm.aclose()

    asyncio.run(main())
