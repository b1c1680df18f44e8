"""A draft-free drafter: prompt lookup decoding over each stream's own committed tokens.

The drafter looks for the most recent earlier occurrence of the context's last ``n`` tokens
(``n`` from ``max_n`` down to ``min_n``, the longest match wins) and proposes the tokens that
followed it. It needs no model, so it works with any export; it pays on text that repeats what
came before (code, quotes, lists, a chat that reuses the prompt's words).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.head import SparseDist
from fleetgui.runtime.speculative import Proposal

log = logging.getLogger(__name__)

DEFAULT_MAX_N = 4
DEFAULT_MIN_N = 1


@dataclass
class NgramIndex:
    """One stream's tokens and, for each ``n``, every n-gram's most recent end position.

    Only n-grams followed by a token are indexed (the index runs one token behind), so looking
    up the context's own suffix finds an *earlier* occurrence. Appending a token costs
    ``max_n`` dictionary updates: no scan of the context, however long it is."""

    max_n: int = DEFAULT_MAX_N
    min_n: int = DEFAULT_MIN_N
    tokens: list[int] = field(default_factory=list)
    _last_end: list[dict[tuple[int, ...], int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {self.min_n} and {self.max_n}")
        self._last_end = [{} for _ in range(self.max_n + 1)]

    def extend(self, new_tokens: list[int]) -> None:
        for token in new_tokens:
            end = len(self.tokens) - 1  # the n-grams ending here now have a follower: index them
            for n in range(1, min(self.max_n, end + 1) + 1):
                self._last_end[n][tuple(self.tokens[end - n + 1 : end + 1])] = end
            self.tokens.append(int(token))

    def sync(self, committed: list[int]) -> None:
        """Bring the index to ``committed``, which normally extends what it holds; anything
        else (a different stream reusing the id) rebuilds it."""
        held = len(self.tokens)
        if held > len(committed) or (held and committed[held - 1] != self.tokens[-1]):
            log.debug("n-gram index out of step with the stream: rebuilding")
            self.tokens = []
            self._last_end = [{} for _ in range(self.max_n + 1)]
            held = 0
        self.extend(committed[held:])

    def match(self) -> tuple[int, int]:
        """``(n, end)``: the longest suffix n-gram that occurred before, and where its most
        recent earlier occurrence ends; ``(0, -1)`` when none does."""
        tokens = self.tokens
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            end = self._last_end[n].get(tuple(tokens[len(tokens) - n :]))
            if end is not None:
                return n, end
        return 0, -1

    def propose(self, k: int) -> tuple[list[int], int]:
        """Up to ``k`` tokens continuing the context as the match's continuation did, and the
        match's length (0: nothing proposed). A continuation that reaches the context's end
        goes on copying from its own start (the text repeats with that period), so periodic
        text gets all ``k``."""
        n, end = self.match()
        if n == 0:
            return [], 0
        tokens = self.tokens
        period = len(tokens) - 1 - end  # >= 1: the occurrence ends before the suffix does
        drafts = [tokens[end + 1 + (i % period)] for i in range(k)]
        return drafts, n


class NgramDraft:
    """Prompt lookup decoding as a drafter (see :class:`~fleetgui.runtime.speculative.Drafter`).

    Greedy verification keeps the target's own tokens whatever is proposed. In sampled mode a
    proposal is deterministic given the committed text, so its draft distribution is one-hot:
    ``verify_sampling`` then accepts a draft ``d`` with probability ``p(d)`` and otherwise
    samples from ``p`` without ``d``, which emits every token with the target's probability."""

    def __init__(
        self,
        *,
        max_n: int = DEFAULT_MAX_N,
        min_n: int = DEFAULT_MIN_N,
        predictable_n: int | None = None,
    ) -> None:
        """``predictable_n``: a match at least this long makes :meth:`predictable` say yes
        (default ``max_n``): K auto then probes speculation although it is off."""
        NgramIndex(max_n, min_n)  # checks the sizes once, here
        self.max_n = max_n
        self.min_n = min_n
        self.predictable_n = max_n if predictable_n is None else predictable_n
        self._index: dict[int, NgramIndex] = {}

    def _synced(self, stream_id: int, committed: list[int]) -> NgramIndex:
        index = self._index.get(stream_id)
        if index is None:
            index = self._index[stream_id] = NgramIndex(self.max_n, self.min_n)
        index.sync(committed)
        return index

    async def prefill(self, stream_id: int, committed: list[int]) -> None:
        self._synced(stream_id, committed)

    def proposal(self, stream_id: int, committed: list[int], k: int, greedy: bool) -> Proposal:
        """What :meth:`propose` returns, without the event loop (the lookup takes microseconds)."""
        started = time.perf_counter()
        drafts, _ = self._synced(stream_id, committed).propose(k)
        dists = [] if greedy else [_one_hot(token) for token in drafts]
        return Proposal(drafts, dists, (time.perf_counter() - started) * 1000)

    async def propose(
        self,
        stream_id: int,
        committed: list[int],
        k: int,
        config: GenerationConfig,
        rng: np.random.Generator,
    ) -> Proposal:
        """Up to ``k`` drafts continuing ``committed`` (none without a match); ``rng`` is not
        used: nothing is sampled."""
        return self.proposal(stream_id, committed, k, config.greedy)

    def predictable(self, stream_id: int, committed: list[int]) -> bool:
        n, _ = self._synced(stream_id, committed).match()
        return n >= self.predictable_n

    async def release(self, stream_id: int) -> None:
        self._index.pop(stream_id, None)

    async def close(self) -> None:
        self._index.clear()


def _one_hot(token: int) -> SparseDist:
    return SparseDist(np.array([token], dtype=np.int32), np.ones(1, dtype=np.float32))
