"""How to decode one answer: the front door's :class:`GenerationConfig`, the one options object
the CLI, the app and the API hand an :class:`~fleetgui.llm_pipeline.LLMPipeline`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fleetgui.errors import FleetguiError

if TYPE_CHECKING:
    from fleetgui.runtime.generation import GenerationOptions

#: Draft tokens per round, ``"auto"`` (chosen from measured acceptance and timings), or None
#: (no speculative decoding).
DraftK = int | Literal["auto"] | None


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode one answer.

    ``temperature == 0`` is greedy decoding: token for token the unsplit model's answer. ``k``
    turns speculative decoding on (it needs ``draft`` at :func:`fleetgui.open`): a number of
    draft tokens per round, or ``"auto"`` to choose it from the measured acceptance and timings.
    """

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0
    seed: int | None = None  # a seed makes sampling repeatable
    stop: tuple[str, ...] = ()  # strings that end the answer (not included)
    k: DraftK = None  # None: no speculative decoding

    @property
    def speculative(self) -> bool:
        """Whether the answer is decoded speculatively (``k`` is set)."""
        return self.k is not None

    def check(self) -> None:
        """Raise :class:`ValueError` naming the first bad value: the token limit, then the
        sampling values, then ``k``."""
        from fleetgui.runtime.auto_k import check_k
        from fleetgui.runtime.head import SamplingParams

        if self.max_new_tokens < 1:
            raise ValueError("max new tokens must be at least 1")
        SamplingParams(self.temperature, self.top_k, self.top_p, self.seed)
        if isinstance(self.k, str):
            if self.k != "auto":
                raise ValueError(f"k must be a number from 1 to 16 or 'auto', not {self.k!r}")
        elif self.k is not None:
            check_k(self.k)

    def options(self) -> GenerationOptions:
        """The runtime's options for this configuration; a :class:`FleetguiError` naming a bad
        value."""
        from fleetgui.runtime.generation import GenerationOptions
        from fleetgui.runtime.head import SamplingParams

        try:
            self.check()
        except ValueError as exc:
            raise FleetguiError(f"GenerationConfig: {exc}") from None
        return GenerationOptions(
            max_new_tokens=self.max_new_tokens,
            sampling=SamplingParams(self.temperature, self.top_k, self.top_p, self.seed),
            stop_strings=tuple(self.stop),
            speculative=self.speculative,
            k=self.k if isinstance(self.k, int) else None,  # "auto": None
        )


def speculative_k(speculative: bool, k: int | None) -> DraftK:
    """:attr:`GenerationConfig.k` for a mode that decodes speculatively or not, at ``k`` draft
    tokens per round (None: auto) -- the CLI's ``--mode``/``--k`` and the app's mode."""
    if not speculative:
        return None
    return "auto" if k is None else k
