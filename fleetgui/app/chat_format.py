"""Chat messages as HTML for a rich-text view. Replies are markdown, parsed by markdown-it-py
(CommonMark plus tables): paragraphs, lists, headings, inline ``code`` and fenced code blocks in
a monospace box (an unclosed fence, as in a reply still streaming, is a code block to the end).
Raw HTML is shown as written, and a plain paragraph keeps its lines' leading indentation. A
streaming reply is split (``settled_length``) into blocks that can no longer change and the
growing last one, so a view re-renders only that. User messages are plain text. Each finished
reply has a Copy link (``copy:<message index>``) and, when known, its model and mode. Pure
functions; colours come from :mod:`fleetgui.app.theme`."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from fleetgui.app.conversation import ASSISTANT, ChatMessage, ReplyEnd
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
    return (
        f'<table width="100%" cellpadding="6" style="margin: 4px 0; '
        f'background: {colors.code_background}; border: 1px solid {colors.code_border};">'
        f'<tr><td><pre style="font-family: {MONOSPACE}; margin: 0;">'
        f"{html.escape(code)}</pre></td></tr></table>"
    )


# markdown-it render rules; ``env`` carries the source lines, the colours and, inside a top-level
# paragraph, its lines' indentation (markdown drops it; a reply continuing code needs it kept)
Rule = Any  # markdown-it's renderer passes itself first: (renderer, tokens, idx, options, env)


def _fence(_r: Rule, tokens: Sequence[Token], idx: int, _o: Any, env: dict[str, Any]) -> str:
    return _code_html(tokens[idx].content.removesuffix("\n"), env["colors"])


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


def settled_length(text: str, start: int = 0) -> int:
    """How much of the streaming ``text`` (from ``start``, a block boundary) is whole markdown
    blocks that later text cannot change: those before the last top-level block that starts
    on a complete line after a blank line (a paragraph, list or fence ends there for good)."""
    tail = text[start:]
    lines = tail.split("\n")
    complete = len(lines) - 1  # the last line may still be growing
    starts = [t.map[0] for t in _MD.parse(tail) if t.level == 0 and t.map and t.nesting >= 0]
    for line in reversed(starts):
        if 0 < line < complete and not lines[line - 1].strip():
            return start + sum(len(s) + 1 for s in lines[:line])
    return start


#: how a footer names the ends of a reply worth a word (a normal end says nothing)
_ENDINGS: dict[str, str] = {
    ReplyEnd.STOPPED: "stopped",
    ReplyEnd.FAILED: "failed",
    FinishReason.CONTEXT: "context full",
    FinishReason.MAX_TOKENS: "reached the reply length limit",
}


def message_footer(message: ChatMessage) -> str:
    """``"42 tokens, 12.3 tokens/s, first token in 85 ms (stopped)"``."""
    parts = []
    if message.tokens:
        parts.append(f"{message.tokens} tokens")
    if message.tokens_per_s:
        parts.append(f"{message.tokens_per_s:.1f} tokens/s")
    if message.ttft_ms:
        parts.append(f"first token in {message.ttft_ms:.0f} ms")
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
