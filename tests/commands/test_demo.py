"""``fleetgui demo``'s flags: a bad value or combination fails in one line before any model is
fetched or built, and the demo's app opens in the demo's --mode and --k (PP+SD, K auto, by
default), shown offscreen on the real window. No model is built here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetgui import cli
from fleetgui.commands import demo

QtBot = Any  # pytest-qt's fixture


@pytest.mark.parametrize(
    ("flags", "status", "named"),
    [
        (["--k", "abc"], 2, "--k"),
        (["--k", "0"], 2, "--k"),
        (["--k", "17", "--headless"], 2, "--k"),
        (["--max-new-tokens", "0"], 2, "--max-new-tokens"),
        (["--mode", "fast"], 2, "--mode"),
        (["--context", "0"], 2, "--context"),
        (["--kv-budget", "lots"], 2, "--kv-budget"),
        (["--headless", "--screenshot", "shots"], 1, "--headless"),
        (["--headless", "--json"], 1, "--prompt"),
        (["--prompt", "hi", "--json", "--screenshot", "shots"], 1, "--screenshot"),
    ],
)
def test_a_bad_flag_fails_at_once_in_one_line(
    flags: list[str],
    status: int,
    named: str,
    fleetgui_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    try:
        code = cli.main(["demo", "--size", "tiny", *flags])
    except SystemExit as exc:  # the parser's usage error
        code = int(exc.code or 0)
    assert code == status
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "error" in lines[0], lines
    assert not (fleetgui_home / "shards_cache").exists()  # nothing was fetched or built


def test_good_flags_are_parsed_to_values() -> None:
    args = cli.build_parser().parse_args(["demo", "--k", "4", "--max-new-tokens", "9"])
    assert (args.k, args.max_new_tokens) == (4, 9)
    assert cli.build_parser().parse_args(["demo"]).k == "auto"


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        ([], "Mode: PP+SD, K auto"),  # the demo's default, as in the terminal
        (["--mode", "pp+sd+mb", "--k", "4"], "Mode: PP+SD+MB, K 4, 2 streams"),
        (["--mode", "pp"], "Mode: PP"),
    ],
)
def test_the_demos_app_opens_in_the_demos_mode(
    flags: list[str], shown: str, qtbot: QtBot, tmp_path: Path
) -> None:
    pytest.importorskip("PySide6")
    from fleetgui.app.core import build_core
    from fleetgui.app.views.main_window import MainWindow
    from fleetgui.commands import gui
    from fleetgui.modes import Mode
    from fleetgui.runtime.draft_source import NGRAM

    args = cli.build_parser().parse_args(["demo", "--size", "tiny", *flags])
    gui_args = demo.gui_arguments(args, tmp_path / "target", NGRAM, "", tmp_path / "id")
    core = build_core(settings_path=tmp_path / "settings.json", history_dir=tmp_path / "chats")
    window = MainWindow(core)
    qtbot.addWidget(window)
    saved = core.settings.values
    assert core.inference.mode.mode is Mode.PP  # the app's own default, before the demo's
    mode = gui.apply_start_mode(core, gui_args)
    assert core.inference.mode == mode
    assert mode.mode is Mode(args.mode) and mode.k == args.k and mode.draft_dir == NGRAM
    assert window.mode_state.text() == shown
    assert window.mode_panel.buttons[mode.mode].isChecked()
    # ticked where the mode drafts; in PP kept for a switch, not shown ticked (issue 39)
    assert window.mode_panel.ngram.isChecked() == mode.mode.speculative
    assert window.mode_panel.current().draft_dir == NGRAM
    assert core.settings.values == saved  # the demo's mode is not saved as the user's


def test_gui_draft_keeps_the_saved_mode(qtbot: QtBot, tmp_path: Path) -> None:
    pytest.importorskip("PySide6")
    from fleetgui.app.core import build_core
    from fleetgui.commands import gui
    from fleetgui.runtime.draft_source import NGRAM

    core = build_core(settings_path=tmp_path / "settings.json", history_dir=tmp_path / "chats")
    args = cli.build_parser().parse_args(["gui", "--draft", "ngram"])
    mode = gui.apply_start_mode(core, args)
    assert mode.mode is core.settings.values.mode_settings().mode
    assert mode.draft_dir == NGRAM


def test_the_demos_context_flags_reach_the_app(qtbot: QtBot, tmp_path: Path) -> None:
    pytest.importorskip("PySide6")
    from fleetgui.app.core import build_core
    from fleetgui.commands import gui
    from fleetgui.runtime.draft_source import NGRAM

    args = cli.build_parser().parse_args(
        ["demo", "--size", "tiny", "--context", "2048", "--no-kv-reuse"]
    )
    gui_args = demo.gui_arguments(args, tmp_path / "target", NGRAM, "", tmp_path / "id")
    core = build_core(settings_path=tmp_path / "settings.json", history_dir=tmp_path / "chats")
    gui.apply_start_context(core, gui_args)
    assert (core.deployment.context, core.deployment.kv_reuse) == (2048, False)
    assert core.settings.values.context == 0  # the demo's choice is not saved as the user's
