"""Conversations reshaped for chat templates with strict role rules.

Many templates refuse what clients send every day: Gemma 2's any system message, Gemma 3's,
Mistral's and Llama 2's a second system message or one mid-conversation, and all of them two
user messages in a row (Codex sends its context and the task so, after two developer
messages). Refusing the request would make the model unusable from such clients, so a refused
conversation is rendered again in a shape the template takes, as llama.cpp's template polyfills
do: first with the leading system messages as one and later ones folded into the next user
message; then, for a template with no system role at all, with every system text folded into
the first user message. Consecutive user messages are joined either way. The text is all kept;
only where it sits changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM = "system"
USER = "user"
JOIN = "\n\n"


def reshaped(messages: Sequence[Mapping[str, Any]], *, system_role: bool) -> list[dict[str, Any]]:
    """``messages`` with system text only in one leading system message (``system_role``) or
    none (folded into the first user message), and no two user messages in a row."""
    lead: list[str] = []
    rest = list(messages)
    while rest and rest[0].get("role") == SYSTEM:
        lead.append(_text(rest.pop(0)))
    out: list[dict[str, Any]] = []
    pending = [] if system_role else lead  # system text waiting for the next user message
    if system_role and lead:
        out.append({"role": SYSTEM, "content": JOIN.join(lead)})
    for message in rest:
        role = message.get("role")
        if role == SYSTEM:
            pending.append(_text(message))
            continue
        item = dict(message)
        if role == USER and pending:
            item["content"] = JOIN.join([*pending, _text(item)])
            pending = []
        if role == USER and out and out[-1].get("role") == USER:
            out[-1] = {**out[-1], "content": JOIN.join([_text(out[-1]), _text(item)])}
            continue
        out.append(item)
    if pending and out and out[-1].get("role") == USER:  # system text after the last user
        out[-1] = {**out[-1], "content": JOIN.join([_text(out[-1]), *pending])}
    elif pending:
        out.append({"role": USER, "content": JOIN.join(pending)})
    return out


def _text(message: Mapping[str, Any]) -> str:
    return str(message.get("content") or "")
