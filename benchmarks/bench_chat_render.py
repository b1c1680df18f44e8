"""Chat render benchmark: GUI-thread milliseconds per render tick while a 2,000-token reply
streams into the real chat view (offscreen), below a conversation of earlier messages.

The reply mixes what models write: paragraphs, bulleted lists, inline code and fenced code
blocks (a long one too, the worst case: a growing code block is re-rendered whole). A tick adds
``--tokens-per-tick`` tokens (about 4 characters each) and calls the view's render tick, as its
50 ms timer does; "with paint" also lets Qt lay out and paint the view. Median and 90th
percentile over the ticks; the figure is for reading, not a pass/fail threshold.

Run: ``.venv/bin/python benchmarks/bench_chat_render.py [--earlier 40] [--tokens-per-tick 2]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication

from fleetgui.app.conversation import ASSISTANT, USER, ChatMessage, Conversation
from fleetgui.app.views.chat_view import ChatView

CHARS_PER_TOKEN = 4


def reply_text(tokens: int) -> str:
    """About ``tokens`` tokens of markdown in the shapes a chat reply takes."""
    parts: list[str] = []
    i = 0
    while sum(map(len, parts)) < tokens * CHARS_PER_TOKEN:
        parts.append(
            f"Step {i}: call `configure({i})` first, then read the result; it explains the "
            "options in order and what each one costs.\n\n"
            f"- keep `limit` at {i}\n- retry on a timeout\n- log what failed\n\n"
            "```python\n"
            + "".join(f"    value_{j} = compute({j}, {i})\n" for j in range(8))
            + "```\n\n"
        )
        i += 1
    long_code = "```python\n" + "".join(f"print({j})\n" for j in range(150)) + "```\n"
    return "".join(parts)[: tokens * CHARS_PER_TOKEN - len(long_code)] + "\n\n" + long_code


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--tokens-per-tick", type=int, default=2)
    parser.add_argument("--earlier", type=int, default=40, help="messages above the reply")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    chat = ChatView()
    chat.resize(1000, 700)
    chat.show()
    app.processEvents()
    conversation = Conversation(title="bench")
    earlier = reply_text(300)
    for i in range(args.earlier):
        conversation.add(ChatMessage(USER if i % 2 == 0 else ASSISTANT, earlier))
    chat.show_conversation(conversation, "")
    app.processEvents()
    text = reply_text(args.tokens)
    step = args.tokens_per_tick * CHARS_PER_TOKEN
    tick_ms, painted_ms = [], []
    for start in range(0, len(text), step):
        chat.append_delta(conversation.id, text[start : start + step])
        began = time.perf_counter()
        chat.render_tick()
        tick_ms.append((time.perf_counter() - began) * 1000)
        app.processEvents()  # layout and paint, as the event loop would after the tick
        painted_ms.append((time.perf_counter() - began) * 1000)
    print(f"reply: {args.tokens} tokens ({len(text)} characters), {len(tick_ms)} ticks of "
          f"{args.tokens_per_tick} tokens, {args.earlier} earlier messages")  # fmt: skip
    for label, values in (("render tick", tick_ms), ("tick with paint", painted_ms)):
        print(
            f"{label:16} median {statistics.median(values):.2f} ms, "
            f"p90 {percentile(values, 0.9):.2f} ms, max {max(values):.2f} ms"
        )
    # the widget goes before the application: PySide6 crashes at exit in the other order
    chat.close()
    chat.deleteLater()
    app.processEvents()
    del chat


if __name__ == "__main__":
    main()
