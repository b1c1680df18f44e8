"""PP+MB: several streams interleaved across the stages with plain decoding (no draft), in
``fleetgui generate --mode pp+mb`` and the app's mode panel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import export

PROMPTS = ("def add(a, b):\n    return", "The old lighthouse keeper climbed the stairs")
N_NEW = 96


def _generate(home: Path, export_dir: Path, mode: str, *prompts: str) -> list[dict[str, Any]]:
    args = [arg for prompt in prompts for arg in ("--prompt", prompt)]
    run = subprocess.run(
        [sys.executable, "-m", "fleetgui", "generate", str(export_dir), *args, "--mode", mode,
         "--max-new-tokens", str(N_NEW), "--precision", "f32", "--threads", "1", "--json"],
        capture_output=True, text=True, env={**os.environ, "FLEETGUI_HOME": str(home)},
        timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines()]


def _busy_s(record: dict[str, Any]) -> float:
    """How long a stream generated: its first token, then the rest at its decode rate."""
    return record["ttft_ms"] / 1000 + (len(record["token_ids"]) - 1) / record["tokens_per_s"]


@pytest.mark.slow  # two generate processes: about 10 s
def test_generate_pp_mb_runs_the_prompts_at_once_with_pp_s_tokens(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    export_dir = export(tiny_models("llama"), tmp_path / "exp-2s", stages=2)
    *plain, plain_total = _generate(tmp_path, export_dir, "pp", *PROMPTS)
    *mb, mb_total = _generate(tmp_path, export_dir, "pp+mb", *PROMPTS)
    assert [r["token_ids"] for r in mb] == [r["token_ids"] for r in plain]  # greedy, unchanged
    assert "acceptance_rate" not in mb[0]  # plain decoding: no draft
    # one after the other, the wall time covers both streams' times; at once, they overlap
    assert plain_total["wall_s"] >= 0.9 * sum(_busy_s(r) for r in plain)
    assert mb_total["wall_s"] < 0.75 * sum(_busy_s(r) for r in mb)


def test_the_mode_panel_offers_pp_mb_with_streams_and_no_draft(qtbot: Any) -> None:
    pytest.importorskip("PySide6")
    from fleetgui.app.views.mode_panel import ModePanel
    from fleetgui.modes import Mode

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
