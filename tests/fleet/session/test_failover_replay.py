"""Failover replays (``fleetgui.fleet.session.failover``): a worker killed mid-reply on the real
demo target with its default precision (int8 weights, int8 activations on the CPU): every
stream's text is the uninterrupted run's. Replaying the stream's steps as one chunk computed
other rounding and changed the text after 5 of 8 failovers (benchmarks/soak_fleet.py); the
replay now runs the passes as they ran.

Streams interleaved one a pass (``--no-batching``): at this precision the rows a batched pass
shares with other streams change a stream's rounding too (the same 4 prompts together differed
from each alone after 27 tokens), so batched runs are exact at f32 only
(tests/fleet/session/test_batched_fleet.py kills a worker mid-batch there)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fleet_support import FAST_LINKS, running_workers

from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.loader import LocalPipelineConfig, with_context

pytestmark = pytest.mark.slow

PROMPTS = (
    "The history of the Roman Empire began",
    "def fibonacci(n):\n",
    "List three uses of a paperclip:",
    "Water boils at",
)
OPTIONS = GenerationConfig(max_new_tokens=32)


def test_streams_replayed_after_a_failover_keep_the_uninterrupted_text(
    smollm2_demo_export: Path, tmp_path: Path, identity: KeyPair, authorized_keys: Path
) -> None:
    # each prompt prefilled whole, as the reference was: at this precision a prompt resumed from
    # its KV (its last token fed again alone) may round otherwise (exact at f32: tests of reuse)
    local = with_context(LocalPipelineConfig(kv_reuse=False), batching=False)
    config = CoordinatorConfig(link=FAST_LINKS, rejoin_interval_s=0.5, local=local)
    with running_workers(
        tmp_path / "fleet", ["a", "b"], authorized_keys, precision="auto"
    ) as workers:

        async def main() -> tuple[dict[str, list[int]], list[GenerationResult]]:
            session = FleetSession(identity, config)
            await session.connect([w.endpoint for w in workers])
            await session.deploy(smollm2_demo_export)
            try:
                pipe = session.pipeline()
                reference = {p: (await pipe.complete(p, OPTIONS)).token_ids for p in PROMPTS}
                assert session.deployment.assignment is not None
                assert [m.name for m in session.deployment.assignment.members] == ["a"]

                async def one(prompt: str) -> GenerationResult:
                    steps = 0
                    async for item in pipe.stream(prompt, OPTIONS):
                        if isinstance(item, GenerationResult):
                            return item
                        steps += 1
                        if prompt == PROMPTS[0] and steps == 10:  # mid-reply, all 4 running
                            workers[0].kill()
                    raise AssertionError("no result")

                results = await asyncio.gather(*(one(p) for p in PROMPTS))
                assert session.failover.failovers == ["a"]
                return reference, list(results)
            finally:
                await session.close()

        reference, results = asyncio.run(main())
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert result.token_ids == reference[prompt], prompt
