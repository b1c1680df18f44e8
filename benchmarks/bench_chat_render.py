"""Chat render benchmark: GUI-thread milliseconds per render tick while a 2,000-token reply
streams into the real chat view (offscreen), below a conversation of earlier messages.

The reply mixes what models write: paragraphs, bulleted lists, inline code and fenced code
blocks (a long one too: a code block still open grows line by line). A tick is one delta of
``--tokens-per-tick`` tokens (about 4 characters each) arriving (``append_delta``) and the view
rendering it (``render_tick``, what its 50 ms timer calls: deltas that arrive closer together are
rendered once, so with 2 tokens a tick this is the cost per delta and per render alike); "with
paint" also lets Qt lay out and paint the view (``processEvents``). Each is timed twice: wall
clock, and the GUI thread's own CPU time (``time.thread_time``: what the tick costs that thread,
without the time other processes on a shared core took from it). Median and 90th percentile over
the ticks; the figures are for reading, not a pass/fail threshold.

Run: ``.venv/bin/python benchmarks/bench_chat_render.py [--earlier 40] [--tokens-per-tick 2]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication

from fleetgui.app.chat.conversation import ASSISTANT, USER, ChatMessage, Conversation
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
    clocks = {"wall": time.perf_counter, "cpu": time.thread_time}
    ms: dict[tuple[str, str], list[float]] = {}
    for start in range(0, len(text), step):
        began = {name: clock() for name, clock in clocks.items()}
        chat.append_delta(conversation.id, text[start : start + step])
        chat.render_tick()
        for name, clock in clocks.items():
            ms.setdefault(("render tick", name), []).append((clock() - began[name]) * 1000)
        app.processEvents()  # layout and paint, as the event loop would after the tick
        for name, clock in clocks.items():
            ms.setdefault(("tick with paint", name), []).append((clock() - began[name]) * 1000)
    ticks = len(ms["render tick", "wall"])
    print(f"reply: {args.tokens} tokens ({len(text)} characters), {ticks} ticks of "
          f"{args.tokens_per_tick} tokens, {args.earlier} earlier messages")  # fmt: skip
    for (label, name), values in ms.items():
        print(
            f"{label:16} {name:4}  median {statistics.median(values):.2f} ms, "
            f"p90 {percentile(values, 0.9):.2f} ms, max {max(values):.2f} ms"
        )
    # the widget goes before the application: PySide6 crashes at exit in the other order
    chat.close()
    chat.deleteLater()
    app.processEvents()
    del chat


if __name__ == "__main__":
    main()
