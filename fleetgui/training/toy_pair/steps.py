"""The build steps of a toy pair: corpus, tokenizer, target, distilled draft, measurement."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgui.training.acceptance import heldout_prompts, measure_acceptance
from fleetgui.training.build_folder import loss_summary, no_hf_progress_bars, software_versions
from fleetgui.training.continuations import greedy_continuation
from fleetgui.training.progress import PhaseTracker
from fleetgui.training.toy_pair.corpus import load_corpus
from fleetgui.training.toy_pair.distill import build_distill_set, train_draft
from fleetgui.training.toy_pair.pretrain import TokenStream, make_llama, pretrain
from fleetgui.training.toy_pair.python_quality import block_prompts, measure_python
from fleetgui.training.toy_pair.spec import DemoSpec
from fleetgui.training.toy_pair.tokenizer import encode_files, train_tokenizer, wrap_tokenizer
from fleetgui.training.train import count_parameters, deterministic_torch

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

#: Offsets added to ``DemoSpec.seed`` for each random stream.
SEED_OFFSETS: dict[str, int] = {
    "target_init": 0,
    "target_data": 1,
    "distill_data": 2,
    "draft_init": 3,
    "draft_data": 4,
}

#: Code prompt whose greedy target completion is recorded in ``demo_model.json`` (in the
#: corpus' layout: no docstrings or comments, ``ast.unparse`` spacing).
SAMPLE_PROMPT = (
    "class Stack:\n"
    "\n"
    "    def __init__(self):\n"
    "        self.items = []\n"
    "\n"
    "    def push(self, item):\n"
)
SAMPLE_TOKENS = 64


def _loss_summary(losses: list[float], steps: int) -> dict[str, Any]:
    """The step count, then :func:`~fleetgui.training.build_folder.loss_summary`."""
    return {"steps": steps, **loss_summary(losses)}


def sample_completion(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompt: str, tokens: int
) -> str:
    """The model's greedy continuation of ``prompt`` (``tokens`` new tokens, decoded)."""
    ids = greedy_continuation(model, tokenizer, prompt, tokens)
    return str(tokenizer.decode(ids, skip_special_tokens=False))


def _save(out: Path, tokenizer: PreTrainedTokenizerFast, **models: LlamaForCausalLM) -> None:
    """``save_pretrained`` each model with the tokenizer into ``out/<name>`` (float32
    safetensors), without transformers' own progress bars."""
    with no_hf_progress_bars():
        for name, model in models.items():
            model.save_pretrained(str(out / name))
            tokenizer.save_pretrained(str(out / name))


def run_steps(spec: DemoSpec, out: Path, phases: PhaseTracker) -> dict[str, Any]:
    """Build ``spec``'s pair into ``out`` (``target/`` and ``draft/``); returns the build record
    (everything of ``demo_model.json`` except file hashes and timings)."""
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    seeds = {name: spec.seed + offset for name, offset in SEED_OFFSETS.items()}
    with phases.phase("corpus"):
        corpus = load_corpus(spec.corpus_bytes, spec.max_file_bytes, spec.holdout_percent)
    with phases.phase("tokenizer"):
        backend = train_tokenizer([f.text for f in corpus.train], spec.vocab_size)
        tokenizer = wrap_tokenizer(backend, spec.max_positions)
        stream = TokenStream.from_files(encode_files(backend, [f.text for f in corpus.train]))
        heldout = TokenStream.from_files(encode_files(backend, [f.text for f in corpus.heldout]))
    log.info("corpus: %d training tokens, %d held-out tokens", len(stream), len(heldout))

    with deterministic_torch(spec.threads):
        with phases.phase("target"):
            target = make_llama(
                spec.target, spec.vocab_size, spec.max_positions, seeds["target_init"]
            )
            target_losses = pretrain(
                target,
                stream,
                spec.target_train,
                seeds["target_data"],
                bf16=spec.bf16,
                on_step=phases.steps("target"),
            )
        with phases.phase("distill-data"):
            teacher = build_distill_set(
                target,
                stream,
                spec.distill,
                seeds["distill_data"],
                bf16=spec.bf16,
                on_batch=phases.batches("distill-data"),
            )
        with phases.phase("draft"):
            draft = make_llama(spec.draft, spec.vocab_size, spec.max_positions, seeds["draft_init"])
            draft_losses = train_draft(
                draft,
                teacher,
                spec.distill,
                seeds["draft_data"],
                bf16=spec.bf16,
                on_step=phases.steps("draft"),
            )
            del teacher
        with phases.phase("acceptance"):
            acc = spec.acceptance
            prompts = heldout_prompts(heldout.ids, acc.num_prompts, acc.prompt_len)
            result, _ = measure_acceptance(target, draft, prompts, acc.gen_len, max_k=acc.max_k)
            sample = sample_completion(target, tokenizer, SAMPLE_PROMPT, SAMPLE_TOKENS)
            code_prompts = block_prompts([f.text for f in corpus.heldout], acc.num_prompts)
            python = measure_python(target, tokenizer, code_prompts, acc.gen_len)

    with phases.phase("save"):
        _save(out, tokenizer, target=target, draft=draft)
    tokenizer_hash = hashlib.sha256((out / "target" / "tokenizer.json").read_bytes()).hexdigest()
    return {
        "spec": spec.to_dict(),
        "seeds": seeds,
        "threads": spec.threads,
        "bf16_autocast": spec.bf16,
        "software": software_versions(tokenizers=True),
        "corpus": {
            **corpus.describe(),
            "train_tokens": len(stream),
            "heldout_tokens": len(heldout),
        },
        "tokenizer": {
            "type": "byte-level BPE",
            "vocab_size": spec.vocab_size,
            "sha256": tokenizer_hash,
        },
        "parameters": {"target": count_parameters(target), "draft": count_parameters(draft)},
        "training": {
            "target": _loss_summary(target_losses, spec.target_train.steps),
            "draft": _loss_summary(draft_losses, spec.distill.schedule.steps),
        },
        "acceptance": result.to_dict(),
        "sample": {"prompt": SAMPLE_PROMPT, "completion": sample},
        "python": python.to_dict(),
        "determinism": (
            "Same weights for the same Python standard library (Python version), fleetgui, "
            "torch/transformers/tokenizers versions and CPU kernels; threads fixed, seeded "
            "generators, torch deterministic algorithms."
        ),
    }
