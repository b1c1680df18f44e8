"""Which tokens a model's KV cache holds, and how to bring it in line with the committed text.

Both the target pipeline and the draft keep a ``FedTokens``. After a speculative round the
committed sequence and the fed tokens share a prefix; what follows it in the cache is rewound
(masked), what follows it in the committed sequence is fed next. One rule covers prefill, plain
decoding, rejected drafts and the draft's missing last token.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FedTokens:
    fed: list[int] = field(default_factory=list)  # live cache entries' tokens, in order
    entries: int = 0  # cache entries, live or masked
    _agreed: int = 0  # a prefix of ``fed`` known to equal committed tokens

    @property
    def masked(self) -> int:
        return self.entries - len(self.fed)

    def plan(self, sequence: list[int], stable: int | None = None) -> tuple[int, list[int]]:
        """(positions to rewind, tokens to feed) to make the cache hold ``sequence``.

        The first ``stable`` tokens of ``sequence`` (default: all) are committed and never
        change, so later calls need not compare them again; tokens after them (drafts) are
        compared every time.
        """
        common = min(self._agreed, len(sequence), len(self.fed))
        limit = min(len(sequence), len(self.fed))
        while common < limit and self.fed[common] == sequence[common]:
            common += 1
        self._agreed = min(common, len(sequence) if stable is None else stable)
        return len(self.fed) - common, sequence[common:]

    def applied(self, rewind: int, fed_now: list[int]) -> None:
        """Record that ``rewind`` positions were masked and ``fed_now`` fed after them."""
        if rewind:
            del self.fed[len(self.fed) - rewind :]
        self._agreed = min(self._agreed, len(self.fed))
        self.fed.extend(fed_now)
        self.entries += len(fed_now)

    def compacted(self) -> None:
        self.entries = len(self.fed)

    def resumed(self) -> None:
        """The cache is taken up by a new sequence (a resident stream's next request): nothing
        of it is known to agree with that sequence until :meth:`plan` compares them."""
        self._agreed = 0

    def reset(self) -> None:
        self.fed.clear()
        self.entries = self._agreed = 0


@dataclass(frozen=True)
class CompactionPolicy:
    """When to drop masked KV entries: they waste more than ``waste_fraction`` of the cache (and
    at least ``min_masked`` entries), or the cache would otherwise pass the context limit."""

    waste_fraction: float = 0.25
    min_masked: int = 64

    def should_compact(self, tokens: FedTokens, incoming: int, context_limit: int) -> bool:
        if tokens.masked == 0:
            return False
        if tokens.entries + incoming > context_limit:
            return True
        return (
            tokens.masked >= self.min_masked
            and tokens.masked > self.waste_fraction * tokens.entries
        )
