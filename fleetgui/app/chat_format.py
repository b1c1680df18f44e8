"""Chat messages as HTML for a rich-text view: text paragraphs, inline ``code`` and fenced code
blocks in a monospace box (an unclosed fence, as in a reply still streaming, is a code block to
the end); each finished reply has a Copy link (``copy:<message index>``). Pure functions; colours
come from :mod:`fleetgui.app.theme`."""

from __future__ import annotations

import html
import re

from fleetgui.app.conversation import ASSISTANT, Message
from fleetgui.app.theme import MONOSPACE, Colors

_FENCE = re.compile(r"^\s*```")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
COPY_SCHEME = "copy"


def copy_link(index: int) -> str:
    """The href of the Copy link of message ``index``."""
    return f"{COPY_SCHEME}:{index}"


def copied_message(href: str) -> int | None:
    """The message index a Copy link names (``"copy:3"`` -> 3); None for any other link."""
    scheme, _, index = href.partition(":")
    return int(index) if scheme == COPY_SCHEME and index.isdigit() else None


def split_blocks(text: str) -> list[tuple[str, str]]:
    """``[("text" | "code", content), ...]`` split at ``` fences."""
    blocks: list[tuple[str, str]] = []
    kind, lines = "text", list[str]()
    for line in text.split("\n"):
        if _FENCE.match(line):
            if lines:
                blocks.append((kind, "\n".join(lines)))
            kind, lines = ("code" if kind == "text" else "text"), []
            continue
        lines.append(line)
    if lines:
        blocks.append((kind, "\n".join(lines)))
    return [(k, c) for k, c in blocks if k == "code" or c.strip()]


def _text_html(text: str, colors: Colors) -> str:
    escaped = html.escape(text.strip("\n"))
    escaped = _INLINE_CODE.sub(
        lambda m: (
            f'<code style="font-family: {MONOSPACE}; background: {colors.code_background};">'
            f"{m.group(1)}</code>"
        ),
        escaped,
    )
    # pre-wrap keeps a line's leading spaces (a reply continuing indented code, as saved); HTML
    # would collapse them, while long lines still wrap
    style = "margin: 2px 0; white-space: pre-wrap;"
    return f'<p style="{style}">{escaped.replace(chr(10), "<br>")}</p>'


def _code_html(code: str, colors: Colors) -> str:
    return (
        f'<table width="100%" cellpadding="6" style="margin: 4px 0; '
        f'background: {colors.code_background}; border: 1px solid {colors.code_border};">'
        f'<tr><td><pre style="font-family: {MONOSPACE}; margin: 0;">'
        f"{html.escape(code)}</pre></td></tr></table>"
    )


def render_text(text: str, colors: Colors) -> str:
    return "".join(
        _code_html(content, colors) if kind == "code" else _text_html(content, colors)
        for kind, content in split_blocks(text)
    )


def message_footer(message: Message) -> str:
    """``"42 tokens, 12.3 tokens/s, first token in 85 ms (stopped)"``."""
    parts = []
    if message.tokens:
        parts.append(f"{message.tokens} tokens")
    if message.tokens_per_s:
        parts.append(f"{message.tokens_per_s:.1f} tokens/s")
    if message.ttft_ms:
        parts.append(f"first token in {message.ttft_ms:.0f} ms")
    text = ", ".join(parts)
    if message.finish_reason in ("stopped", "failed", "context", "max_tokens"):
        note = {
            "stopped": "stopped",
            "failed": "failed",
            "context": "context full",
            "max_tokens": "reached the reply length limit",
        }[message.finish_reason]
        text = f"{text} ({note})" if text else note
    return text


def render_message(
    message: Message, colors: Colors, streaming: bool = False, index: int | None = None
) -> str:
    """One message; a finished reply at ``index`` in its conversation gets a Copy link."""
    who = "Assistant" if message.role == ASSISTANT else "You"
    color = colors.foreground if message.role == ASSISTANT else colors.user
    body = render_text(message.text, colors) or (
        f'<p style="color: {colors.muted};">…</p>' if streaming else ""
    )
    footer = html.escape("writing…" if streaming else message_footer(message))
    if index is not None and message.role == ASSISTANT and not streaming:
        link = f'<a href="{copy_link(index)}" style="color: {colors.user};">Copy</a>'
        footer = f"{footer} · {link}" if footer else link
    footer_html = f'<p style="color: {colors.muted}; margin: 0;"><small>{footer}</small></p>'
    return (
        f'<div style="margin-bottom: 10px;"><p style="color: {color}; margin: 0;"><b>{who}</b>'
        f"</p>{body}{footer_html if footer else ''}</div>"
    )


def render_conversation(
    messages: list[Message], colors: Colors, reply_in_progress: str | None = None
) -> str:
    parts = [render_message(m, colors, index=i) for i, m in enumerate(messages)]
    if reply_in_progress is not None:
        parts.append(render_message(Message(ASSISTANT, reply_in_progress), colors, True))
    return f'<body style="color: {colors.foreground};">{"".join(parts)}</body>'
