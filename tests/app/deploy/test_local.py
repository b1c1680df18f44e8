"""The app's deployer on this PC (``fleetgui.app.deploy.local``): a real tiny export deployed
with the n-gram drafter speculates without a draft model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from runtime_support import EXACT

from fleetgui.app.deploy.interfaces import DeployRequest
from fleetgui.app.deploy.local import LocalDeployer
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.draft_source import NGRAM
from fleetgui.runtime.ngram_draft import NgramDraft


@pytest.mark.slow
def test_deploying_with_ngram_speculates_without_a_draft_model(
    tiny_export: Callable[..., Path],
) -> None:
    target = tiny_export(2)

    async def main() -> None:
        llm = await LocalDeployer(EXACT).deploy(DeployRequest(target, NGRAM), lambda _: None)
        try:
            assert isinstance(llm.runtime.draft, NgramDraft)
            options = GenerationConfig(max_new_tokens=12, k=3)
            result = await llm.agenerate_result("def add(a, b):\n    return", options)
            assert len(result.token_ids) == 12 and result.acceptance_rate is not None
        finally:
            await llm.aclose()

    asyncio.run(main())
