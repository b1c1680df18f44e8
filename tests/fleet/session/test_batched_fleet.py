"""Several users in one pass on real workers: eight streams of different lengths joining and
leaving at different times travel as batched passes through this PC's stage and a ring of two
workers (one message a hop), and each gets the unsplit model's tokens (f32, greedy), in PP and
PP+SD with n-gram drafts, and when a worker is killed while the batch runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from fleet_support import fast_coordinator
from runtime_support import EIGHT_USERS, eight_users

from fleetgui.assembler import aopen
from fleetgui.fleet.local_fleet.worker_process import LocalWorker
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.draft_source import NGRAM
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.pass_scheduler import PassScheduler
from fleetgui.runtime.pipeline import Pipeline

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("k", "kill"),
    [("off", False), (3, False), ("off", True)],
    ids=["pp", "pp+sd-ngram", "pp-worker-killed"],
)
def test_eight_users_batched_on_the_fleet_get_the_unsplit_models_tokens(
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    start_workers: Callable[..., list[LocalWorker]],
    identity: KeyPair,
    k: int | str,
    kill: bool,
) -> None:
    export = tiny_export(3)  # stage 0 here, stage 1 on a, stage 2 on b
    a, b = start_workers(*(f"{name}-{k}-{kill}" for name in ("a", "b")))

    async def main() -> tuple[list[list[int]], list[int], list[str]]:
        coordinator = replace(fast_coordinator(), worker_precision="f32")
        llm = await aopen(
            export,
            workers=[a.endpoint, b.endpoint],
            draft=NGRAM if k != "off" else None,
            identity=identity,
            coordinator=coordinator,
            max_streams=8,
        )
        pipe = llm.runtime
        assert isinstance(pipe, Pipeline) and isinstance(pipe.passes, PassScheduler)
        seen = 0

        async def complete(prompt: str, config: GenerationConfig) -> GenerationResult:
            nonlocal seen
            result = None
            async for item in llm.astream_result(prompt, config):
                if isinstance(item, GenerationResult):
                    result = item
                    continue
                seen += 1
                if kill and seen == 40 and b.process is not None:  # all eight have joined
                    b.kill()
            assert result is not None
            return result

        try:
            got = await eight_users(complete, GenerationConfig(k=k))
            sizes = [len(formed.streams) for formed in pipe.passes.formed]
            return got, sizes, list(llm.sessions[0].failover.failovers)
        finally:
            await llm.aclose(unload=True)

    got, sizes, lost = asyncio.run(main())
    for (prompt, n_new), tokens in zip(EIGHT_USERS, got, strict=True):
        assert tokens == tiny_greedy(prompt, n_new), prompt
    assert max(sizes) >= 2  # passes carried several streams
    assert lost == ([b.name] if kill else [])
