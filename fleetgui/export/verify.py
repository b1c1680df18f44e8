"""``fleetgui verify``: run an export's stage chain against HF transformers (fp32) and against
the monolithic export, on a few prompts, prefill plus decode steps.

The HF model is run once over the whole sequence (prompt plus its own greedy continuation), and
the chain is fed the same tokens incrementally through its KV cache, so every decode step's
logits and every stage boundary's hidden state are compared position by position.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import TOKENIZER_DIR, read_manifest
from fleetgui.export.model_source import open_model_source
from fleetgui.export.stage_chain import EXACT_CONFIG, StageChain

log = logging.getLogger(__name__)

DEFAULT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog because",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village by the sea,",
)
TIE_TOLERANCE = 1e-4  # a top-2 logit gap below this is an exact tie: either token is right
# Largest logit difference to HF fp32 that still passes, per weight format (None: report only).
LOGIT_TOLERANCE: dict[str, float | None] = {"fp32": 1e-3, "fp16": None, "int8": None, "int4": None}


class VerificationError(FleetguiError):
    """The export does not reproduce its model."""


@dataclass
class PromptResult:
    prompt: str
    n_prompt_tokens: int
    max_logit_diff: float  # chain vs HF fp32, over every prefill and decode position
    stage_diffs: list[float]  # each stage's output vs HF's hidden state at that boundary
    tokens_match: bool  # the chain's greedy tokens equal HF's (exact ties excepted)
    ties: int  # positions where HF's top two logits tie and the chain chose the other
    mismatches: int
    monolithic_max_diff: float | None = None  # chain vs the monolithic export
    monolithic_tokens_match: bool | None = None


@dataclass
class VerifyReport:
    export_dir: Path
    weight_format: str
    n_stages: int
    decode_steps: int
    results: list[PromptResult] = field(default_factory=list)

    @property
    def max_logit_diff(self) -> float:
        return max(r.max_logit_diff for r in self.results)

    @property
    def tokens_match(self) -> bool:
        return all(r.tokens_match for r in self.results)

    @property
    def passed(self) -> bool:
        tolerance = LOGIT_TOLERANCE.get(self.weight_format)
        if tolerance is None:
            return all(r.monolithic_tokens_match is not False for r in self.results)
        return self.tokens_match and self.max_logit_diff <= tolerance

    def lines(self) -> list[str]:
        """A human-readable summary, one line per prompt plus a verdict."""
        out = [
            f"{self.export_dir}: {self.n_stages} stage(s), {self.weight_format} weights, "
            f"prefill + {self.decode_steps} decode steps"
        ]
        for r in self.results:
            stages = ", ".join(f"{d:.2e}" for d in r.stage_diffs)
            mono = (
                ""
                if r.monolithic_max_diff is None
                else f"; vs monolithic {r.monolithic_max_diff:.2e}, tokens "
                f"{'match' if r.monolithic_tokens_match else 'DIFFER'}"
            )
            out.append(
                f"  {r.prompt[:30]!r}: max |logit diff| vs HF fp32 {r.max_logit_diff:.2e} "
                f"(per stage {stages}); greedy tokens "
                f"{'match' if r.tokens_match else f'DIFFER at {r.mismatches} positions'}"
                f"{f' ({r.ties} exact ties)' if r.ties else ''}{mono}"
            )
        out.append("PASS" if self.passed else "FAIL")
        return out


def _load_hf_fp32(reference_dir: Path) -> Any:
    """The reference model in transformers at fp32: from the folder's safetensors, or for a
    GGUF file's view folder, dequantized from that GGUF file by transformers' own GGUF loader
    (independent of fleetgui's tensor reading, so the export is checked against it)."""
    import torch
    from transformers import AutoModelForCausalLM

    from fleetgui.export.gguf_source import is_gguf_view, read_view

    if is_gguf_view(reference_dir):
        gguf = Path(read_view(reference_dir)["gguf"])
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
        )
        return model.eval()
    model = AutoModelForCausalLM.from_pretrained(
        reference_dir, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def _hf_reference(model: Any, token_ids: list[int], decode_steps: int) -> Any:
    """HF fp32: greedy-continue ``token_ids`` by ``decode_steps``, then one full pass over the
    whole sequence for its logits and hidden states."""
    import torch

    with torch.no_grad():
        sequence = list(token_ids)
        for _ in range(decode_steps):
            logits = model(torch.tensor([sequence])).logits
            sequence.append(int(logits[0, -1].argmax()))
        full = model(torch.tensor([sequence]), output_hidden_states=True)
    return sequence, full.logits[0].numpy(), [h[0].numpy() for h in full.hidden_states]


def _fits_in_memory(n_parameters: int) -> bool:
    return n_parameters * 4 * 2 < psutil.virtual_memory().available


def _run_chain(chain: StageChain, sequence: list[int], n_prompt: int) -> tuple[Any, list[Any]]:
    """Feed the prompt, then each later token; collect logits and per-stage outputs."""
    chain.reset()
    step = chain.forward(sequence[:n_prompt])
    logits = [step.logits[0]]
    stage_outputs = [[o[0]] for o in step.stage_outputs]
    for token in sequence[n_prompt:-1]:
        step = chain.forward([token])
        logits.append(step.logits[0])
        for acc, out in zip(stage_outputs, step.stage_outputs, strict=True):
            acc.append(out[0])
    return np.concatenate(logits), [np.concatenate(a) for a in stage_outputs]


def verify_export(
    export_dir: Path,
    reference_dir: Path,
    *,
    prompts: list[str] | None = None,
    decode_steps: int = 32,
    monolithic_dir: Path | None = None,
    device: str = "CPU",
) -> VerifyReport:
    """Compare the export in ``export_dir`` with the HF model in ``reference_dir``."""
    from transformers import AutoTokenizer

    manifest = read_manifest(export_dir)
    tokenizer_dir = export_dir / TOKENIZER_DIR if manifest.layout == "stages" else export_dir
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    from fleetgui.export.sources import resolve_model

    reference_dir = resolve_model(reference_dir)  # a .gguf file or hub id: its folder
    n_params = open_model_source(reference_dir).n_parameters
    if not _fits_in_memory(n_params):
        raise VerificationError(
            f"the fp32 reference model does not fit in this PC's free memory; verify on a PC "
            f"with more than {n_params * 8 / 1e9:.0f} GB free, or export with --no-verify"
        )
    hf_model = _load_hf_fp32(reference_dir)
    chain = StageChain.load(export_dir, device=device, config=EXACT_CONFIG)
    mono = (
        StageChain.load(monolithic_dir, device=device, config=EXACT_CONFIG)
        if monolithic_dir
        else None
    )
    report = VerifyReport(export_dir, manifest.weight_format, len(manifest.stages), decode_steps)
    for prompt in prompts or list(DEFAULT_PROMPTS):
        if not prompt.strip():
            continue
        token_ids = list(tokenizer(prompt)["input_ids"])
        sequence, hf_logits, hf_hidden = _hf_reference(hf_model, token_ids, decode_steps)
        n_prompt = len(token_ids)
        logits, stage_outputs = _run_chain(chain, sequence, n_prompt)
        positions = slice(n_prompt - 1, len(sequence) - 1)  # the steps that chose a token
        hf = hf_logits[: len(sequence) - 1]
        diff = float(np.abs(logits - hf).max())
        stage_diffs = [
            float(np.abs(out - hf_hidden[stage.end_layer][: len(sequence) - 1]).max())
            for out, stage in zip(stage_outputs[:-1], manifest.stages[:-1], strict=True)
        ] + [diff]
        chosen = logits[positions].argmax(-1)
        expected = np.array(sequence[n_prompt:])
        ties = mismatches = 0
        for pos, (got, want) in enumerate(zip(chosen, expected, strict=True)):
            if got != want:
                row = hf[n_prompt - 1 + pos]
                if abs(row[got] - row[want]) < TIE_TOLERANCE:
                    ties += 1
                else:
                    mismatches += 1
        result = PromptResult(
            prompt, n_prompt, diff, stage_diffs, mismatches == 0, ties, mismatches
        )
        if mono is not None:
            mono_logits, _ = _run_chain(mono, sequence, n_prompt)
            result.monolithic_max_diff = float(np.abs(logits - mono_logits).max())
            result.monolithic_tokens_match = bool(
                (mono_logits[positions].argmax(-1) == chosen).all()
            )
        report.results.append(result)
    for line in report.lines():
        log.info("verify: %s", line)
    return report
