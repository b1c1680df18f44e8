"""Speculative decoding on the coordinator: the draft model and the choice of K.

The draft is a whole (monolithic, or 1-stage) export running in the coordinator's process. It
proposes K tokens one at a time; the target verifies all of them in one K+1-position pass
through the pipeline. The draft's cache is rewound with the same mask-based rule as the target's.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from fleetgui.runtime.head import SamplingParams, SparseDist, probabilities, sample
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.sequence import CompactionPolicy, FedTokens
from fleetgui.runtime.stage import ForwardRequest, LogitsHead, run_holding

log = logging.getLogger(__name__)

K_MIN, K_MAX = 1, 16


def check_k(k: int) -> int:
    if not K_MIN <= k <= K_MAX:
        raise ValueError(f"K must be between {K_MIN} and {K_MAX} (or auto), got {k}")
    return k


@dataclass
class Proposal:
    drafts: list[int]
    dists: list[SparseDist]  # empty in greedy mode
    ms: float


class DraftModel:
    """A draft model in this process, with per-stream fed tokens for mask-based rewind."""

    def __init__(
        self,
        stage: LocalStage,
        *,
        context_limit: int,
        prefill_chunk: int = 256,
        policy: CompactionPolicy | None = None,
    ) -> None:
        self.stage = stage
        self.context_limit = context_limit
        self.prefill_chunk = prefill_chunk
        self.policy = policy or CompactionPolicy()
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
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> Proposal:
        """K draft tokens continuing ``committed`` (greedy, or sampled with their distributions)."""
        # all K passes on one worker thread: two thread wake-ups instead of two each (the draft
        # is small, so wake-ups were most of its time)
        return await run_holding([self.stage], self._propose, stream_id, committed, k, params, rng)

    def _propose(
        self,
        stream_id: int,
        committed: list[int],
        k: int,
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> Proposal:
        started = time.perf_counter()
        drafts: list[int] = []
        dists: list[SparseDist] = []
        logits = self._feed(stream_id, committed, len(committed))
        for i in range(k):
            if params.greedy:
                token = int(np.argmax(logits))
            else:
                probs = probabilities(logits, params)
                token = sample(probs, float(rng.random()))
                dists.append(SparseDist.from_dense(probs))
            drafts.append(token)
            if i < k - 1:
                logits = self._feed(stream_id, committed + drafts, len(committed))
        return Proposal(drafts, dists, (time.perf_counter() - started) * 1000)

    async def release(self, stream_id: int) -> None:
        self._fed.pop(stream_id, None)
        await self.stage.release(stream_id)


@dataclass
class AutoK:
    """Chooses K from the measured acceptance rate and the measured cost of a round.

    Expected tokens per round with per-token acceptance ``a`` is (1 - a^(K+1)) / (1 - a). A
    round (the draft's K proposals plus one verify pass of K+1 positions) costs what rounds at
    that K cost so far (a moving average), and at a K not run yet, the line through the Ks that
    were. K maximises tokens per millisecond.

    The draft's time counts per round, not per draft: a proposal has a fixed part (its first
    pass also feeds the tokens accepted last round), and dividing it by K made small Ks look
    dear per draft (on the demo fleet 2.5 ms a draft at K=1, 1.0 at K=8), which held K at 1-2
    where K=6 ran faster. Measured on the demo fleet, interleaved (4 held-out prompts x 96
    tokens x 8 rounds, three runs): 166.6 vs 164.3, 173.2 vs 155.8 and 162.5 vs 154.3 tok/s
    against the per-draft model. (A model that splits the round into a fixed part, timed draft
    steps and a verify line, with exploration, did better in noisy simulations and no better
    on the fleet: 182.4 vs 183.0, 181.7 vs 190.5, 162.8 vs 173.0.)

    ``a`` is estimated as a round sees it: each accepted draft is a success and the first
    rejected one a failure (a round that accepts all K has none), so ``a`` = successes / trials
    (both as moving averages). Taking accepted / K instead underestimates ``a`` the more the
    larger K is (per-token 0.9 at K=4 reads 0.78), which pulled K down round after round.
    """

    initial_k: int = 4
    successes: float = 0.7  # accepted drafts per round (moving average)
    trials: float = 1.0  # drafts judged per round: accepted + the rejected one (moving average)
    smoothing: float = 0.2
    _round: dict[int, float] = field(default_factory=dict)  # K -> draft + verify ms (EMA)

    @property
    def alpha(self) -> float:
        """Estimated per-token acceptance rate."""
        return self.successes / self.trials

    def update(self, k: int, accepted: int, draft_ms: float, verify_ms: float) -> None:
        s = self.smoothing
        judged = accepted + (1 if accepted < k else 0)
        self.successes = (1 - s) * self.successes + s * accepted
        self.trials = (1 - s) * self.trials + s * judged
        ms = draft_ms + verify_ms
        old = self._round.get(k)
        self._round[k] = ms if old is None else (1 - s) * old + s * ms

    def round_ms(self, k: int) -> float:
        """A round's expected time at ``k`` (once a round was recorded)."""
        return self._round_costs()[k - K_MIN]

    def _round_costs(self) -> list[float]:
        """The expected round time for every K from :data:`K_MIN` to :data:`K_MAX`: measured
        where that K ran, else on the line through the Ks that did (fitted once)."""
        points = sorted(self._round.items())
        if len(points) >= 2:
            ks = np.array([p[0] for p in points], dtype=float)
            ms = np.array([p[1] for p in points], dtype=float)
            slope, intercept = (float(v) for v in np.polyfit(ks, ms, 1))
        else:  # one K so far: a draft adds a pass, the verify a position
            ((base_k, base_ms),) = points
            slope, intercept = 0.1 * base_ms, base_ms * (1 - 0.1 * base_k)
        return [
            self._round.get(k, max(intercept + slope * k, 1e-3)) for k in range(K_MIN, K_MAX + 1)
        ]

    def choose(self) -> int:
        if not self._round:
            return self.initial_k
        a = min(max(self.alpha, 0.01), 0.99)
        costs = self._round_costs()  # one fit per round: np.polyfit per K cost 0.6 ms a round
        best_k, best_rate = K_MIN, -math.inf
        for k, ms in zip(range(K_MIN, K_MAX + 1), costs, strict=True):
            rate = (1 - a ** (k + 1)) / (1 - a) / ms
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k
