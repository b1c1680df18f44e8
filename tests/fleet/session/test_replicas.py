"""Replicas (``fleetgui.fleet.session.replicas``): whole copies of the real demo target on 2
worker processes: streams spread over the copies, each with the unsplit model's greedy text, and
a copy killed mid-reply replayed on the other."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest
from fleet_support import WorkerProcess
from smollm2_support import SMOLLM2_NEW_TOKENS, SMOLLM2_PROMPTS

from fleetgui.assembler import aopen
from fleetgui.fleet.ring.link import LinkConfig
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.replicas import ReplicatedPipeline
from fleetgui.generation_config import GenerationConfig
from fleetgui.llm_pipeline import LLMPipeline
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.generation import GenerationResult, TokenDelta
from fleetgui.runtime.loader import LocalPipelineConfig
from fleetgui.runtime.ov_stage import StageConfig

pytestmark = pytest.mark.slow

EXACT = StageConfig(precision="f32", threads=1)
CONFIG = CoordinatorConfig(
    # lost after 4 s: 1.5 s lost both workers of a loaded CI machine before their first token
    link=LinkConfig(heartbeat_interval_s=0.25, lost_after_s=4.0),
    local=LocalPipelineConfig(stage=EXACT, draft_stage=EXACT),
    worker_precision="f32",
    worker_threads=1,
)
GREEDY = GenerationConfig(max_new_tokens=SMOLLM2_NEW_TOKENS)


@pytest.fixture(scope="module")
def workers(start_workers: Callable[..., list[WorkerProcess]]) -> list[WorkerProcess]:
    """Two workers for the module: the second test deploys the copies again onto them (from
    their caches) and kills one of them, so it runs last."""
    return start_workers("a", "b")


async def _replicas(export: Path, workers: list[WorkerProcess], identity: KeyPair) -> LLMPipeline:
    """A whole copy of ``export`` on each worker, as ``fleetgui.open(layout="replicas")``."""
    return await aopen(
        export,
        workers=[w.endpoint for w in workers],
        layout="replicas",
        identity=identity,
        coordinator=CONFIG,
    )


def _replicated(llm: LLMPipeline) -> ReplicatedPipeline:
    assert isinstance(llm.runtime, ReplicatedPipeline)
    return llm.runtime


def test_two_streams_on_two_copies_each_give_the_unsplit_models_text(
    smollm2_fp32_exports: dict[int, Path],
    smollm2_references: dict[str, list[int]],
    identity: KeyPair,
    workers: list[WorkerProcess],
) -> None:
    async def main() -> list[GenerationResult]:
        llm = await _replicas(smollm2_fp32_exports[2], workers, identity)
        copies = _replicated(llm)
        try:
            assert [r.name for r in copies.replicas] == ["a", "b"]
            assert all(
                r.session.deployment.assignment.members[0].indices == (0, 1)
                for r in copies.replicas
            )
            results = await asyncio.gather(*(copies.complete(p, GREEDY) for p in SMOLLM2_PROMPTS))
            assert [r.served for r in copies.replicas] == [1, 1]  # one stream on each copy
            return results
        finally:
            await llm.aclose()

    results = asyncio.run(main())
    for prompt, result in zip(SMOLLM2_PROMPTS, results, strict=True):
        assert result.token_ids == smollm2_references[prompt]


def test_a_returning_conversation_goes_back_to_the_copy_that_keeps_its_kv(
    tiny_export: Callable[..., Path], identity: KeyPair, workers: list[WorkerProcess]
) -> None:
    """Two conversations start at once, one on each copy; every next turn of each, asked alone,
    goes back to the copy that keeps its KV, although the other copy is as idle and the
    least-loaded rule alone would send every request to the first copy."""
    opening = "You are a helpful assistant who writes Python code for people.\n"
    config = GenerationConfig(max_new_tokens=8)

    async def main() -> tuple[list[str], list[list[tuple[str, GenerationResult]]]]:
        llm = await _replicas(tiny_export(2), workers, identity)
        copies = _replicated(llm)

        async def alone(prompt: str) -> tuple[str, GenerationResult]:
            before = [r.served for r in copies.replicas]
            result = await copies.complete(prompt, config)
            after = [r.served for r in copies.replicas]
            (name,) = [
                r.name for r, a, b in zip(copies.replicas, after, before, strict=True) if a > b
            ]
            return name, result

        prompts = [opening + "def add(a, b):", opening + "class Point:"]
        firsts = await asyncio.gather(*(copies.complete(p, config) for p in prompts))
        for i, result in enumerate(firsts):
            prompts[i] += result.text + " and now add them"
        try:
            ids = [copies.tokenizer.encode(p) for p in prompts]
            holders = [max(copies.replicas, key=lambda r, t=t: r.kept_prefix(t)).name for t in ids]
            turns: list[list[tuple[str, GenerationResult]]] = [[], []]
            for line in (" and now multiply them", " then divide"):
                for i in range(2):
                    turns[i].append(await alone(prompts[i]))
                    prompts[i] += turns[i][-1][1].text + line
            return holders, turns
        finally:
            await llm.aclose()

    holders, turns = asyncio.run(main())
    assert sorted(holders) == ["a", "b"]  # the first turns went one to each copy
    for holder, conversation in zip(holders, turns, strict=True):
        assert [copy for copy, _ in conversation] == [holder, holder]  # back to its copy
        assert all(result.cached_tokens > 0 for _, result in conversation)


def test_a_copy_killed_mid_reply_is_replayed_on_the_other_with_the_same_text(
    smollm2_fp32_exports: dict[int, Path],
    smollm2_references: dict[str, list[int]],
    identity: KeyPair,
    workers: list[WorkerProcess],
) -> None:
    prompt = SMOLLM2_PROMPTS[0]

    async def main(copies: ReplicatedPipeline) -> tuple[str, GenerationResult]:
        text, result = "", None
        async with contextlib.aclosing(copies.stream(prompt, GREEDY)) as items:
            async for item in items:
                if isinstance(item, TokenDelta):
                    text += item.text
                    if len(text) > 20 and copies.replays == 0:
                        serving = next(r for r in copies.replicas if r.streams)
                        next(w for w in workers if w.name == serving.name).kill()
                else:
                    result = item
        assert result is not None
        return text, result

    async def run() -> tuple[str, GenerationResult, ReplicatedPipeline]:
        llm = await _replicas(smollm2_fp32_exports[2], workers, identity)
        try:
            text, result = await main(_replicated(llm))
            return text, result, _replicated(llm)
        finally:
            await llm.aclose()

    text, result, copies = asyncio.run(run())
    assert result.token_ids == smollm2_references[prompt]
    assert text == result.text  # nothing sent twice, nothing missing
    assert copies.replays == 1
    failed = [r for r in copies.replicas if r.failed]
    assert len(failed) == 1 and [r.served for r in copies.replicas] == [1, 1]
