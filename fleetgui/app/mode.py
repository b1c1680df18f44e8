"""How the pipeline decodes: PP, PP+MB, PP+SD or PP+SD+MB, K and the number of concurrent
streams."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from fleetgui.generation_config import DraftK, speculative_k
from fleetgui.runtime.auto_k import check_k
from fleetgui.runtime.draft_source import DraftSource

MAX_STREAMS = 16


class Mode(enum.Enum):
    PP = "pp"  # pipeline parallelism
    PP_MB = "pp+mb"  # plus several streams interleaved across the stages (no draft needed)
    PP_SD = "pp+sd"  # plus speculative decoding with a local draft model
    PP_SD_MB = "pp+sd+mb"  # plus several streams interleaved across the stages

    @property
    def label(self) -> str:
        return self.value.upper()

    @property
    def speculative(self) -> bool:
        return self in (Mode.PP_SD, Mode.PP_SD_MB)

    @property
    def interleaved(self) -> bool:
        """Several conversations generate at once."""
        return self in (Mode.PP_MB, Mode.PP_SD_MB)


@dataclass(frozen=True)
class ModeSettings:
    """The decoding mode the user chose."""

    mode: Mode = Mode.PP
    k: int | None = None  # draft tokens per round (1-16); None: chosen automatically
    # draft export (one stage) or "ngram" (no draft model); used at the next deployment
    draft_dir: DraftSource | None = None
    streams: int = 2  # conversations generating at once in PP+MB and PP+SD+MB

    def __post_init__(self) -> None:
        if self.k is not None:
            check_k(self.k)
        if not 1 <= self.streams <= MAX_STREAMS:
            raise ValueError(f"streams must be 1 to {MAX_STREAMS}, got {self.streams}")

    @property
    def draft_k(self) -> DraftK:
        """A reply's ``GenerationConfig.k`` in this mode (None: no speculative decoding; see
        ``SamplingSettings.config``)."""
        return speculative_k(self.mode.speculative, self.k)

    @property
    def concurrency(self) -> int:
        """How many conversations may generate at once (the others wait their turn)."""
        return self.streams if self.mode.interleaved else 1

    def __str__(self) -> str:
        text = self.mode.label
        if self.mode.speculative:
            text += f", K {self.k if self.k is not None else 'auto'}"
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
