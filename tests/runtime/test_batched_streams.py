"""Several users in one pass: streams of different prompt lengths joining and leaving at
different times are batched in each stage's passes, and each gets the unsplit model's tokens."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import EIGHT_USERS, eight_users, pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.pass_scheduler import PassFormed

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("k", ["off", 3], ids=["PP", "PP+SD n-gram"])
def test_eight_users_batched_get_the_unsplit_models_tokens(
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    k: int | str,
) -> None:
    async def main() -> tuple[list[list[int]], list[PassFormed]]:
        pipe = pipeline(tiny_export(2), draft="ngram" if k != "off" else None)  # type: ignore[arg-type]
        try:
            got = await eight_users(pipe.complete, GenerationConfig(k=k))
            return got, list(pipe.passes.formed)
        finally:
            await pipe.close()

    got, formed = asyncio.run(main())
    for (prompt, n_new), tokens in zip(EIGHT_USERS, got, strict=True):
        assert tokens == tiny_greedy(prompt, n_new), prompt
    assert max(len(f.streams) for f in formed) >= 2  # several streams a pass
    # whether a prompt meets running streams here depends on timing; test_pipeline's
    # test_a_prompt_beside_a_generating_stream_is_prefilled_in_small_passes makes it meet them
