"""The chat transcript on the real widget, offscreen: replies as markdown (code blocks, lists,
inline code), plain indented text kept, a streaming reply re-rendered alone (the messages above
it untouched), auto-scroll that stops when the user scrolls up, and each reply's model and mode
under it."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from app_support import MARKED, QtBot, blocks
from PySide6.QtGui import QFontInfo, QTextBlock, QTextFragment

from fleetgui.app.chat.chat_format import settled_length
from fleetgui.app.chat.conversation import ASSISTANT, USER, ChatMessage, Conversation
from fleetgui.app.views.chat_view import ChatView

MARKDOWN = (
    "Use `clamp` like this:\n\n"
    "```python\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n```\n\n"
    "- first item\n- second `item`\n"
)


def fragments(block: QTextBlock) -> list[QTextFragment]:
    found, it = [], block.begin()
    while not it.atEnd():
        found.append(it.fragment())
        it += 1
    return found


def block_of(chat: ChatView, starts: str) -> QTextBlock:
    return next(b for b in blocks(chat.transcript.document()) if b.text().startswith(starts))


def fixed_pitch(f: QTextFragment) -> bool:
    return QFontInfo(f.charFormat().font()).fixedPitch()


def open_chat(qtbot: QtBot, *messages: ChatMessage) -> tuple[ChatView, Conversation]:
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(900, 500)
    chat.show()
    qtbot.waitExposed(chat)
    conversation = Conversation(title="render")
    for message in messages:
        conversation.add(message)
    chat.show_conversation(conversation, None)
    return chat, conversation


def stream(chat: ChatView, conversation: Conversation, text: str, per_tick: int = 16) -> None:
    """``text`` arriving ``per_tick`` characters at a time, a render tick after each."""
    for start in range(0, len(text), per_tick):
        chat.append_delta(conversation.id, text[start : start + per_tick])
        chat.render_tick()


@pytest.mark.parametrize("streamed", [False, True])
def test_a_reply_renders_its_code_block_list_and_inline_code(qtbot: QtBot, streamed: bool) -> None:
    chat, conversation = open_chat(qtbot, ChatMessage(USER, "how? `not code` - not a list"))
    if streamed:
        chat.show_conversation(conversation, "")
        stream(chat, conversation, MARKDOWN, per_tick=5)
    else:  # the finished reply, appended below the message already shown
        conversation.add(ChatMessage(ASSISTANT, MARKDOWN))
        chat.show_conversation(conversation, None)
    text = chat.transcript.toPlainText()
    assert "```" not in text and "`clamp`" not in text and "- first" not in text
    code = block_of(chat, "def clamp")
    assert all(fixed_pitch(f) for f in fragments(code)), "the code block is not monospace"
    assert block_of(chat, "    return max").text() == "    return max(lo, min(x, hi))"
    inline = next(f for f in fragments(block_of(chat, "Use ")) if f.text() == "clamp")
    assert fixed_pitch(inline)
    assert not fixed_pitch(fragments(block_of(chat, "Use "))[0])
    items = [block_of(chat, "first item"), block_of(chat, "second ")]
    lists = [b.textList() for b in items]
    assert lists[0] is not None and lists[0] == lists[1] and lists[0].count() == 2
    assert fixed_pitch(next(f for f in fragments(items[1]) if f.text() == "item"))
    # the user's message is plain text, as typed
    assert "how? `not code` - not a list" in text


def test_a_streamed_plain_reply_keeps_its_leading_indentation(qtbot: QtBot) -> None:
    reply = "    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)"
    chat, conversation = open_chat(qtbot, ChatMessage(USER, "def fib(n):"))
    chat.show_conversation(conversation, "")
    stream(chat, conversation, reply, per_tick=3)
    assert reply in chat.transcript.toPlainText()


def test_a_tick_re_renders_only_the_growing_reply(qtbot: QtBot) -> None:
    earlier = [ChatMessage(USER if i % 2 == 0 else ASSISTANT, MARKDOWN) for i in range(20)]
    chat, conversation = open_chat(qtbot, *earlier)
    for block in blocks(chat.transcript.document()):
        block.setUserState(MARKED)
    marked = len(blocks(chat.transcript.document()))
    chat.show_conversation(conversation, "")  # the reply starts: nothing above is rebuilt
    paragraphs = "".join(f"Paragraph {i} of the reply, long enough.\n\n" for i in range(30))
    stream(chat, conversation, paragraphs)
    shown = blocks(chat.transcript.document())
    # the earlier messages' blocks are the same blocks, never rebuilt
    assert all(b.userState() == MARKED for b in shown[:marked])
    # the reply's finished paragraphs were appended once: they keep a mark too
    for block in shown:
        if block.userState() != MARKED:
            block.setUserState(MARKED)
    settled = [b for b in shown if b.text().startswith(("Paragraph 2 ", "Paragraph 27"))]
    assert len(settled) == 2
    chat.append_delta(conversation.id, "The end")
    chat.render_tick()
    assert all(b.userState() == MARKED for b in settled)
    assert chat.transcript.toPlainText().count("Paragraph 29 of the reply") == 1
    assert "The end" in chat.transcript.toPlainText()


def test_settled_length_holds_back_the_block_still_growing() -> None:
    text = "para one\n\n- a\n- b\n\n```py\ncode\n\nmore code"
    cut = settled_length(text)
    assert text[:cut] == "para one\n\n- a\n- b\n\n"  # the open fence still grows
    assert settled_length("para one\n\n1") == 0  # "1" may yet become a list item
    assert settled_length(text, cut) == cut


def test_auto_scroll_follows_the_reply_until_the_user_scrolls_up(qtbot: QtBot) -> None:
    chat, conversation = open_chat(qtbot, ChatMessage(USER, "long, please"))
    chat.show_conversation(conversation, "")
    bar = chat.transcript.verticalScrollBar()
    stream(chat, conversation, "".join(f"Line {i} of a long reply.\n\n" for i in range(80)))
    assert bar.maximum() > 0
    assert bar.value() == bar.maximum(), "at the bottom, the view follows the reply"
    bar.setValue(bar.maximum() // 3)  # the user scrolls up to read
    stream(chat, conversation, "".join(f"More {i}.\n\n" for i in range(20)))
    assert bar.value() == bar.maximum() // 3 or bar.value() < bar.maximum() - 50
    bar.setValue(bar.maximum())  # back at the bottom: following again
    stream(chat, conversation, "".join(f"Again {i}.\n\n" for i in range(20)))
    assert bar.value() == bar.maximum()
    # the input stays in view: the transcript scrolls, the window does not grow
    assert chat.input.visibleRegion().boundingRect().height() == chat.input.height()


def test_each_reply_shows_its_model_and_mode_under_it(qtbot: QtBot) -> None:
    known = ChatMessage(ASSISTANT, "Hi.", tokens=3, model="tiny-llama on 2 PCs", mode="PP+SD, K 4")
    chat, _ = open_chat(qtbot, ChatMessage(USER, "hello"), known, ChatMessage(ASSISTANT, "Older."))
    text = chat.transcript.toPlainText()
    footer = block_of(chat, "3 tokens")
    assert footer.text().startswith("3 tokens · tiny-llama on 2 PCs · PP+SD, K 4 · Copy")
    assert footer.position() > block_of(chat, "Hi.").position()
    assert text.count("tiny-llama") == 1  # the older reply, saved without them, shows none
    # saved as before: the two fields round-trip, and older files (without them) still load
    saved = Conversation(messages=[known]).to_dict()
    assert Conversation.from_dict(saved).messages == [known]
    del saved["messages"][0]["model"], saved["messages"][0]["mode"]
    assert Conversation.from_dict(saved).messages[0].model == ""
