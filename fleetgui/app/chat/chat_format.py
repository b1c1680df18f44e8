"""Chat messages as HTML for a rich-text view. Replies are markdown, parsed by markdown-it-py
(CommonMark plus tables): paragraphs, lists, headings, inline ``code`` and fenced code blocks in
a monospace box (an unclosed fence, as in a reply still streaming, is a code block to the end).
Raw HTML is shown as written, and a plain paragraph keeps its lines' leading indentation. A
streaming reply is parsed in parts (``split_reply``): blocks that can no longer change and the
growing rest, so that a view re-renders only the part that changed, or adds only the text
(``continued_text``) or the code (``growing_code_html``) that came. User messages are plain
text. Each finished reply has a Copy link (``copy:<message index>``) and, when known, its model
and mode. Pure functions; colours come from :mod:`fleetgui.app.theme`."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from fleetgui.app.chat.conversation import ASSISTANT, ChatMessage, ReplyEnd
from fleetgui.app.theme import MONOSPACE, Colors
from fleetgui.runtime.generation import FinishReason

COPY_SCHEME = "copy"
_PARAGRAPH = "margin: 2px 0; white-space: pre-wrap;"  # pre-wrap keeps the restored indentation


def copy_link(index: int) -> str:
    """The href of the Copy link of message ``index``."""
    return f"{COPY_SCHEME}:{index}"


def copied_message(href: str) -> int | None:
    """The message index a Copy link names (``"copy:3"`` -> 3); None for any other link."""
    scheme, _, index = href.partition(":")
    return int(index) if scheme == COPY_SCHEME and index.isdigit() else None


def copied_reply(href: str, messages: Sequence[ChatMessage]) -> str | None:
    """The text (markdown, not the rendered HTML) of the reply among ``messages`` a Copy link
    names; None for any other link."""
    index = copied_message(href)
    if index is None or index >= len(messages) or messages[index].role != ASSISTANT:
        return None
    return messages[index].text


def reply_to_copy(messages: Sequence[ChatMessage], reply: str | None) -> str:
    """What Copy reply copies when nothing is selected: the reply in progress, else the last
    reply ("" when there is none)."""
    if reply:
        return reply
    replies = [m.text for m in messages if m.role == ASSISTANT]
    return replies[-1] if replies else ""


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _code_html(code: str, colors: Colors) -> str:
    # an empty box holds a space: Qt drops an empty <pre>, and then lays out what follows the
    # box differently when it is inserted on its own (as a streaming reply's blocks are)
    return (
        f'<table width="100%" cellpadding="6" style="margin: 4px 0; '
        f'background: {colors.code_background}; border: 1px solid {colors.code_border};">'
        f'<tr><td><pre style="font-family: {MONOSPACE}; margin: 0;">'
        f"{html.escape(code) or ' '}</pre></td></tr></table>"
    )


# markdown-it render rules; ``env`` carries the source lines, the colours and, inside a top-level
# paragraph, its lines' indentation (markdown drops it; a reply continuing code needs it kept)
Rule = Any  # markdown-it's renderer passes itself first: (renderer, tokens, idx, options, env)


# where a box's text is, from its margin, border, cell spacing and padding (see _code_html)
_GROWING_CODE_MARGIN_PX = 14
_GROWING_CODE_INSET_PX = 10


def growing_code_html(code: str, colors: Colors) -> str:
    """A code block still being written: its lines on the code background, the text where the
    box's will be. Not the box (a table), which Qt lays out whole on every change: a long block
    would cost more each time it grows; it gets its box once it is closed."""
    return (
        f'<pre style="font-family: {MONOSPACE}; margin-top: {_GROWING_CODE_MARGIN_PX}px; '
        f"margin-bottom: {_GROWING_CODE_MARGIN_PX}px; text-indent: {_GROWING_CODE_INSET_PX}px; "
        f'background-color: {colors.code_background};">{html.escape(code) or " "}</pre>'
    )


def _shown_code(fence: Token) -> str:
    """The text a fenced code block shows: its content without the last line's newline."""
    return fence.content.removesuffix("\n")


def _closed(fence: Token, lines: Sequence[str]) -> bool:
    """Whether ``fence`` (its lines among ``lines``) ends with its closing marker line."""
    if fence.map is None or fence.map[1] - 1 <= fence.map[0]:
        return False
    last = lines[fence.map[1] - 1]
    marker = last.strip()
    return (
        len(last) - len(last.lstrip(" ")) < 4
        and len(marker) >= len(fence.markup)
        and marker == fence.markup[0] * len(marker)
    )


def _fence(_r: Rule, tokens: Sequence[Token], idx: int, _o: Any, env: dict[str, Any]) -> str:
    return _code_html(_shown_code(tokens[idx]), env["colors"])


def _code_inline(_r: Rule, tokens: Sequence[Token], idx: int, _o: Any, env: dict[str, Any]) -> str:
    background = env["colors"].code_background
    return (
        f'<code style="font-family: {MONOSPACE}; background: {background};">'
        f"{html.escape(tokens[idx].content, quote=False)}</code>"
    )


def _paragraph_open(
    _r: Rule, tokens: Sequence[Token], idx: int, _o: Any, env: dict[str, Any]
) -> str:
    token = tokens[idx]
    if token.hidden:  # a tight list's item: no paragraph of its own
        return ""
    lines: list[str] = env["lines"]
    # only a top-level paragraph's lines are the reply's own (a list's carry the list's indent)
    if token.level == 0 and token.map is not None:
        env["indents"] = [_indent(line) for line in lines[token.map[0] : token.map[1]]]
    else:
        env["indents"] = []
    env["line"] = 0
    return f'<p style="{_PARAGRAPH}">' + html.escape("".join(env["indents"][:1]))


def _paragraph_close(
    _r: Rule, tokens: Sequence[Token], idx: int, _o: Any, env: dict[str, Any]
) -> str:
    env["indents"] = []
    return "" if tokens[idx].hidden else "</p>"


def _softbreak(_r: Rule, _t: Sequence[Token], _i: int, _o: Any, env: dict[str, Any]) -> str:
    env["line"] = env.get("line", 0) + 1
    indents: list[str] = env.get("indents", [])
    return "<br>" + (html.escape(indents[env["line"]]) if env["line"] < len(indents) else "")


def _image(r: Rule, tokens: Sequence[Token], idx: int, options: Any, env: dict[str, Any]) -> str:
    # the view loads no remote images: show the alt text
    token = tokens[idx]
    return html.escape(r.renderInlineAsText(token.children or [], options, env))


def _markdown() -> MarkdownIt:
    # no raw HTML (shown as written); no indented code blocks (an indented plain line is the
    # reply continuing code, shown as text with its indentation); single newlines break lines
    md = MarkdownIt("commonmark", {"html": False, "breaks": True})
    md.disable("code").enable(["table", "strikethrough"])
    for name, rule in (
        ("fence", _fence),
        ("code_inline", _code_inline),
        ("paragraph_open", _paragraph_open),
        ("paragraph_close", _paragraph_close),
        ("softbreak", _softbreak),
        ("image", _image),
    ):
        md.add_render_rule(name, rule)
    return md


_MD = _markdown()


def render_markdown(text: str, colors: Colors) -> str:
    """``text`` (markdown) as HTML."""
    if not text.strip():
        return ""
    return _MD.render(text, {"lines": text.split("\n"), "colors": colors})


def render_plain(text: str) -> str:
    """A user's message: plain text, its lines and indentation as typed."""
    if not text.strip():
        return ""
    escaped = html.escape(text.strip("\n"), quote=False).replace("\n", "<br>")
    return f'<p style="{_PARAGRAPH}">{escaped}</p>'


@dataclass(frozen=True)
class ReplyPart:
    """Top-level markdown blocks of a streaming reply, from one blank-line boundary to the next
    (see :func:`split_reply`)."""

    source: str  # their markdown, with the blank lines after them
    tokens: list[Token]
    lines: list[str]  # the lines of all the text parsed: the render rules read indentation there

    def html(self, colors: Colors) -> str:
        env = {"lines": self.lines, "colors": colors}
        return str(_MD.renderer.render(self.tokens, _MD.options, env))

    def ends_in_text(self) -> bool:
        """Whether the part ends in a run of plain text, of a paragraph, list item or quote:
        what :func:`continued_text` continues."""
        tokens = self.tokens
        end = len(tokens)
        while end > 0 and tokens[end - 1].type in _TEXT_CLOSERS:
            end -= 1
        last = tokens[end - 1] if end > 0 else None
        if last is None or last.type != "inline":
            return False
        # (emphasis leaves empty text tokens where its markers were)
        shown = [child for child in last.children or [] if child.type != "text" or child.content]
        return bool(shown) and shown[-1].type == "text"

    def growing_code(self) -> str | None:
        """The code shown when the part is one fenced code block still open (more lines may come:
        see :func:`growing_code_html`); None for any other part."""
        if len(self.tokens) != 1 or self.tokens[0].type != "fence":
            return None
        fence = self.tokens[0]
        return None if _closed(fence, self.lines) else _shown_code(fence)


# the ends of the blocks whose text plain text can continue: paragraphs, list items, quotes
_TEXT_CLOSERS = frozenset(
    (
        "paragraph_close",
        "list_item_close",
        "bullet_list_close",
        "ordered_list_close",
        "blockquote_close",
    )
)
_NOT_PLAIN = frozenset("`*_[]()<>&;\\~|!#")  # markup, entities, escapes, tables, headings


def continued_text(source: str, added: str) -> str | None:
    """The text ``added`` adds to what ``source`` shows, when ``source`` is markdown that ends
    in plain text (``ReplyPart.ends_in_text``) and ``added`` only lengthens it: plain characters
    on a last line whose kind is already known (a letter in it: not a line that may yet become a
    list item, heading or rule). None when ``added`` may do more; then parse it all again."""
    line = source.rpartition("\n")[2]
    if not any(c.isalpha() for c in line):
        return None
    if not all(c == " " or (c.isprintable() and c not in _NOT_PLAIN) for c in added):
        return None
    shown = line.rstrip()  # the spaces that end a paragraph are not shown (yet)
    return (line + added).rstrip()[len(shown) :]


def split_reply(text: str) -> tuple[list[ReplyPart], int]:
    """``text``, a streaming reply from a block boundary on, parsed once and split before each
    top-level block that starts after a blank line; and how many of the parts are whole for
    good: those before the last such block that starts on a complete line (a paragraph, list or
    fence ends there; what follows cannot change it)."""
    if not text.strip():
        return [], 0
    lines = text.split("\n")
    complete = len(lines) - 1  # the last line may still be growing
    offsets = [0]  # where each line starts in the text
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    tokens = _MD.parse(text)
    starts = [  # (token index, line) of the blocks that start after a blank line
        (index, token.map[0])
        for index, token in enumerate(tokens)
        if token.level == 0 and token.nesting >= 0 and token.map and token.map[0] > 0
        if not lines[token.map[0] - 1].strip()
    ]
    bounds = [(0, 0), *starts, (len(tokens), len(lines))]
    parts = [
        ReplyPart(text[offsets[line] : offsets[end_line]], tokens[index:end], lines)
        for (index, line), (end, end_line) in pairwise(bounds)
    ]
    settled = max((n for n, (_, line) in enumerate(starts, 1) if line < complete), default=0)
    return parts, settled


def settled_length(text: str, start: int = 0) -> int:
    """How much of the streaming ``text`` (from ``start``, a block boundary) is whole markdown
    blocks that later text cannot change (see :func:`split_reply`)."""
    parts, settled = split_reply(text[start:])
    return start + sum(len(part.source) for part in parts[:settled])


#: how a footer names the ends of a reply worth a word (a normal end says nothing)
_ENDINGS: dict[str, str] = {
    ReplyEnd.STOPPED: "stopped",
    ReplyEnd.FAILED: "failed",
    FinishReason.CONTEXT: "context full",
    FinishReason.MAX_TOKENS: "reached the reply length limit",
}


def message_footer(message: ChatMessage) -> str:
    """``"42 tokens, 12.3 tokens/s, first token in 85 ms, 1,204 of the chat kept (stopped)"``:
    the last part says how much of the conversation's KV the fleet kept from the turn before
    (not computed again)."""
    parts = []
    if message.tokens:
        parts.append(f"{message.tokens} tokens")
    if message.tokens_per_s:
        parts.append(f"{message.tokens_per_s:.1f} tokens/s")
    if message.ttft_ms:
        parts.append(f"first token in {message.ttft_ms:.0f} ms")
    if message.cached_tokens:
        parts.append(f"{message.cached_tokens:,} of the chat kept")
    text = ", ".join(parts)
    note = _ENDINGS.get(message.finish_reason)
    if note is not None:
        text = f"{text} ({note})" if text else note
    return text


def message_origin(message: ChatMessage) -> str:
    """``"qwen2.5-0.5b on 3 PCs · PP+SD, K auto"``: what wrote a reply, as far as it is known."""
    return " · ".join(part for part in (message.model, message.mode) if part)


def message_header(message: ChatMessage, colors: Colors) -> str:
    who = "Assistant" if message.role == ASSISTANT else "You"
    color = colors.foreground if message.role == ASSISTANT else colors.user
    return f'<p style="color: {color}; margin: 0;"><b>{who}</b></p>'


def message_body(message: ChatMessage, colors: Colors) -> str:
    if message.role == ASSISTANT:
        return render_markdown(message.text, colors)
    return render_plain(message.text)


def footer_html(message: ChatMessage, colors: Colors, streaming: bool, index: int | None) -> str:
    """The small muted line under a message: its figures, model and mode, and Copy link."""
    parts = [message_footer(message) if not streaming else "writing…", message_origin(message)]
    footer = html.escape(" · ".join(p for p in parts if p))
    if index is not None and message.role == ASSISTANT and not streaming:
        link = f'<a href="{copy_link(index)}" style="color: {colors.user};">Copy</a>'
        footer = f"{footer} · {link}" if footer else link
    if not footer:
        return ""
    return f'<p style="color: {colors.muted}; margin: 0 0 10px 0;"><small>{footer}</small></p>'


def render_message(
    message: ChatMessage, colors: Colors, streaming: bool = False, index: int | None = None
) -> str:
    """One message; a finished reply at ``index`` in its conversation gets a Copy link."""
    body = message_body(message, colors) or (
        f'<p style="color: {colors.muted};">…</p>' if streaming else ""
    )
    return message_header(message, colors) + body + footer_html(message, colors, streaming, index)
