"""The desktop app's look, offscreen, on the real window: light and dark schemes (also switched
while the window is open), a reply's Copy. No model is deployed: the conversations are restored
from the chat history, as when the app starts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import (
    QColor,
    QGuiApplication,
    QPalette,
    QTextCursor,
    QTextFragment,
    QTextTable,
)
from PySide6.QtWidgets import QApplication

from fleetgui.app import theme
from fleetgui.app.conversation import ASSISTANT, USER, Conversation, Message
from fleetgui.app.core import build_core
from fleetgui.app.history import HistoryStore
from fleetgui.app.metrics_series import STAGE_MS, SeriesStore
from fleetgui.app.theme import DARK, LIGHT, Colors
from fleetgui.app.views.main_window import MainWindow

QtBot = Any  # pytest-qt's fixture

CODE = (
    "def clamp(x, lo, hi):\n"
    '    """Keep x in [lo, hi] & say so: <ok>."""\n'
    "    if x < lo:\n"
    "        return lo\n"
    "    return hi if x > hi else x"
)
REPLY = f"Here is `clamp`:\n```python\n{CODE}\n```\nCall it as clamp(5, 0, 3)."
SECOND_REPLY = "Second **reply**, in markdown:\n\n- one\n- two"


# --------------------------------------------------------------------------------------------
# Helpers


def open_window(qtbot: QtBot, folder: Path, *turns: tuple[str, str]) -> MainWindow:
    """The main window on a chat history holding one conversation of ``(role, text)`` turns,
    shown in the Chat tab."""
    history = folder / "chats"
    if turns:
        conversation = Conversation(title="look")
        for role, text in turns:
            conversation.add(Message(role, text))
        HistoryStore(history).save(conversation)
    core = build_core(settings_path=folder / "settings.json", history_dir=history)
    window = MainWindow(core)
    qtbot.addWidget(window)
    window.show()
    window.tabs.setCurrentWidget(window.chat)
    qtbot.waitExposed(window)
    return window


def fragments(window: MainWindow) -> list[QTextFragment]:
    """The text fragments of the chat transcript, in order."""
    found = []
    block = window.chat.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            found.append(it.fragment())
            it += 1
        block = block.next()
    return found


def fragment(window: MainWindow, starts: str) -> QTextFragment:
    return next(f for f in fragments(window) if f.text().startswith(starts))


def code_table(window: MainWindow) -> QTextTable:
    tables = [
        frame
        for frame in window.chat.transcript.document().rootFrame().childFrames()
        if isinstance(frame, QTextTable)
    ]
    assert len(tables) == 1, "one code block, drawn as a one-cell table"
    return tables[0]


def look(window: MainWindow) -> dict[str, str]:
    """The colours the window shows: chat text and code box, chart background, axes, curve."""
    plot = window.dashboard.plots[STAGE_MS.key]
    curve = window.dashboard.curves[(STAGE_MS.key, "stage 0")]
    return {
        "reply text": fragment(window, "Here is").charFormat().foreground().color().name(),
        "code background": code_table(window).format().background().color().name(),
        "chart background": plot.backgroundBrush().color().name(),
        "axis text": plot.getAxis("left").textPen().color().name(),
        "first curve": curve.opts["pen"].color().name(),
    }


def expected_look(colors: Colors) -> dict[str, str]:
    return {
        "reply text": colors.foreground,
        "code background": colors.code_background,
        "chart background": colors.background,
        "axis text": colors.foreground,
        "first curve": colors.series[0],
    }


def show_a_curve(window: MainWindow) -> None:
    store = SeriesStore()
    for t in range(5):
        store.add(STAGE_MS, "stage 0", float(t), 10.0 + t)
    window.dashboard.show_series(store)


@pytest.fixture
def system_scheme(qapp: QApplication) -> Iterator[Callable[[bool], None]]:
    """``set_dark(dark)``: the system switches to its dark (or back to its light) colours.

    Sets Qt's colour scheme where this Qt can (the offscreen platform keeps it Unknown) and the
    application palette Qt derives from the system's theme (a dark one, or the original).
    Everything is restored afterwards."""
    hints = qapp.styleHints()
    original = QPalette(qapp.palette())
    set_scheme = getattr(hints, "setColorScheme", None)  # Qt >= 6.8

    def set_dark(dark: bool) -> None:
        if set_scheme is not None:
            set_scheme(Qt.ColorScheme.Dark if dark else Qt.ColorScheme.Light)
        qapp.setPalette(QPalette(QColor("#202124")) if dark else original)

    yield set_dark
    if set_scheme is not None:
        hints.unsetColorScheme()
    qapp.setPalette(original)
    assert theme.colors() == LIGHT, "the test left the app dark"


# --------------------------------------------------------------------------------------------
# Light and dark


def test_dark_scheme_gives_the_dark_colours_everywhere(
    qtbot: QtBot, tmp_path: Path, system_scheme: Callable[[bool], None]
) -> None:
    assert theme.colors() == LIGHT
    system_scheme(True)
    assert theme.is_dark() and theme.colors() == DARK
    window = open_window(qtbot, tmp_path, (USER, "Show me"), (ASSISTANT, REPLY))
    show_a_curve(window)
    assert look(window) == expected_look(DARK)


def test_switching_the_scheme_while_open_re_renders(
    qtbot: QtBot, tmp_path: Path, system_scheme: Callable[[bool], None]
) -> None:
    window = open_window(qtbot, tmp_path, (USER, "Show me"), (ASSISTANT, REPLY))
    show_a_curve(window)
    assert look(window) == expected_look(LIGHT)
    system_scheme(True)  # nothing else: the window has to notice by itself
    qtbot.waitUntil(lambda: look(window) == expected_look(DARK), timeout=2000)
    system_scheme(False)
    qtbot.waitUntil(lambda: look(window) == expected_look(LIGHT), timeout=2000)


# --------------------------------------------------------------------------------------------
# Copy


def click_link(qtbot: QtBot, window: MainWindow, href: str) -> None:
    """Click the transcript's link to ``href`` with the mouse."""
    transcript = window.chat.transcript
    link = next(f for f in fragments(window) if f.charFormat().anchorHref() == href)
    cursor = QTextCursor(transcript.document())
    cursor.setPosition(link.position() + link.length() // 2)
    transcript.setTextCursor(cursor)
    transcript.ensureCursorVisible()
    rect = transcript.cursorRect(cursor)
    qtbot.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.center()))
    transcript.setTextCursor(QTextCursor(transcript.document()))  # no selection left behind


def test_each_replys_copy_link_copies_exactly_its_markdown(qtbot: QtBot, tmp_path: Path) -> None:
    window = open_window(qtbot, tmp_path, (USER, "Show me"), (ASSISTANT, REPLY),
                         (USER, "And?"), (ASSISTANT, SECOND_REPLY))  # fmt: skip
    clipboard = QGuiApplication.clipboard()
    links = [f.charFormat().anchorHref() for f in fragments(window) if f.charFormat().isAnchor()]
    assert links == ["copy:1", "copy:3"], "one Copy link per reply, none for the user's messages"
    clipboard.setText("before")
    click_link(qtbot, window, "copy:1")
    assert clipboard.text() == REPLY  # the markdown source: fences, backticks, indentation
    click_link(qtbot, window, "copy:3")
    assert clipboard.text() == SECOND_REPLY
    assert window.chat.transcript.toPlainText().count("Assistant") == 2, "the link opened nothing"


def test_copy_button_copies_the_last_reply_or_the_selection(qtbot: QtBot, tmp_path: Path) -> None:
    window = open_window(qtbot, tmp_path, (USER, "Show me"), (ASSISTANT, SECOND_REPLY),
                         (USER, "Code?"), (ASSISTANT, REPLY))  # fmt: skip
    clipboard = QGuiApplication.clipboard()
    clipboard.setText("before")
    qtbot.mouseClick(window.chat.copy_button, Qt.MouseButton.LeftButton)
    assert clipboard.text() == REPLY
    # select the code block as a user would, and copy it: plain lines, not paragraph separators
    transcript = window.chat.transcript
    start = fragment(window, "def clamp").position()
    last = fragment(window, "    return hi")
    cursor = QTextCursor(transcript.document())
    cursor.setPosition(start)
    cursor.setPosition(last.position() + last.length(), QTextCursor.MoveMode.KeepAnchor)
    transcript.setTextCursor(cursor)
    qtbot.mouseClick(window.chat.copy_button, Qt.MouseButton.LeftButton)
    assert clipboard.text() == CODE
