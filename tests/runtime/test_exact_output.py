"""PP, PP+SD and PP+SD+MB greedy output is token-for-token the monolithic model's (fp32)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import export, perturbed_copy, pipeline, reference_greedy

from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.auto_k import AutoK
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.sequence import CompactionPolicy

pytestmark = pytest.mark.slow

FAMILIES = ("llama", "qwen3", "gemma2", "gemma3")
N_NEW = 48
PROMPTS = (
    "def add(a, b):\n    return",
    "The old lighthouse keeper climbed the stairs every evening, and",
    "import os",
)


def _monolithic_or_unsplit(model: Path, out: Path) -> Path:
    """optimum-intel's monolithic export where it supports the architecture (it refuses Gemma 2
    under transformers > 5.0), else fleetgui's unsplit 1-stage export."""
    try:
        return export(model, out, monolithic=True)
    except FleetguiError as exc:
        assert "--stages 1" in str(exc)
        return export(model, out.with_name(out.name + "-1s"), stages=1)


@pytest.fixture(scope="module")
def family_exports(tiny_models: Callable[..., Path], root: Path) -> dict[str, dict[str, Path]]:
    out: dict[str, dict[str, Path]] = {}
    for family in FAMILIES:
        model = tiny_models(family)
        close = perturbed_copy(model, root / f"{family}-close", scale=0.003)
        far = perturbed_copy(model, root / f"{family}-far", scale=1.5)
        out[family] = {
            "2": export(model, root / f"{family}-2s", stages=2),
            "3": export(model, root / f"{family}-3s", stages=3),
            "mono": _monolithic_or_unsplit(model, root / f"{family}-mono"),
            "close": export(close, root / f"{family}-close-1s", stages=1),
            "far": export(far, root / f"{family}-far-1s", stages=1),
        }
    return out


@pytest.fixture(scope="module")
def references(family_exports: dict[str, dict[str, Path]]) -> dict[tuple[str, str], list[int]]:
    from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

    refs = {}
    for family, paths in family_exports.items():
        tokenizer = Tokenizer(tokenizer_dir_of(paths["2"]))
        for prompt in PROMPTS:
            refs[family, prompt] = reference_greedy(paths["mono"], tokenizer.encode(prompt), N_NEW)
    return refs


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stages", ["2", "3"])
def test_pp_greedy_matches_monolithic(
    family: str, stages: str, family_exports: dict, references: dict
) -> None:
    async def main() -> None:
        pipe = pipeline(family_exports[family][stages])
        try:
            for prompt in PROMPTS:
                result = await pipe.complete(prompt, GenerationConfig(max_new_tokens=N_NEW))
                assert result.token_ids == references[family, prompt], prompt
                assert result.finish_reason == "max_tokens"
        finally:
            await pipe.close()

    asyncio.run(main())


@pytest.mark.parametrize("family", FAMILIES)
# speculation lives in the coordinator: the stages see K + 1 positions and rewinds whatever
# their count, so the far draft's many rewinds take the longer chain (PP covers both counts)
@pytest.mark.parametrize(("stages", "draft"), [("2", "close"), ("3", "far")])
def test_pp_sd_greedy_matches_monolithic(
    family: str, stages: str, draft: str, family_exports: dict, references: dict
) -> None:
    async def main() -> None:
        paths = family_exports[family]
        pipe = pipeline(paths[stages], draft=paths[draft])
        rates = {}
        try:
            for k in (1, 3, 8):
                options = GenerationConfig(max_new_tokens=N_NEW, k=k)
                for prompt in PROMPTS:
                    result = await pipe.complete(prompt, options)
                    assert result.token_ids == references[family, prompt], (k, prompt)
                    assert result.acceptance_rate is not None
                    rates[k, prompt] = result.acceptance_rate
        finally:
            await pipe.close()
        mean = sum(rates.values()) / len(rates)
        if draft == "close":
            assert mean > 0.6, rates  # the close draft really agrees often...
        else:
            assert mean < 0.5, rates  # ...and the far one rarely: rewinds are exercised

    asyncio.run(main())


@pytest.mark.parametrize("family", FAMILIES)
def test_pp_sd_mb_streams_match_monolithic(
    family: str, family_exports: dict, references: dict
) -> None:
    """Three concurrent streams with different prompt lengths; the third joins late."""

    async def main() -> None:
        paths = family_exports[family]
        pipe = pipeline(paths["3"], draft=paths["close"])
        options = GenerationConfig(max_new_tokens=N_NEW, k=3)
        first_tokens = asyncio.Event()
        results: dict[str, list[int]] = {}

        async def run(prompt: str, wait: bool) -> None:
            if wait:
                await first_tokens.wait()
            async for item in pipe.stream(prompt, options):
                if hasattr(item, "finish_reason"):
                    results[prompt] = item.token_ids  # type: ignore[union-attr]
                elif not wait and len(results) == 0:
                    first_tokens.set()

        try:
            await asyncio.gather(
                run(PROMPTS[0], False), run(PROMPTS[1], False), run(PROMPTS[2], True)
            )
        finally:
            await pipe.close()
        for prompt in PROMPTS:
            assert results[prompt] == references[family, prompt], prompt

    asyncio.run(main())


def test_pp_sd_mb_with_k_auto_matches_monolithic(family_exports: dict, references: dict) -> None:
    """Three concurrent streams choose their own K (braked, as several streams generate) with
    a draft that rarely agrees: K changes between rounds and the text stays exact."""

    async def main() -> list[GenerationResult]:
        paths = family_exports[FAMILIES[0]]
        pipe = pipeline(paths["2"], draft=paths["far"])
        options = GenerationConfig(max_new_tokens=N_NEW, k="auto")
        try:
            return await asyncio.gather(*(pipe.complete(p, options) for p in PROMPTS))
        finally:
            await pipe.close()

    results = asyncio.run(main())
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert result.token_ids == references[FAMILIES[0], prompt], prompt
    assert any(len(set(result.ks)) > 1 for result in results), [r.ks for r in results]


def test_the_next_k_auto_stream_starts_from_the_last_ones_estimates(
    family_exports: dict, references: dict
) -> None:
    """With a draft that rarely agrees the first reply's K falls from the initial 2 to 1; the
    next reply on the same pipeline starts where it ended instead of at 2 again."""

    async def main() -> tuple[GenerationResult, GenerationResult]:
        paths = family_exports[FAMILIES[0]]
        pipe = pipeline(paths["2"], draft=paths["far"])
        options = GenerationConfig(max_new_tokens=N_NEW, k="auto")
        try:
            first = await pipe.complete(PROMPTS[0], options)
            second = await pipe.complete(PROMPTS[1], options)
        finally:
            await pipe.close()
        return first, second

    first, second = asyncio.run(main())
    assert first.token_ids == references[FAMILIES[0], PROMPTS[0]]
    assert second.token_ids == references[FAMILIES[0], PROMPTS[1]]
    assert first.ks[0] == AutoK.initial_k == 2 and min(first.ks) == 1, first.ks
    assert second.ks[0] == 1, (first.ks, second.ks, first.acceptance_rate)


def test_compaction_keeps_output_exact(
    family_exports: dict, references: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an eager compaction policy and a short context, masked KV entries are dropped
    (many times) while the far draft keeps rejecting; the output does not change. Stateful
    stages (a model that cannot page, and drafts) mask rejected entries; paged ones overwrite
    them and have nothing to compact."""
    calls: list[int] = []
    original = LocalStage._compact

    def counting(self: LocalStage, slot: object) -> None:
        calls.append(self.index)
        original(self, slot)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalStage, "_compact", counting)

    async def main() -> None:
        paths = family_exports["llama"]
        pipe = pipeline(paths["2"], draft=paths["far"], paged=False)
        pipe.compaction = CompactionPolicy(waste_fraction=0.05, min_masked=4)
        assert pipe.draft is not None
        pipe.draft.policy = CompactionPolicy(waste_fraction=0.05, min_masked=4)
        try:
            for prompt in PROMPTS:
                options = GenerationConfig(max_new_tokens=N_NEW, k=8)
                result = await pipe.complete(prompt, options)
                assert result.token_ids == references["llama", prompt]
        finally:
            await pipe.close()

    asyncio.run(main())
    assert {0, 1} <= set(calls), calls  # both target stages compacted (and the draft, index 0)


def test_context_limit_compacts_then_stops_cleanly(family_exports: dict, references: dict) -> None:
    async def main() -> None:
        paths = family_exports["llama"]
        prompt = PROMPTS[0]
        pipe = pipeline(paths["2"], draft=paths["far"], context_limit=40)
        try:
            n_prompt = len(pipe.tokenizer.encode(prompt))
            options = GenerationConfig(max_new_tokens=N_NEW, k=8)
            result = await pipe.complete(prompt, options)
        finally:
            await pipe.close()
        assert result.finish_reason == "context"
        assert len(result.token_ids) == 40 - n_prompt
        assert result.token_ids == references["llama", prompt][: len(result.token_ids)]

    asyncio.run(main())
