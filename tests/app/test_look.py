"""The desktop app's look, offscreen, on the real window: light and dark schemes (also switched
while the window is open), high-DPI screenshots, a reply's Copy, code blocks rendered readably
and text that looks like HTML shown as written. No model is deployed: the conversations are
restored from the chat history, as when the app starts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

import numpy as np
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import (
    QColor,
    QFontInfo,
    QGuiApplication,
    QImage,
    QPalette,
    QTextCursor,
    QTextFragment,
    QTextTable,
)
from PySide6.QtWidgets import QApplication

from fleetgui.app import theme
from fleetgui.app.chat.conversation import ASSISTANT, USER, ChatMessage, Conversation
from fleetgui.app.chat.history import HistoryStore
from fleetgui.app.core import build_core
from fleetgui.app.dashboard.metrics_series import STAGE_MS, SeriesStore
from fleetgui.app.theme import DARK, LIGHT, MONOSPACE, Colors
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
HTML_LOOKALIKE = "Type <script>alert('x')</script> and <b>bold</b> & see them as written."
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
            conversation.add(ChatMessage(role, text))
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
# High DPI


def _gray(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_Grayscale8)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), -1)
    return rows[:, : image.width()].astype(np.int16)


def _sharp_steps(image: QImage) -> int:
    """Neighbouring pixels that differ a lot: crisp edges (text, borders). Smoothly upscaling
    an image spreads each edge over two pixels and halves its steps."""
    gray = _gray(image)
    return int((abs(np.diff(gray, axis=0)) >= 96).sum() + (abs(np.diff(gray, axis=1)) >= 96).sum())


def _pixel_doubled(image: QImage) -> bool:
    """Whether every 2x2 block is one colour: a 1x image blown up pixel by pixel."""
    gray = _gray(image)
    h, w = gray.shape[0] // 2 * 2, gray.shape[1] // 2 * 2
    blocks = gray[:h, :w].reshape(h // 2, 2, w // 2, 2)
    return bool((blocks == blocks[:, :1, :, :1]).all())


def test_screenshots_are_rendered_at_the_screens_pixel_ratio(tmp_path: Path) -> None:
    """``fleetgui gui --screenshot`` (no model: the quickest run) at scale 1 and 2: at 2 every
    view has twice the pixels each way, with edges as crisp as at 1 (drawn at 2x, not blown up
    from a 1x grab)."""
    runs = {}
    for factor in (1, 2):
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": str(factor),
               "FLEETGUI_HOME": str(tmp_path / f"home{factor}")}  # fmt: skip
        out = tmp_path / f"x{factor}"
        runs[factor] = subprocess.Popen(
            [sys.executable, "-m", "fleetgui", "gui", "--screenshot", str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    for factor, run in runs.items():
        _, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, f"scale {factor}: {stderr[-2000:]}"

    def shot(factor: int, name: str) -> QImage:
        image = QImage(str(tmp_path / f"x{factor}" / f"{name}.png"))
        assert not image.isNull(), (factor, name)
        return image

    for name in ("fleet", "deployment", "dashboard", "chat"):
        one, two = shot(1, name), shot(2, name)
        assert (two.width(), two.height()) == (2 * one.width(), 2 * one.height()), name
    one, two = shot(1, "fleet"), shot(2, "fleet")
    assert not _pixel_doubled(two)
    blurred = one.scaled(two.size(), Qt.AspectRatioMode.IgnoreAspectRatio,
                         Qt.TransformationMode.SmoothTransformation)  # fmt: skip
    assert _sharp_steps(blurred) < 1.2 * _sharp_steps(one), "the blur check would not see blur"
    assert _sharp_steps(two) > 1.6 * _sharp_steps(one), "the 2x screenshot looks upscaled"


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


# --------------------------------------------------------------------------------------------
# Code blocks and text that looks like HTML


def _is_fixed_pitch(f: QTextFragment) -> bool:
    return QFontInfo(f.charFormat().font()).fixedPitch()


def test_a_code_block_keeps_its_indentation_characters_and_monospace(
    qtbot: QtBot, tmp_path: Path
) -> None:
    window = open_window(qtbot, tmp_path, (USER, "Show me"), (ASSISTANT, REPLY))
    text = window.chat.transcript.toPlainText()
    assert CODE in text  # every line, its indentation, and <, >, & as written
    assert "&lt;" not in text and "&amp;" not in text and "```" not in text
    lines = CODE.split("\n")
    code = [f for f in fragments(window) if f.text() in lines]
    assert [f.text() for f in code] == lines, "one line per block, nothing merged or lost"
    monospace = [name.strip(" '") for name in MONOSPACE.split(",")]
    for f in code:
        assert f.charFormat().fontFamilies() == monospace, f.text()
        assert _is_fixed_pitch(f), f"{f.text()!r} is not drawn in a fixed-pitch font"
    prose = fragment(window, "Call it as")
    assert not _is_fixed_pitch(prose)
    assert all(f.position() >= code_table(window).firstPosition() for f in code)
    assert prose.position() > code_table(window).lastPosition(), "the prose is outside the box"


def test_html_in_a_message_is_shown_as_written_not_interpreted(
    qtbot: QtBot, tmp_path: Path
) -> None:
    window = open_window(qtbot, tmp_path, (USER, HTML_LOOKALIKE), (ASSISTANT, HTML_LOOKALIKE))
    text = window.chat.transcript.toPlainText()
    assert text.count(HTML_LOOKALIKE) == 2  # the user's message and the reply, verbatim
    assert "&lt;" not in text
    for f in fragments(window):
        if "<b>bold</b>" in f.text():
            assert f.charFormat().fontWeight() < 600, "the <b> tag was interpreted"
