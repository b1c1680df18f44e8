"""The chat transcript: a read-only rich-text view that is edited in place rather than rebuilt.

Finished messages are rendered once and appended. A streaming reply is shown in parts (markdown
blocks between blank lines, :func:`~fleetgui.app.chat.chat_format.split_reply`): whole parts are
appended once and stay; a tick replaces only the parts that changed, usually the last, and when
the reply only added plain text to a paragraph, or code to a code block still open, it adds just
that text (no parsing, no HTML). A tick's cost so grows with neither the conversation nor the
reply, and a reply streamed in equals the same reply rendered whole
(:mod:`~fleetgui.app.views.document_pieces`). A code block still being written is shown as its
lines on the code background; it gets its box (a table, which Qt lays out whole on every change)
once closed. The view follows new text while the user is at the bottom and stays put once they
scroll up."""

from __future__ import annotations

from dataclasses import dataclass, replace

from PySide6.QtWidgets import QSizePolicy, QTextBrowser, QWidget

from fleetgui.app.chat.chat_format import (
    ReplyPart,
    continued_text,
    footer_html,
    growing_code_html,
    message_header,
    render_message,
    split_reply,
)
from fleetgui.app.chat.conversation import ASSISTANT, ChatMessage
from fleetgui.app.theme import Colors
from fleetgui.app.views.document_pieces import (
    Cut,
    add_code,
    add_text,
    append_html,
    one_edit,
    remove_from,
)

BOTTOM_SLACK_PX = 4  # this close to the end still counts as "at the bottom"


@dataclass(frozen=True)
class _Piece:
    """A part of the streaming reply as the document shows it."""

    source: str | None  # its markdown (None: the "…" of a reply with no text yet)
    cut: Cut | None  # where it begins (None: it rendered to nothing)
    code: str | None  # the code it shows, when it is a code block still open
    text_end: bool = False  # whether it ends in plain text (see ReplyPart.ends_in_text)


class Transcript(QTextBrowser):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)  # links are actions (Copy), not pages to open
        # read-only: an undo history would only keep every tick's replaced text alive
        self.document().setUndoRedoEnabled(False)
        # the transcript takes the room that is left: a long reply scrolls, never pushes the
        # input below the window
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.setMinimumHeight(80)
        self._key: object = None  # the conversation shown
        self._colors: Colors | None = None
        self._shown: list[ChatMessage] = []  # finished messages in the document, in order
        self._reply_cut: Cut | None = None  # where the reply in progress begins (its header)
        self._reply: str | None = None  # the streaming reply's text so far
        self._settled = 0  # characters of the reply rendered for good
        self._pieces: list[_Piece] = []  # the parts of the rest of it, as shown
        self._footer_cut: Cut | None = None  # where the line under the reply begins

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
            self._shown, self._reply_cut, kept = [], None, 0
        self._key, self._colors = key, colors
        # (no edit block around it all: Qt would lay a new conversation out lazily, after the
        # view has scrolled to what is only the end of its first part)
        if self._reply_cut is not None:
            self._remove_from(self._reply_cut)
            self._reply_cut = None
        for index in range(kept, len(messages)):
            self._append(render_message(messages[index], colors, index=index))
        self._shown = list(messages)
        self._reply, self._settled = None, 0
        if reply is not None:
            self._reply_cut = self._append(message_header(ChatMessage(ASSISTANT, ""), colors))
            self._pieces, self._footer_cut = [], None
            with one_edit(self.document()):
                self._render_reply(reply, colors)
        if follow:
            self._scroll_to_bottom()

    def update_reply(self, reply: str) -> None:
        """The reply in progress is now ``reply``: re-render only what changed."""
        if self._colors is None or self._reply is None or reply == self._reply:
            return
        follow = self._at_bottom()
        with one_edit(self.document()):
            self._render_reply(reply, self._colors)
        if follow:
            self._scroll_to_bottom()

    def _render_reply(self, reply: str, colors: Colors) -> None:
        previous, self._reply = self._reply, reply
        if not reply.strip():  # nothing to show yet but the "…"
            if [piece.source for piece in self._pieces] != [None]:
                self._replace(0, [], reply, colors)
            return
        if previous is not None and reply.startswith(previous):
            added = reply[len(previous) :]
            if self._continue_text(added) or self._continue_code(added):
                return
        parts, settled = split_reply(reply[self._settled :])
        shown = self._pieces
        same = 0  # parts shown as they are
        while same < min(len(shown), len(parts)) and shown[same].source == parts[same].source:
            same += 1
        if (same, same) == (len(shown), len(parts)):
            pass
        elif not (
            same == len(shown) - 1 == len(parts) - 1
            and self._grow_code(parts[-1].source, parts[-1].growing_code())
        ):
            self._replace(same, parts, reply, colors)
        # the whole parts stay as they are shown, for good
        self._settled += sum(len(part.source) for part in parts[:settled])
        del self._pieces[:settled]

    def _replace(self, first: int, parts: list[ReplyPart], reply: str, colors: Colors) -> None:
        """Show ``parts[first:]`` (none: the "…") and the line under them in place of the
        pieces shown from ``first`` on."""
        cuts = [piece.cut for piece in self._pieces[first:]] + [self._footer_cut]
        cut = next((cut for cut in cuts if cut is not None), None)
        if cut is not None:
            self._remove_from(cut)
        del self._pieces[first:]
        shown: list[tuple[str, _Piece]] = []  # (html, the piece without its cut)
        for part in parts[first:]:
            code = part.growing_code()  # (only the last part can be a code block still open)
            html = part.html(colors) if code is None else growing_code_html(code, colors)
            shown.append((html, _Piece(part.source, None, code, part.ends_in_text())))
        if not reply.strip():
            shown.append((f'<p style="color: {colors.muted};">…</p>', _Piece(None, None, None)))
        footer = footer_html(ChatMessage(ASSISTANT, reply), colors, True, None)
        if not shown or not shown[-1][0]:
            self._pieces += [replace(piece, cut=self._append(html)) for html, piece in shown]
            self._footer_cut = self._append(footer)
            return
        self._pieces += [replace(piece, cut=self._append(html)) for html, piece in shown[:-1]]
        # the last part and the line under it (one block, the last) go in at once
        html, piece = shown[-1]
        self._pieces.append(replace(piece, cut=self._append(html + footer)))
        self._footer_cut = Cut(self.document().lastBlock().position() - 1, reused=False)

    def _continue_text(self, added: str) -> bool:
        """When the last part shown ends in plain text and ``added`` (the text that came since)
        only lengthens it, add that text without parsing the reply again."""
        piece, footer = self._pieces[-1] if self._pieces else None, self._footer_cut
        # (the line under the reply begins where the part's last block ends, unless it went
        # into an empty block of its own)
        if piece is None or not piece.text_end or piece.source is None:
            return False
        if footer is None or footer.reused:
            return False
        text = continued_text(piece.source, added)
        if text is None:
            return False
        if text:
            moved = add_text(self.document(), footer.position, text)
            self._footer_cut = Cut(footer.position + moved, footer.reused)
        self._pieces[-1] = replace(piece, source=piece.source + added)
        return True

    def _continue_code(self, added: str) -> bool:
        """When the last part shown is a code block still open, and ``added`` (the text that came
        since) cannot close it, add that code without parsing the reply again."""
        piece = self._pieces[-1] if self._pieces else None
        if piece is None or not piece.code or piece.source is None or not added:
            return False
        # a fence at the start of its line gets its code as written; only a line of ` or ~
        # can end it, and markdown rewrites \r and NUL
        if not piece.source.startswith(("```", "~~~")) or any(c in added for c in "`~\r\0"):
            return False
        source = piece.source + added
        body = source.partition("\n")[2]
        rest, newline, last = body.rpartition("\n")
        if last and not last.strip():  # a last line of only spaces is not shown (yet)
            body = rest + newline
        return self._grow_code(source, body.removesuffix("\n"))

    def _grow_code(self, source: str, code: str | None) -> bool:
        """When the last part, now ``source``, is a code block still open whose ``code`` only
        grew since it was shown, add the new code to the lines shown rather than render them
        again; False otherwise."""
        piece, footer = self._pieces[-1], self._footer_cut
        if piece.code is None or code is None or footer is None or footer.reused:
            return False
        # Qt shows no last empty line in a <pre>; a block with no code yet shows a space, not a
        # line to continue
        shown, now = piece.code.removesuffix("\n"), code.removesuffix("\n")
        if not shown or not now.startswith(shown):
            return False
        # the last line ends where the line under the reply begins
        moved = add_code(self.document(), footer.position, now[len(shown) :])
        self._footer_cut = Cut(footer.position + moved, footer.reused)
        self._pieces[-1] = replace(piece, source=source, code=code)
        return True

    # -- document editing ---------------------------------------------------------------------

    def _append(self, html: str) -> Cut | None:
        # the text colour of the scheme: the palette's would not follow a switch while open
        color = self._colors.foreground if self._colors is not None else ""
        return append_html(self.document(), html, color)

    def _remove_from(self, cut: Cut) -> None:
        remove_from(self.document(), cut)

    # -- scrolling ----------------------------------------------------------------------------

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - BOTTOM_SLACK_PX

    def _scroll_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
