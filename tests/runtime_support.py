"""Shared helpers for runtime tests: exports, perturbed drafts, reference greedy tokens."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from fleetgui.export.exporter import ExportRequest, export_model
from fleetgui.export.stage_chain import EXACT_CONFIG, StageChain
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.runtime.pipeline import Pipeline

EXACT_STAGE = StageConfig(threads=1, precision="f32")
EXACT = LocalPipelineConfig(stage=EXACT_STAGE, draft_stage=EXACT_STAGE)

#: Two prompts the tiny model continues differently: code, then a story.
TINY_PROMPTS = ("def add(a, b):\n    return", "The old lighthouse keeper climbed the stairs")


def export(model: Path, out: Path, **request: object) -> Path:
    if not (out / "manifest.json").is_file():
        export_model(ExportRequest(model, out, weights="fp32", **request))  # type: ignore[arg-type]
    return out


def perturbed_copy(model: Path, out: Path, scale: float, seed: int = 1) -> Path:
    """The model with Gaussian noise of relative size ``scale`` on every weight: a draft that
    agrees with it often (small scale) or rarely (large scale)."""
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in hf.parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.add_(noise * scale * param.abs().mean())
    hf.save_pretrained(out)
    AutoTokenizer.from_pretrained(model).save_pretrained(out)
    return out


def reference_greedy(mono: Path, prompt_ids: list[int], n_new: int) -> list[int]:
    """Greedy tokens of the monolithic export, one token at a time, f32."""
    chain = StageChain.load(mono, config=EXACT_CONFIG)
    step = chain.forward(prompt_ids)
    tokens = [int(np.argmax(step.logits[0, -1]))]
    while len(tokens) < n_new:
        step = chain.forward(tokens[-1:])
        tokens.append(int(np.argmax(step.logits[0, -1])))
    return tokens


def pipeline(
    export_dir: Path, draft: Path | None = None, *, paged: bool = True, **config: object
) -> Pipeline:
    """The export's pipeline on this PC at f32; ``paged=False``: stateful target stages."""
    stage = replace(EXACT_STAGE, paged=paged)
    cfg = LocalPipelineConfig(stage=stage, draft_stage=EXACT_STAGE, **config)  # type: ignore[arg-type]
    return load_local_pipeline(export_dir, draft_dir=draft, config=cfg)


_SENTENCE = "the quick brown fox jumps over a lazy dog while seven wise owls count stars"
#: (prompt, answer length) of eight users: prompts of 3 to about 150 tokens, answers of 12 to
#: 75 tokens, so that users join and leave at different times
EIGHT_USERS = [
    (" ".join(_SENTENCE.split()[: 2 + i] * (1 + 3 * (i % 3))), 12 + 9 * i) for i in range(8)
]


async def eight_users(
    complete: Callable[[str, GenerationConfig], Awaitable[GenerationResult]],
    config: GenerationConfig,
) -> list[list[int]]:
    """:data:`EIGHT_USERS`' answers' tokens, a new user every 20 ms (``config``'s ``k``)."""

    async def user(index: int, prompt: str, n_new: int) -> list[int]:
        await asyncio.sleep(0.02 * index)
        return (await complete(prompt, replace(config, max_new_tokens=n_new))).token_ids

    return list(await asyncio.gather(*(user(i, p, n) for i, (p, n) in enumerate(EIGHT_USERS))))
