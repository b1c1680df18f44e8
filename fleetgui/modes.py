"""The decoding modes: what the CLI's ``--mode``, the API server, the app's mode panel and the
benchmark name, and what each implies.

``pp`` and ``pp+sd`` run one stream at a time by default; the ``+mb`` modes interleave several
streams across the stages (no draft needed for ``pp+mb``). A mode is a deployment's choice; the
speculation of each answer travels in its :class:`~fleetgui.generation_config.GenerationConfig`
(:meth:`Mode.draft_tokens`).
"""

from __future__ import annotations

import enum
from typing import Literal

from fleetgui.generation_config import DraftTokens


class Mode(enum.StrEnum):
    PP = "pp"  # pipeline parallelism
    PP_MB = "pp+mb"  # plus several streams interleaved across the stages (no draft needed)
    PP_SD = "pp+sd"  # plus speculative decoding with a drafter
    PP_SD_MB = "pp+sd+mb"  # speculative, several streams interleaved across the stages

    @property
    def label(self) -> str:
        return self.value.upper()

    @property
    def speculative(self) -> bool:
        """Whether answers are decoded speculatively (a drafter is needed)."""
        return self in (Mode.PP_SD, Mode.PP_SD_MB)

    @property
    def interleaved(self) -> bool:
        """Whether several streams generate at once, interleaved across the stages."""
        return self in (Mode.PP_MB, Mode.PP_SD_MB)

    def draft_tokens(self, k: int | Literal["auto"]) -> DraftTokens:
        """An answer's ``GenerationConfig.k`` in this mode: ``k`` (a number or ``"auto"``)
        when it is speculative, else ``"off"``."""
        return k if self.speculative else "off"


MODES: tuple[str, ...] = tuple(m.value for m in Mode)  # the CLI's --mode choices
