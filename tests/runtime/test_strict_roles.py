"""Chats that strict templates refuse as sent (Gemma 2's system message, two developer
messages then two user messages as Codex sends them, a system note mid-conversation) are
rendered reshaped, every text kept; a template that takes them renders them as sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgui.runtime.chat_prompt import ChatPrompter
from fleetgui.runtime.chat_template import ChatTemplate, ChatTemplateError
from fleetgui.runtime.strict_roles import reshaped

TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}
CHATS = {
    "a system prompt": [
        {"role": "system", "content": "SYS-ONE"},
        {"role": "user", "content": "USER-ONE"},
    ],
    "as Codex sends": [
        {"role": "system", "content": "SYS-ONE"},
        {"role": "system", "content": "SYS-TWO"},
        {"role": "user", "content": "USER-ONE"},
        {"role": "user", "content": "USER-TWO"},
    ],
    "a note mid-chat": [
        {"role": "user", "content": "USER-ONE"},
        {"role": "assistant", "content": "BOT-ONE"},
        {"role": "system", "content": "SYS-ONE"},
        {"role": "user", "content": "USER-TWO"},
    ],
}


def prompter(file: str) -> ChatPrompter:
    template = ChatTemplate((TEMPLATES_DIR / file).read_text(), TOKENS, origin=file)
    return ChatPrompter(template, lambda text: list(text.encode()))


@pytest.mark.parametrize("chat", list(CHATS))
@pytest.mark.parametrize("file", sorted(p.name for p in TEMPLATES_DIR.glob("*.jinja")))
def test_every_template_renders_every_chat_with_all_its_text(file: str, chat: str) -> None:
    messages = CHATS[chat]
    text = prompter(file).text(messages)
    where = [text.find(str(m["content"])) for m in messages if m["role"] != "system"]
    assert -1 not in where and where == sorted(where)  # the turns, in their order
    for message in messages:
        assert message["content"] in text
    try:
        as_sent = prompter(file).template.render(messages)
    except ChatTemplateError:
        return  # refused as sent (the case this is for)
    assert text.endswith(as_sent.removeprefix("<s>"))  # taken as sent: left as sent


def test_the_reshaped_conversations() -> None:
    codex = CHATS["as Codex sends"]
    assert reshaped(codex, system_role=True) == [
        {"role": "system", "content": "SYS-ONE\n\nSYS-TWO"},
        {"role": "user", "content": "USER-ONE\n\nUSER-TWO"},
    ]
    assert reshaped(codex, system_role=False) == [
        {"role": "user", "content": "SYS-ONE\n\nSYS-TWO\n\nUSER-ONE\n\nUSER-TWO"}
    ]
    assert reshaped(CHATS["a note mid-chat"], system_role=True)[2:] == [
        {"role": "user", "content": "SYS-ONE\n\nUSER-TWO"}
    ]
    trailing = [{"role": "user", "content": "Q"}, {"role": "system", "content": "S"}]
    assert reshaped(trailing, system_role=True)[-1] == {"role": "user", "content": "Q\n\nS"}
