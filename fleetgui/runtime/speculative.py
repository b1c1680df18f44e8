"""Speculative decoding's drafters: what the pipeline asks of one, and the draft model.

The draft is a whole (monolithic, or 1-stage) export running in the coordinator's process. It
proposes K tokens one at a time; the target verifies all of them in one K+1-position pass
through the pipeline. The draft's cache is rewound with the same mask-based rule as the target's.
How many tokens a round proposes is K auto's choice (:mod:`fleetgui.runtime.auto_k`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.head import SparseDist, probabilities, sample
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.sequence import CompactionPolicy, FedTokens
from fleetgui.runtime.stage import (
    SHORT_WORK_MS,
    ForwardRequest,
    LogitsHead,
    fits_inline,
    run_holding,
)

log = logging.getLogger(__name__)


@dataclass
class Proposal:
    drafts: list[int]  # at most the K asked for; fewer (or none) when the drafter has no more
    dists: list[SparseDist]  # empty in greedy mode
    ms: float
    pass_ms: float | None = None  # one draft pass, what one more draft adds (None: not timed)


class Drafter(Protocol):
    """What the pipeline asks of a drafter: a draft model (:class:`DraftModel`) or a draft-free
    one (:class:`~fleetgui.runtime.ngram_draft.NgramDraft`)."""

    async def prefill(self, stream_id: int, committed: list[int]) -> None:
        """Take in the prompt ahead of the first proposal (overlaps the target's prefill)."""

    async def propose(
        self,
        stream_id: int,
        committed: list[int],
        k: int,
        config: GenerationConfig,
        rng: np.random.Generator,
    ) -> Proposal:
        """At most ``k`` drafts continuing ``committed`` (with their distributions when
        sampling)."""
        ...

    def predictable(self, stream_id: int, committed: list[int]) -> bool:
        """Whether the text looks predictable to this drafter now, judged without running a
        model (an n-gram drafter's long match): K auto probes speculation although it is off."""
        ...

    async def release(self, stream_id: int) -> None:
        """Forget a finished stream."""

    async def close(self) -> None:
        """Free everything (the pipeline is closing)."""


class DraftModel:
    """A draft model in this process, with per-stream fed tokens for mask-based rewind."""

    def __init__(
        self,
        stage: LocalStage,
        *,
        context_limit: int,
        prefill_chunk: int = 256,
        policy: CompactionPolicy | None = None,
        inline_ms: float = SHORT_WORK_MS,
    ) -> None:
        self.stage = stage
        self.context_limit = context_limit
        self.prefill_chunk = prefill_chunk
        self.policy = policy or CompactionPolicy()
        # proposals expected to take at most this long run on the event loop's thread: the
        # draft runs one at a time anyway (docs/design-measurements.md)
        self.inline_ms = inline_ms
        self._pass_ms: float | None = None  # the last proposal's time per draft token
        self._fed: dict[int, FedTokens] = {}

    def _tokens(self, stream_id: int) -> FedTokens:
        return self._fed.setdefault(stream_id, FedTokens())

    def _feed(self, stream_id: int, sequence: list[int], stable: int) -> np.ndarray:
        """Bring the draft's cache to ``sequence`` (its first ``stable`` tokens committed, the
        rest this round's drafts); the logits after its last token. Runs off the event loop,
        holding the stage's lock (:func:`~fleetgui.runtime.stage.run_holding`)."""
        fed = self._tokens(stream_id)
        rewind, pending = fed.plan(sequence, stable)
        if not pending:  # cache already ends with the committed text: re-feed its last token
            rewind, pending = rewind + 1, sequence[-1:]
        logits = None
        for start in range(0, len(pending), self.prefill_chunk):
            chunk = pending[start : start + self.prefill_chunk]
            fed.applied(rewind, [])
            compact = self.policy.should_compact(fed, len(chunk), self.context_limit)
            result = self.stage.forward_blocking(
                ForwardRequest(
                    stream_id,
                    np.array([chunk], dtype=np.int64),
                    rewind=rewind,
                    compact=compact,
                    head=LogitsHead(),
                )
            )
            if compact:
                fed.compacted()
            fed.applied(0, chunk)
            rewind = 0
            logits = result.logits
        if logits is None:
            raise RuntimeError("draft model returned no logits")
        return logits

    async def prefill(self, stream_id: int, committed: list[int]) -> None:
        """Feed the prompt ahead of the first proposal (overlaps the target's prefill)."""
        prompt = committed[:-1] or committed
        await run_holding([self.stage], self._feed, stream_id, prompt, len(prompt))

    async def propose(
        self,
        stream_id: int,
        committed: list[int],
        k: int,
        config: GenerationConfig,
        rng: np.random.Generator,
    ) -> Proposal:
        """K draft tokens continuing ``committed`` (greedy, or sampled with their distributions).

        All K passes run in one go: on the event loop's thread when the last proposal says they
        take at most ``inline_ms``, else on one worker thread (two thread wake-ups instead of
        two a pass)."""
        args = (stream_id, committed, k, config, rng)
        expected = None if self._pass_ms is None else self._pass_ms * k
        if fits_inline(expected, self.inline_ms):
            async with self.stage.lock:
                proposal = self._propose(*args)
        else:
            proposal = await run_holding([self.stage], self._propose, *args)
        self._pass_ms = proposal.ms / k
        return proposal

    def _propose(
        self,
        stream_id: int,
        committed: list[int],
        k: int,
        config: GenerationConfig,
        rng: np.random.Generator,
    ) -> Proposal:
        started = time.perf_counter()
        drafts: list[int] = []
        dists: list[SparseDist] = []
        logits = self._feed(stream_id, committed, len(committed))
        first_ms = (time.perf_counter() - started) * 1000  # also catches up on the last round
        for i in range(k):
            if config.greedy:
                token = int(np.argmax(logits))
            else:
                probs = probabilities(logits, config)
                token = sample(probs, float(rng.random()))
                dists.append(SparseDist.from_dense(probs))
            drafts.append(token)
            if i < k - 1:
                logits = self._feed(stream_id, committed + drafts, len(committed))
        ms = (time.perf_counter() - started) * 1000
        # the passes after the first are one draft each; a lone pass stands for them
        pass_ms = (ms - first_ms) / (k - 1) if k > 1 else ms
        return Proposal(drafts, dists, ms, pass_ms)

    def predictable(self, stream_id: int, committed: list[int]) -> bool:
        return False  # only a proposal tells: K auto probes a draft model by count

    async def release(self, stream_id: int) -> None:
        self._fed.pop(stream_id, None)
        await self.stage.release(stream_id)

    async def close(self) -> None:
        await self.stage.close()
