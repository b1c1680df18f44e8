"""One colour per line name across every chart of the dashboard: a chat's tokens/s, acceptance
and chosen K are drawn in the same colour, whatever order each chart met its lines in (each
chart counting its own lines gave one chat a different colour on each)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class SeriesColors:
    """Line name -> index in the theme's series palette, by first sight across all charts."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}

    def index(self, name: str) -> int:
        """The palette index of ``name``'s lines (the next free one the first time)."""
        return self._index.setdefault(name, len(self._index))

    def color(self, name: str, palette: tuple[str, ...]) -> str:
        return palette[self.index(name) % len(palette)]
