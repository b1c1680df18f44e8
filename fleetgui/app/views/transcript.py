"""The chat transcript: a read-only rich-text view that is edited in place rather than rebuilt.

Finished messages are rendered once and appended; a streaming reply is kept as its settled
markdown blocks (appended once each) and its growing tail, the only part replaced on a tick, so a
tick's cost does not grow with the conversation or the reply. The view follows new text while the
user is at the bottom and stays put once they scroll up."""

from __future__ import annotations

from PySide6.QtGui import QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QSizePolicy, QTextBrowser, QWidget

from fleetgui.app.chat_format import (
    footer_html,
    message_header,
    render_markdown,
    render_message,
    settled_length,
)
from fleetgui.app.conversation import ASSISTANT, ChatMessage
from fleetgui.app.theme import Colors

BOTTOM_SLACK_PX = 4  # this close to the end still counts as "at the bottom"


class Transcript(QTextBrowser):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)  # links are actions (Copy), not pages to open
        # the transcript takes the room that is left: a long reply scrolls, never pushes the
        # input below the window
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.setMinimumHeight(80)
        self._key: object = None  # the conversation shown
        self._colors: Colors | None = None
        self._shown: list[ChatMessage] = []  # finished messages in the document, in order
        self._finished_end = 0  # document position after them
        self._reply: str | None = None  # the streaming reply's text so far
        self._settled = 0  # characters of the reply rendered for good
        self._tail_start = 0  # document position of the reply's growing part

    # -- what the view shows ------------------------------------------------------------------

    def show_messages(
        self, key: object, messages: list[ChatMessage], reply: str | None, colors: Colors
    ) -> None:
        """Show conversation ``key``: ``messages`` and the ``reply`` in progress. Messages
        already shown for the same conversation (and colours) are kept, not rendered again."""
        same = key == self._key and colors == self._colors
        follow = self._at_bottom() or not same
        kept = len(self._shown)
        if not (same and messages[:kept] == self._shown):
            self.document().clear()
            self._shown, self._finished_end, kept = [], 0, 0
        self._remove_from(self._finished_end)
        self._key, self._colors = key, colors
        for index in range(kept, len(messages)):
            self._append(render_message(messages[index], colors, index=index))
        self._shown = list(messages)
        self._finished_end = self._end()
        self._reply, self._settled = None, 0
        if reply is not None:
            self._append(message_header(ChatMessage(ASSISTANT, ""), colors))
            self._tail_start = self._end()
            self._render_reply(reply)
        if follow:
            self._scroll_to_bottom()

    def update_reply(self, reply: str) -> None:
        """The reply in progress is now ``reply``: re-render only what changed."""
        if self._colors is None or self._reply is None:
            return
        follow = self._at_bottom()
        self._render_reply(reply)
        if follow:
            self._scroll_to_bottom()

    def _render_reply(self, reply: str) -> None:
        assert self._colors is not None
        self._reply = reply
        self._remove_from(self._tail_start)
        settled = settled_length(reply, self._settled)
        if settled > self._settled:  # whole blocks that can no longer change: append for good
            self._append(render_markdown(reply[self._settled : settled], self._colors))
            self._settled = settled
            self._tail_start = self._end()
        muted = self._colors.muted
        tail = render_markdown(reply[self._settled :], self._colors)
        if not reply.strip():
            tail = f'<p style="color: {muted};">…</p>'
        footer = footer_html(ChatMessage(ASSISTANT, reply), self._colors, True, None)
        self._append(tail + footer)

    # -- document editing ---------------------------------------------------------------------

    def _end(self) -> int:
        return self.document().characterCount() - 1

    def _remove_from(self, position: int) -> None:
        """Remove everything from ``position`` to the end, leaving a plain empty block."""
        cursor = QTextCursor(self.document())
        cursor.setPosition(min(position, self._end()))
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if not cursor.atBlockStart():  # the end of a kept block: left as it is
            return
        current = cursor.currentList()
        if current is not None:  # the emptied block must not stay an item of a list above
            current.remove(cursor.block())
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.setBlockCharFormat(QTextCharFormat())

    def _append(self, html: str) -> None:
        if not html:
            return
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if cursor.block().length() > 1 or cursor.currentFrame() != self.document().rootFrame():
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        # the text colour of the scheme: the palette's would not follow a switch while open
        color = self._colors.foreground if self._colors is not None else ""
        cursor.insertHtml(f'<body style="color: {color};">{html}</body>' if color else html)

    # -- scrolling ----------------------------------------------------------------------------

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - BOTTOM_SLACK_PX

    def _scroll_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
