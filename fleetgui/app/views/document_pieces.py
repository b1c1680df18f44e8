"""HTML appended to a ``QTextDocument`` piece by piece, and taken out again: what lets the chat
transcript replace only the part of a reply that changed.

Qt merges the first block of inserted HTML into the block at the cursor (which keeps its own
format), and lays out what follows a table or a list differently when it comes in a piece of its
own. :func:`append_html` makes up for both: pieces appended one by one come out as one insertion
of all of them would make them, so a reply streamed in equals the same reply rendered whole.
Each append returns a :class:`Cut`, from which :func:`remove_from` takes it (and anything after
it) out again, leaving the document as it was before."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from PySide6.QtGui import (
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)

# put before a piece of HTML and removed after it: the piece's first block keeps its own format
_LEAD = "<p>\u2060</p>"
_LEAD_LENGTH = 2  # the word joiner and the block break after it
_FRAME_END = "\ufdd1"  # QTextEndOfFrame: where a table (a frame) ends in the text
_TOP_MARGIN = QTextFormat.Property.BlockTopMargin
_BOTTOM_MARGIN = QTextFormat.Property.BlockBottomMargin


@dataclass(frozen=True)
class Cut:
    """Where an appended piece begins: removing from ``position`` to the end takes it out again.
    ``reused``: the piece went into the empty block that ended the document, which is left plain
    then; otherwise the block before it is left as it was."""

    position: int
    reused: bool


@contextmanager
def one_edit(document: QTextDocument) -> Iterator[None]:
    """Group the edits inside: Qt lays the document out once, after them."""
    cursor = QTextCursor(document)
    cursor.beginEditBlock()
    try:
        yield
    finally:
        cursor.endEditBlock()


def document_end(document: QTextDocument) -> int:
    """The position after the document's last character."""
    return document.characterCount() - 1


def append_html(document: QTextDocument, html: str, color: str = "") -> Cut | None:
    """Append ``html`` (its text in ``color``, when given) as blocks of its own after the
    document's, the way they would come out if the two had been inserted as one piece of HTML;
    None when there is nothing to append."""
    if not html:
        return None
    with one_edit(document):  # laid out once
        return _append_html(document, html, color)


def _append_html(document: QTextDocument, html: str, color: str) -> Cut:
    cursor = QTextCursor(document)
    cursor.movePosition(QTextCursor.MoveOperation.End)
    last = cursor.block()  # the document's last block is never inside a table
    starts_box = html.startswith(("<ul", "<ol", "<table"))  # a list or a table
    new_block = (
        last.length() > 1
        or last.blockFormat() != QTextBlockFormat()  # a rule, an empty line of code
        # after a table, anything but a list or a table keeps the empty block that follows it
        or (not starts_box and _after_table(document, last.position()))
    )
    if new_block:
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
    start = cursor.position()
    cut = Cut(start - 1, reused=False) if new_block else Cut(start, reused=True)
    if starts_box:
        # a list or a table starts in blocks of its own: the empty one before it goes
        cursor.insertHtml(_in_color(html, color))
        empty = document.findBlock(start)
        if new_block and empty.length() == 1 and empty.textList() is None:
            kept = empty.previous().blockFormat()
            cursor.setPosition(start - 1)
            cursor.setPosition(start, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            cursor.setBlockFormat(kept)
        return cut
    cursor.insertHtml(_in_color(_LEAD + html, color))
    first = document.findBlock(start + _LEAD_LENGTH).blockFormat()
    cursor.setPosition(start)
    cursor.setPosition(start + _LEAD_LENGTH, QTextCursor.MoveMode.KeepAnchor)
    cursor.removeSelectedText()
    cursor.setBlockFormat(first)
    return cut


def remove_from(document: QTextDocument, cut: Cut) -> None:
    """Take out the pieces appended from ``cut`` on."""
    cursor = QTextCursor(document)
    cursor.setPosition(min(cut.position, document_end(document)))
    block = cursor.block()
    kept = block.blockFormat(), block.charFormat()
    cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
    cursor.removeSelectedText()
    if cut.reused:  # the block the piece went into: plain again, in no list
        current = cursor.currentList()
        if current is not None:
            current.remove(cursor.block())
        kept = QTextBlockFormat(), QTextCharFormat()
    # Qt gives an emptied block the format of the one merged into it: the kept block's back
    if cursor.blockFormat() != kept[0]:
        cursor.setBlockFormat(kept[0])
    if cursor.block().charFormat() != kept[1]:
        cursor.setBlockCharFormat(kept[1])


def add_text(document: QTextDocument, position: int, text: str) -> int:
    """Add ``text`` (no line breaks) at ``position``, the end of a block, in the format of the
    text before it; returns how far the positions after it moved."""
    end = document_end(document)
    _cursor_at(document, position).insertText(text)
    return document_end(document) - end


def add_code(document: QTextDocument, position: int, code: str) -> int:
    """Add ``code`` at ``position``, the end of the last line of a ``<pre>`` (a code block still
    being written), each new line a block in that line's format, the margin under the code
    moving down to the new last line; returns how far the positions after it moved."""
    end = document_end(document)
    cursor = _cursor_at(document, position)
    first, *lines = code.split("\n")
    cursor.insertText(first)  # in the format of the line it continues
    if lines:
        last, text = cursor.blockFormat(), cursor.charFormat()
        line = QTextBlockFormat(last)
        line.clearProperty(_TOP_MARGIN)
        line.clearProperty(_BOTTOM_MARGIN)
        above = QTextBlockFormat(last)
        above.clearProperty(_BOTTOM_MARGIN)
        cursor.setBlockFormat(above)
        for line_text in lines:
            cursor.insertBlock(line, text)
            cursor.insertText(line_text)
        line.setBottomMargin(last.bottomMargin())
        cursor.setBlockFormat(line)
    return document_end(document) - end


def _in_color(html: str, color: str) -> str:
    return f'<body style="color: {color};">{html}</body>' if color else html


def _cursor_at(document: QTextDocument, position: int) -> QTextCursor:
    cursor = QTextCursor(document)
    cursor.setPosition(position)
    return cursor


def _after_table(document: QTextDocument, position: int) -> bool:
    """Whether the block at ``position`` directly follows a table. Read from the text (a table
    ends with a frame-end character): Qt's table objects are not up to date in an edit block."""
    return position > 0 and document.characterAt(position - 1) == _FRAME_END
