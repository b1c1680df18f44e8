"""The chat and fleet views as a new user first sees them, offscreen on the real window with no
model deployed: the settings row with no conversation selected, a first message starting a
conversation, a reply's leading indentation, and this PC's CPU named like a worker's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from PySide6.QtCore import Qt

from fleetgui.app.chat.conversation import ASSISTANT, DEFAULT_REPLY, USER, ChatMessage, Conversation
from fleetgui.app.chat.history import HistoryStore
from fleetgui.app.core import AppCore, build_core
from fleetgui.app.fleet.worker_table import COLUMNS
from fleetgui.app.views.main_window import MainWindow
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.sysinfo import cpu_model, os_description

QtBot = Any  # pytest-qt's fixture
TIMEOUT_MS = 10_000


def open_window(qtbot: QtBot, folder: Path) -> tuple[AppCore, MainWindow]:
    core = build_core(settings_path=folder / "settings.json", history_dir=folder / "chats")
    window = MainWindow(core)
    qtbot.addWidget(window)
    window.show()
    window.tabs.setCurrentWidget(window.chat)
    window.activateWindow()  # Ctrl+Enter is a window shortcut: the window must be active
    qtbot.waitUntil(window.isActiveWindow)
    return core, window


def shown_settings(window: MainWindow) -> GenerationConfig:
    chat = window.chat
    seed = chat.seed.value()
    return GenerationConfig(
        temperature=round(chat.temperature.value(), 3),
        top_k=chat.top_k.value(),
        top_p=round(chat.top_p.value(), 3),
        seed=None if seed < 0 else seed,
        max_new_tokens=chat.max_tokens.value(),
    )


def test_with_no_conversation_the_row_shows_the_defaults_and_a_message_starts_one(
    qtbot: QtBot,
    qloop: asyncio.AbstractEventLoop,
    tmp_path: Path,
) -> None:
    core, window = open_window(qtbot, tmp_path)
    chat = window.chat
    assert window.chat_presenter.current_conversation is None
    assert shown_settings(window) == DEFAULT_REPLY  # not top-p 0.01, max tokens 1, seed 0
    assert chat.seed.text() == "random"
    chat.max_tokens.setValue(100)  # edited with no conversation: the next one's setting
    chat.input.setPlainText("hello there")
    chat.input.setFocus()
    # no model is deployed: the reply fails, saying how to fix it, but the message is kept
    with qtbot.waitSignal(core.chats.reply_failed, timeout=TIMEOUT_MS):
        qtbot.keyClick(chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    conversations = core.chats.conversations()
    assert len(conversations) == 1
    started = conversations[0]
    assert window.chat_presenter.current_conversation == chat.current_id == started.id
    assert [(m.role, m.text) for m in started.messages] == [(USER, "hello there")]
    assert started.title == "hello there"
    assert started.config == GenerationConfig(max_new_tokens=100)
    assert chat.input.toPlainText() == ""
    assert "hello there" in chat.transcript.toPlainText()
    assert chat.list.count() == 1
    # deleting it leaves none selected: the row shows what the next conversation will use
    chat.delete_requested.emit()  # of the conversation shown: started
    assert window.chat_presenter.current_conversation is None
    assert shown_settings(window) == GenerationConfig(max_new_tokens=100)
    chat.new_requested.emit()
    shown = window.chat_presenter.current_conversation
    assert shown is not None
    assert core.chats.get(shown).config.max_new_tokens == 100


def test_a_replys_leading_indentation_shows_as_saved(qtbot: QtBot, tmp_path: Path) -> None:
    reply = "    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)"
    conversation = Conversation(title="indent")
    conversation.add(ChatMessage(USER, "def fib(n):"))
    conversation.add(ChatMessage(ASSISTANT, reply))
    HistoryStore(tmp_path / "chats").save(conversation)
    _, window = open_window(qtbot, tmp_path)
    assert window.chat_presenter.current_conversation == conversation.id
    shown = window.chat.transcript.toPlainText()
    assert reply in shown, shown
    window.chat.show_conversation(conversation, "  streaming, indented")  # a reply in progress
    assert "  streaming, indented" in window.chat.transcript.toPlainText()


def test_this_pcs_cpu_is_named_as_workers_name_theirs(qtbot: QtBot, tmp_path: Path) -> None:
    core, window = open_window(qtbot, tmp_path)
    coordinator = core.fleet.rows()[0]
    assert coordinator.coordinator
    assert coordinator.info.cpu == cpu_model()  # what a worker on this PC reports
    assert coordinator.info.os == os_description()
    table = window.fleet_view.table.model()
    cpu_cell = table.index(0, COLUMNS.index("CPU")).data()
    assert cpu_cell is not None and cpu_cell.startswith(cpu_model())
