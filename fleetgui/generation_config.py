"""How to decode one answer: :class:`GenerationConfig`, the one settings object a request carries
from the app's chat, the API and the command line down to the last stage's head.

Like ``openvino_genai.GenerationConfig`` it holds the sampling and the speculative
(assisted-generation) fields together; the head reads only its sampling fields, the pipeline the
rest. It is checked where a request is admitted (:meth:`GenerationConfig.check`), not when it is
made, so that a caller can build one field by field and learn the first bad value in one message.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

K_MIN, K_MAX = 1, 16  # draft tokens a speculative round may propose
MAX_TOP_LOGPROBS = 20  # most likely alternatives a token's logprobs may list (OpenAI's limit)

#: Speculative decoding: ``"off"``, ``"auto"`` (K chosen from the measured acceptance and
#: timings), or a fixed number of draft tokens per round (:data:`K_MIN` to :data:`K_MAX`).
DraftTokens = int | Literal["off", "auto"]


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode one answer.

    ``temperature == 0`` is greedy decoding: token for token the unsplit model's answer (then
    ``top_k`` and ``top_p`` have no effect). ``k`` turns speculative decoding on; it needs a
    drafter (``draft`` at :func:`fleetgui.open`).
    """

    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy (argmax, lowest token id on exact ties)
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1: no nucleus cut
    seed: int | None = None  # a seed makes sampling repeatable; None: from OS entropy
    stop: tuple[str, ...] = ()  # strings that end the answer (not included)
    k: DraftTokens = "off"  # speculative decoding: off, auto, or draft tokens per round
    # structured output: the answer is a JSON document valid against this JSON schema
    # (``{"type": "object"}``: any JSON object), by constrained decoding
    json_schema: Mapping[str, Any] | None = field(default=None, hash=False)
    # or any grammar: Lark syntax as llguidance reads it (``%json {...}`` embeds a schema)
    grammar: str | None = None
    # report each answer token's log-probability and this many most likely alternatives (0-20)
    logprobs: int | None = None

    def __post_init__(self) -> None:
        # None meant "off" before speculation had an explicit off; lists come from JSON
        if self.k is None:
            object.__setattr__(self, "k", "off")
        if not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        """Whether tokens are chosen by argmax (temperature 0)."""
        return self.temperature == 0

    @property
    def speculative(self) -> bool:
        """Whether the answer is decoded speculatively (``k`` is not ``"off"``)."""
        return self.k != "off"

    @property
    def auto_k(self) -> bool:
        """Whether K is chosen per round from what is measured (``k == "auto"``)."""
        return self.k == "auto"

    def check(self) -> None:
        """Raise :class:`ValueError` naming the first bad value: the token limit, then the
        sampling values, then ``k``."""
        limit = self.max_new_tokens
        if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1:
            raise ValueError(f"max new tokens must be at least 1, got {limit!r}")
        self.check_sampling()
        if not all(isinstance(s, str) for s in self.stop):
            raise ValueError(f"stop strings must be strings, got {self.stop!r}")
        if self.k not in ("off", "auto"):
            check_k(self.k)
        if self.json_schema is not None and not isinstance(self.json_schema, Mapping):
            raise ValueError(
                f"json_schema must be a JSON schema object, got {type(self.json_schema).__name__}"
            )
        if self.grammar is not None and not isinstance(self.grammar, str):
            raise ValueError(f"grammar must be Lark text, got {type(self.grammar).__name__}")
        top = self.logprobs
        if top is not None and (
            isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS
        ):
            raise ValueError(f"logprobs must be None or 0 to {MAX_TOP_LOGPROBS}, got {top!r}")
        if self.grammar is not None and self.json_schema is not None:
            raise ValueError("give json_schema or grammar, not both (%json embeds a schema)")

    @property
    def constrained(self) -> bool:
        """Whether the answer's tokens are constrained (``json_schema`` or ``grammar``)."""
        return self.json_schema is not None or self.grammar is not None

    def check_sampling(self) -> None:
        """Raise :class:`ValueError` naming a bad sampling value and its valid range (what the
        head checks of a request that came over the network)."""
        temperature = self.temperature
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
            raise ValueError(f"temperature must be a number, got {temperature!r}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(
                f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}"
            )
        top_k = self.top_k
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
            raise ValueError(f"top_k must be an integer, got {top_k!r}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables the top-k cut), got {top_k}")
        top_p = self.top_p
        if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real):
            raise ValueError(f"top_p must be a number, got {top_p!r}")
        if not 0 < top_p <= 1:  # also rejects NaN
            raise ValueError(f"top_p must be in (0, 1] (1 disables the nucleus cut), got {top_p!r}")
        seed = self.seed
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0
        ):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")

    def make_rng(self) -> np.random.Generator:
        """A stream's generator: seeded with ``seed``, or from OS entropy when it is None."""
        import numpy as np  # the command line imports this module; numpy only when generating

        return np.random.default_rng(self.seed)


def check_k(k: object) -> int:
    """``k`` if it is a number of draft tokens a round may propose, else :class:`ValueError`."""
    if isinstance(k, bool) or not isinstance(k, int) or not K_MIN <= k <= K_MAX:
        raise ValueError(f"K must be between {K_MIN} and {K_MAX} (or auto), got {k!r}")
    return k


def parse_draft_tokens(text: str) -> int | Literal["auto"]:
    """A ``--k`` flag's value: ``auto`` or a number of draft tokens (:class:`ValueError` with
    the valid values otherwise)."""
    text = text.strip().lower()
    if text == "auto":
        return "auto"
    if not text.isdigit():
        raise ValueError(f"K must be a number from {K_MIN} to {K_MAX} or 'auto', not {text!r}")
    return check_k(int(text))
