"""What the dashboard calls a stream: the chat it answers, else the first free "reply N".

The runtime numbers streams for its whole life (the second chat of a session was "stream 2"
although it was the only one). A stream the app names (a chat reply: its conversation's title)
is shown under that name, and every reply of the conversation shares it. Any other stream (an
API request) is "reply N" with the lowest N no other live unnamed stream has, so one reply after
another is "reply 1" each time. A stream is live until it ends, or until it has been silent for
``STALE_S`` (a stopped reply ends without saying so).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

STALE_S = 30.0
TITLE_CHARS = 28  # legends are narrow


def short_title(title: str, limit: int = TITLE_CHARS) -> str:
    title = " ".join(title.split()) or "chat"
    return title if len(title) <= limit else title[: limit - 1].rstrip(" ,.;:-") + "…"


@dataclass
class _Unnamed:
    slot: int
    last_seen: float


class StreamLabels:
    """Stream id -> label (see module doc)."""

    def __init__(self, stale_s: float = STALE_S) -> None:
        self.stale_s = stale_s
        self._named: dict[int, str] = {}  # stream -> label
        self._by_key: dict[str, str] = {}  # conversation id -> label, kept for the session
        self._unnamed: dict[int, _Unnamed] = {}

    def name(self, stream: int, key: str, title: str) -> str:
        """Stream ``stream`` answers ``key`` (a conversation id) titled ``title``; its label.
        A conversation keeps the label it was first given; two conversations with the same
        title get "title (2)"."""
        label = self._by_key.get(key)
        if label is None:
            base = short_title(title)
            taken = set(self._by_key.values())
            label, n = base, 2
            while label in taken:
                label, n = f"{base} ({n})", n + 1
            self._by_key[key] = label
        self._unnamed.pop(stream, None)
        self._named[stream] = label
        return label

    def label(self, stream: int, now: float) -> str:
        named = self._named.get(stream)
        if named is not None:
            return named
        entry = self._unnamed.get(stream)
        if entry is None:
            for other, old in list(self._unnamed.items()):
                if now - old.last_seen > self.stale_s:
                    del self._unnamed[other]
            used = {e.slot for e in self._unnamed.values()}
            slot = next(n for n in range(1, len(used) + 2) if n not in used)
            entry = self._unnamed[stream] = _Unnamed(slot, now)
        entry.last_seen = now
        return f"reply {entry.slot}"

    def end(self, stream: int) -> None:
        """The stream finished: its slot is free again."""
        self._named.pop(stream, None)
        self._unnamed.pop(stream, None)
