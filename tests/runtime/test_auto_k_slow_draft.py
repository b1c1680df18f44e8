"""K auto on a real local pipeline whose draft model is made costly: a tiny 2-stage target and a
draft that agrees about half the time, each draft pass slowed by a fake-slow wrapper and each
verify by a fake-slow link, so that one draft a round is the best K (as for the distilled
SmolLM2 draft at 0 ms a hop). Greedy text stays the same whatever K is chosen."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from runtime_support import pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.auto_k import K_MAX, AutoK
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.speculative import Drafter, Proposal
from fleetgui.runtime.stage import ForwardRequest, ForwardResult

pytestmark = pytest.mark.slow

PROMPTS = (
    "def add(a, b):\n    return",
    "The old lighthouse keeper climbed the stairs every evening, and",
    "import os",
)
N_NEW = 48
DRAFT_PASS_MS = 8.0  # what the fake-slow draft adds to each draft pass
HOP_MS, POSITION_MS = 30.0, 10.0  # what the fake-slow link adds to a pass, and per position


class FakeSlowDraft:
    """A fake: the real drafter, each of its draft passes made ``pass_ms`` slower (as a draft
    model several times the tiny target's size would be)."""

    def __init__(self, inner: Drafter, pass_ms: float) -> None:
        self.inner = inner
        self.pass_ms = pass_ms

    async def prefill(self, stream_id: int, committed: list[int]) -> None:
        await self.inner.prefill(stream_id, committed)

    async def propose(
        self,
        stream_id: int,
        committed: list[int],
        k: int,
        params: GenerationConfig,
        rng: np.random.Generator,
    ) -> Proposal:
        proposal = await self.inner.propose(stream_id, committed, k, params, rng)
        extra = self.pass_ms * len(proposal.drafts)
        await asyncio.sleep(extra / 1000)
        one = None if proposal.pass_ms is None else proposal.pass_ms + self.pass_ms
        return Proposal(proposal.drafts, proposal.dists, proposal.ms + extra, one)

    def predictable(self, stream_id: int, committed: list[int]) -> bool:
        return self.inner.predictable(stream_id, committed)

    async def release(self, stream_id: int) -> None:
        await self.inner.release(stream_id)

    async def close(self) -> None:
        await self.inner.close()


class FakeSlowLink:
    """A fake: the real route, each pass through it ``hop_ms`` slower plus ``position_ms`` a
    position (up to a verify's most), as over a link to busy workers."""

    def __init__(self, inner: object, hop_ms: float, position_ms: float) -> None:
        self.inner = inner
        self.hop_ms = hop_ms
        self.position_ms = position_ms

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def run(self, request: ForwardRequest) -> ForwardResult:
        positions = min(request.n_positions, K_MAX + 1)
        await asyncio.sleep((self.hop_ms + self.position_ms * positions) / 1000)
        return await self.inner.run(request)  # type: ignore[attr-defined,no-any-return]


@pytest.fixture(scope="module")
def slow_pair(tiny_export: Callable[..., Path]) -> tuple:
    """A 2-stage target export and a draft that agrees with it about half the time."""
    return tiny_export(2), tiny_export(1, draft=0.03)


def _replies(slow_pair: tuple, k: int | Literal["auto"]) -> list[GenerationResult]:
    """One greedy reply to each prompt; K auto starts each from a new chooser, as
    ``fleetgui bench`` runs it."""

    async def main() -> list[GenerationResult]:
        target, draft = slow_pair
        pipe = pipeline(target, draft=draft)
        assert pipe.draft is not None
        pipe.draft = FakeSlowDraft(pipe.draft, DRAFT_PASS_MS)
        pipe.route = FakeSlowLink(pipe.route, HOP_MS, POSITION_MS)  # type: ignore[assignment]
        options = GenerationConfig(max_new_tokens=N_NEW, k=k)
        results = []
        try:
            for prompt in PROMPTS:
                pipe.new_auto_k = functools.partial(AutoK)
                results.append(await pipe.complete(prompt, options))
        finally:
            await pipe.close()
        return results

    return asyncio.run(main())


def test_k_auto_keeps_a_costly_draft_near_one_draft_a_round(slow_pair: tuple) -> None:
    """A draft pass costs 8 ms more and each verified position 10 ms, so a second draft, taken
    half the time, costs more than it returns: K auto spends at most 1.35 drafts a round
    (here 1.22-1.26), and no reply's first three rounds propose more than 8 drafts. K auto as
    it was proposed 4, 4 and 6 drafts in them, and 1.40-1.45 a round. The text is K=1's."""
    fixed = _replies(slow_pair, 1)
    auto = _replies(slow_pair, "auto")
    ks = [k for result in auto for k in result.ks]
    assert float(np.mean(ks)) <= 1.35, [result.ks for result in auto]
    assert all(sum(result.ks[:3]) <= 8 for result in auto), [result.ks for result in auto]
    for one, other in zip(fixed, auto, strict=True):
        assert other.token_ids == one.token_ids
