"""The decoding mode the user chose in the app: PP, PP+MB, PP+SD or PP+SD+MB
(:class:`~fleetgui.modes.Mode`), K, the drafter the next deployment loads and the number of
conversations generating at once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from fleetgui.generation_config import DraftTokens, check_k
from fleetgui.modes import Mode
from fleetgui.runtime.draft_source import DraftSource

__all__ = ["MAX_STREAMS", "ModeSettings", "opening_mode"]

MAX_STREAMS = 16


@dataclass(frozen=True)
class ModeSettings:
    """The decoding mode the user chose."""

    mode: Mode = Mode.PP
    k: int | Literal["auto"] = "auto"  # draft tokens per round in the speculative modes
    # draft export (one stage) or "ngram" (no draft model); used at the next deployment
    draft_dir: DraftSource | None = None
    streams: int = 2  # conversations generating at once in PP+MB and PP+SD+MB

    def __post_init__(self) -> None:
        if self.k != "auto":
            check_k(self.k)
        if not 1 <= self.streams <= MAX_STREAMS:
            raise ValueError(f"streams must be 1 to {MAX_STREAMS}, got {self.streams}")

    @property
    def draft_tokens(self) -> DraftTokens:
        """A reply's ``GenerationConfig.k`` in this mode (``"off"`` unless speculative)."""
        return self.mode.draft_tokens(self.k)

    @property
    def concurrency(self) -> int:
        """How many conversations may generate at once (the others wait their turn)."""
        return self.streams if self.mode.interleaved else 1

    def __str__(self) -> str:
        text = self.mode.label
        if self.mode.speculative:
            text += f", K {self.k}"
        if self.mode.interleaved:
            text += f", {self.streams} streams"
        return text


def opening_mode(
    saved: ModeSettings, draft: DraftSource | None, given: ModeSettings | None
) -> ModeSettings:
    """The mode the app opens in: ``given`` (the demo's), else the ``saved`` one drafting
    from ``draft`` when one is given (``gui --draft``), else the saved one as it is."""
    if given is not None:
        return given
    return replace(saved, draft_dir=draft) if draft is not None else saved
