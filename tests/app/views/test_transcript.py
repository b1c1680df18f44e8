"""A streaming reply on the real chat widget, offscreen: however its text arrives, the document
a tick leaves is the one the same text rendered at once makes, and once all of it has come, the
one the finished reply gets (its line under it aside). So the transcript's short cuts (only the
part that changed re-rendered, plain text and code added without parsing, a code block still
open shown as lines until it closes) cannot change what the user sees."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("PySide6")

from app_support import MARKED, QtBot, blocks
from PySide6.QtGui import (
    QColor,
    QImage,
    QPainter,
    QTextBlock,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)

from fleetgui.app.chat.chat_format import continued_text, render_markdown
from fleetgui.app.chat.conversation import ASSISTANT, USER, ChatMessage, Conversation
from fleetgui.app.theme import LIGHT
from fleetgui.app.views.chat_view import ChatView
from fleetgui.app.views.document_pieces import append_html

REPLY = "\n".join(
    (
        "# Plan 🚀",
        "",
        "Use `clamp` with <b>tags</b> & entities &amp; shown as written;  two  spaces   ",
        "then **bold**, _em_, ~~struck~~ and *a* b, _a_b and 100% / 3 + 4 = x - y.",
        "",
        "```python",
        "def clamp(x, lo, hi):",
        '\treturn max(lo, min(x, hi))  # a tab, then <, > & "quotes" 🙂',
        "    ",
        "y = \"a ` backtick\" + '~tilde~'",
        "",
        "```",
        "",
        "- first item grows with words",
        "- second `item`",
        "  - nested one",
        "  continued line",
        "-",
        "- x",
        "",
        "1",
        "2. two",
        "",
        "> quoted line",
        "> more",
        "",
        "---",
        "",
        "| a | b |",
        "|---|---|",
        "| `1` | 2 |",
        "",
        "    indented plain line",
        "  two spaces",
        "",
        "```",
        "```",
        "",
        "~~~",
        "plain ``` inside",
        "~~~",
        "- loose",
        "",
        "- list",
        "Title",
        "===",
        "Last words, ünïcödé",
    )
)


def shape(document: QTextDocument, leave_out_last: int = 0) -> list[tuple[Any, ...]]:
    """What a document shows, block by block: text, block format, each fragment's text and
    format, list and table. (Object indices are left out: they only count the lists and tables
    made so far; so is an indent of 0 written out, which Qt sometimes does and does not show.)"""

    def props(f: QTextFormat) -> dict[int, Any]:
        return {
            k: v
            for k, v in f.properties().items()
            if k != QTextFormat.Property.ObjectIndex
            and not (k == QTextFormat.Property.BlockIndent and v == 0)
        }

    found = []
    block: QTextBlock = document.begin()
    while block.isValid():
        it, pieces = block.begin(), []
        while not it.atEnd():
            pieces.append((it.fragment().text(), props(it.fragment().charFormat())))
            it += 1
        items, table = block.textList(), QTextCursor(block).currentTable()
        found.append(
            (
                block.text(),
                props(block.blockFormat()),
                pieces,
                (props(items.format()), items.itemNumber(block)) if items else None,
                props(table.format()) if table else None,
            )
        )
        block = block.next()
    return found[: len(found) - leave_out_last]


def picture(document: QTextDocument) -> QImage:
    """The document drawn 500 pixels wide."""
    copy = document.clone()
    copy.setTextWidth(500)
    image = QImage(500, int(copy.size().height()) + 1, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    copy.drawContents(painter)
    painter.end()
    return image


def open_chat(qtbot: QtBot, conversation: Conversation, reply: str | None) -> ChatView:
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(900, 500)
    chat.show()
    chat.show_conversation(conversation, reply)
    return chat


@pytest.mark.parametrize("per_tick", [1, 3, 16, 200])
def test_a_streamed_reply_ends_as_the_finished_reply_is_rendered(
    qtbot: QtBot, per_tick: int
) -> None:
    conversation = Conversation(title="stream")
    conversation.add(ChatMessage(USER, "a plan, please"))
    streamed = open_chat(qtbot, conversation, "")
    at_once = open_chat(qtbot, conversation, "")
    for start in range(0, len(REPLY), per_tick):
        streamed.append_delta(conversation.id, REPLY[start : start + per_tick])
        streamed.render_tick()
        if per_tick < 200:  # after every tick: as if all of it had come at once
            at_once.show_conversation(conversation, REPLY[: start + per_tick])
            got, want = shape(streamed.transcript.document()), shape(at_once.transcript.document())
            assert got == want, f"after {REPLY[: start + per_tick][-30:]!r}"
    conversation.add(ChatMessage(ASSISTANT, REPLY, tokens=300))
    finished = open_chat(qtbot, conversation, None)
    # the same blocks, down to the line under the reply ("writing…" against its figures)
    document, whole = streamed.transcript.document(), finished.transcript.document()
    assert shape(document, leave_out_last=1) == shape(whole, leave_out_last=1)
    for d in (document, whole):  # the same picture without that line
        cursor = QTextCursor(d.lastBlock())
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
    assert picture(document) == picture(whole)


KINDS = {
    "paragraph": "Para `x`.",
    "lines": "Two\nlines",
    "list": "- a\n- b `c`",
    "numbered": "3. x\n4. y",
    "nested": "- a\n  - b\n- c",
    "loose list": "- a\n\n- b",
    "code": "```py\nx = 1\n  y\n```",
    "empty code": "```py\n```",
    "heading": "# Title",
    "quote": "> quoted\n> more",
    "rule": "---",
    "table": "| a | b |\n|---|---|\n| 1 | 2 |",
    "indented": "    indented\n  two",
}
FOOTER = (  # the line under a finished reply
    '<p style="color: #656d76; margin: 0 0 10px 0;">'
    '<small>12 tokens · <a href="copy:1">Copy</a></small></p>'
)


@pytest.mark.parametrize("first", [*KINDS, "footer"])
def test_html_appended_in_pieces_comes_out_as_one_insertion_makes_it(
    qtbot: QtBot, first: str
) -> None:
    """Every kind of block followed by every other: appended one after the other, they give
    the document that the two inserted as one piece of HTML give."""

    def html(kind: str) -> str:
        return FOOTER if kind == "footer" else render_markdown(KINDS[kind], LIGHT)

    def document(*pieces: str) -> QTextDocument:
        made = QTextDocument()
        append_html(made, "<p><b>Assistant</b></p>", LIGHT.foreground)
        for piece in pieces:
            append_html(made, piece, LIGHT.foreground)
        return made

    for second in [*KINDS, "footer"]:
        one, two = html(first), html(second)
        at_once, in_pieces = document(one + two), document(one, two)
        assert shape(in_pieces) == shape(at_once), f"{first} then {second}"
        assert picture(in_pieces) == picture(at_once), f"{first} then {second}"


@pytest.mark.parametrize(
    ("source", "added", "shown"),
    [
        ("Some text", " more", " more"),
        ("Some text ", "more", " more"),  # the space held back now shows
        ("Some text", "  ", ""),  # spaces that end a paragraph do not show (yet)
        ("- an item", " grows", " grows"),
        ("> a quote", " grows", " grows"),
        ("para\n\nnext line", ", and so on.", ", and so on."),
        ("Some text", " `code", None),  # markup: parse again
        ("Some text", " **bold", None),
        ("Some text", " [link", None),
        ("Some text &amp", ";", None),  # an entity
        ("Some text", " more\n", None),  # a new line
        ("Some text", "\tmore", None),
        ("Title\n", "===", None),  # a line with no letter yet may be a heading's rule,
        ("1", ". item", None),  # a list item,
        ("-", " item", None),
        ("#", " heading", None),  # or a heading
    ],
)
def test_continued_text_is_only_plain_text_added_to_a_known_line(
    source: str, added: str, shown: str | None
) -> None:
    assert continued_text(source, added) == shown


def test_a_code_block_still_open_gets_lines_added_then_its_box(qtbot: QtBot) -> None:
    conversation = Conversation(title="code")
    conversation.add(ChatMessage(USER, "code?"))
    chat = open_chat(qtbot, conversation, "")
    document = chat.transcript.document()
    chat.append_delta(conversation.id, "Here:\n\n```python\nx = 1\n")
    chat.render_tick()
    assert not document.rootFrame().childFrames(), "no box (a table) while the code grows"
    first = next(b for b in blocks(document) if b.text() == "x = 1")
    first.setUserState(MARKED)
    for i in range(50):
        chat.append_delta(conversation.id, f"y_{i} = {i}\n")
        chat.render_tick()
    assert first.userState() == MARKED, "the lines shown are kept, new ones added"
    assert "y_49 = 49" in chat.transcript.toPlainText()
    chat.append_delta(conversation.id, "```\n")
    chat.render_tick()
    assert len(document.rootFrame().childFrames()) == 1, "closed: the code gets its box"


def test_opening_a_long_conversation_shows_its_end(qtbot: QtBot) -> None:
    """Qt lays a document out lazily when it comes in one edit: the view must still open at
    the end of a long conversation, not at the end of what was laid out first."""
    short, long = Conversation(title="short"), Conversation(title="long")
    short.add(ChatMessage(USER, "hi"))
    for i in range(30):
        long.add(ChatMessage(USER if i % 2 == 0 else ASSISTANT, REPLY))
    chat = open_chat(qtbot, short, None)
    chat.show_conversation(long, None)
    bar = chat.transcript.verticalScrollBar()
    end = bar.maximum()
    assert bar.value() == end > 0
    qtbot.wait(300)  # the rest of a lazy layout would come in now, and move the end
    assert bar.value() == bar.maximum() == end
