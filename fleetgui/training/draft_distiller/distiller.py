"""A small draft model for SmolLM2-135M-Instruct, distilled from it offline in minutes.

Design: the draft is SmolLM2 cut to 4 of its 30 layers (copies of layers 0, 1, 2 and 29 at full
width, its final norm, and its tied 49152 x 576 embedding kept frozen as the shared head),
trained to match the target's softmax on the target's own answers to programmatic chat and
Python questions. Starting from the target's head and layers leaves only the layers' new
composition to learn, which fits a few minutes of CPU, whereas a narrower, cheaper draft would
have to learn its own head and layers from scratch
(:mod:`fleetgui.training.draft_distiller.candidates` says how the shared head also makes training
cheap).

Layout of the built folder (an HF model folder that ``fleetgui export`` takes)::

    DIR/config.json, model.safetensors, generation_config.json
    DIR/tokenizer.json, tokenizer_config.json, special_tokens_map.json   (the target's)
    DIR/draft_build.json   recipe, build key, timings, losses, held-out acceptance, file hashes

The build happens in a hidden sibling folder renamed into place when complete; a later call
reuses a folder whose build key (builder version, recipe, the GGUF's hash) and file hashes
match, and rebuilds otherwise.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgui.errors import FleetguiError
from fleetgui.fsutil import replace_dir, sha256_file
from fleetgui.training.acceptance import agreement
from fleetgui.training.build_folder import (
    check_replaceable,
    loss_summary,
    mismatched_file,
    no_hf_progress_bars,
    software_versions,
    staging_dir,
)
from fleetgui.training.continuations import Continuation, continue_prompts
from fleetgui.training.draft_distiller.candidates import (
    CandidateLoss,
    make_distill_set,
    train_candidate_draft,
)
from fleetgui.training.draft_distiller.chat_prompts import KINDS, make_prompts
from fleetgui.training.draft_distiller.target_answers import (
    AnswerHelper,
    AnswerJob,
    answer,
    load_target,
    pad_id,
    render,
    split_batches,
    stop_ids,
)
from fleetgui.training.progress import PhaseTracker, ProgressCallback
from fleetgui.training.train import TrainSchedule, count_parameters, deterministic_torch

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

#: Bump when a change in how the draft is built alters what gets written.
DRAFT_BUILDER_VERSION = 1
FORMAT = "fleetgui-smollm2-draft"
MARKER = "draft_build.json"
FOLDER = "smollm2-135m-instruct-draft"
TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
MODEL_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    *TOKENIZER_FILES,
)
#: Rough share of each phase in the build time, for the overall progress fraction.
PHASE_WEIGHTS: dict[str, float] = {
    "load-target": 0.08,
    "continuations": 0.42,
    "draft": 0.42,
    "measure": 0.07,
    "save": 0.01,
}
#: Offsets added to ``DraftRecipe.seed`` for each random stream.
SEED_OFFSETS: dict[str, int] = {"train_prompts": 0, "draft_data": 2, "eval": 3}


class DraftBuildError(FleetguiError):
    """The draft cannot be built into the folder asked for."""


@dataclass(frozen=True)
class DraftRecipe:
    """Everything that decides the draft's weights (part of the build key).

    ``layers`` are the target layers the draft starts from, in order. ``train_prompts``
    questions (``code_fraction`` about Python) are answered by the target greedily, each
    answer at most ``max_new_tokens`` long, ``gen_batch`` answers at a time (two processes,
    one torch thread each). ``eval_prompts`` held-out questions of each kind measure the draft
    over ``eval_tokens``-token target answers (0: not measured). ``threads`` is torch's thread
    count while training.
    """

    layers: tuple[int, ...] = (0, 1, 2, 29)
    train_prompts: int = 320
    code_fraction: float = 0.3
    max_new_tokens: int = 128
    gen_batch: int = 64
    # Small batches, many steps: on the same 960 answers seen, 120 steps of 8 agreed with the
    # target on 36 % / 51 % of held-out chat / code tokens, 60 steps of 16 on 34 % / 46 %; Muon
    # at 0.03-0.06 beat 0.01 (26 % / 37 %). No weight decay: it would pull the copied
    # layers towards zero rather than towards what they know.
    schedule: TrainSchedule = field(
        default_factory=lambda: TrainSchedule(
            steps=240,
            batch_size=8,
            seq_len=0,  # rows keep their own lengths
            lr=4e-3,
            warmup_steps=10,
            weight_decay=0.0,
            muon_lr=0.04,
        )
    )
    loss: CandidateLoss = field(default_factory=CandidateLoss)
    eval_prompts: int = 24
    eval_tokens: int = 96
    seed: int = 1234
    threads: int = 2
    bf16: bool = True  # training matmuls under bfloat16 autocast: 1.45x faster steps here

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded in the marker)."""
        return json.loads(json.dumps(asdict(self)))


DEFAULT_RECIPE = DraftRecipe()


def default_draft_dir() -> Path:
    """Where the demo keeps the draft (beside the fetched GGUF, in the shard cache)."""
    from fleetgui.paths import shards_cache_dir

    return shards_cache_dir() / FOLDER


def build_key(recipe: DraftRecipe, gguf_sha256: str) -> str:
    """Identity of a build: builder version, recipe and the target's GGUF file."""
    text = json.dumps(
        {"version": DRAFT_BUILDER_VERSION, "recipe": recipe.to_dict(), "gguf": gguf_sha256},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def load_built_draft(out_dir: Path, key: str) -> dict[str, Any] | None:
    """The marker of a complete build with ``key`` in ``out_dir`` whose files all match their
    recorded hashes, else None."""
    try:
        info = json.loads((Path(out_dir) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("format") != FORMAT or not info.get("complete"):
        return None
    files = info.get("files")
    if info.get("key") != key or not isinstance(files, dict) or set(files) != set(MODEL_FILES):
        return None
    changed = mismatched_file(Path(out_dir), files)
    if changed is not None:
        log.info("%s does not match its recorded hash: rebuilding the draft", changed)
        return None
    return info


def draft_from_target(target: LlamaForCausalLM, layers: tuple[int, ...]) -> LlamaForCausalLM:
    """A ``len(layers)``-layer copy of ``target``: its embedding (tied head, frozen), the
    listed layers in order and its final norm."""
    import copy

    from transformers import LlamaConfig, LlamaForCausalLM

    count = int(target.config.num_hidden_layers)
    if not layers or any(not 0 <= i < count for i in layers):
        raise ValueError(f"draft layers must be target layer indices in [0, {count})")
    if not target.config.tie_word_embeddings:
        raise ValueError("the draft shares the target's head, which must be tied")
    settings = {
        k: v
        for k, v in target.config.to_dict().items()
        if k in LlamaConfig().to_dict() and not k.startswith("_")
    }
    settings.update(num_hidden_layers=len(layers), architectures=["LlamaForCausalLM"])
    for extra in ("id2label", "label2id", "layer_types"):
        settings.pop(extra, None)
    draft = LlamaForCausalLM(LlamaConfig(**settings))
    draft.model.embed_tokens.load_state_dict(target.model.embed_tokens.state_dict())
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    for index, source in enumerate(layers):
        draft.model.layers[index] = copy.deepcopy(target.model.layers[source])
        for module in draft.model.layers[index].modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = index  # its KV cache slot
    draft.tie_weights()
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft


def _jobs(recipe: DraftRecipe, tokenizer: PreTrainedTokenizerBase) -> dict[str, AnswerJob]:
    """The training questions' job and one held-out job per kind (subjects never trained on)."""
    train = make_prompts(
        recipe.train_prompts,
        recipe.code_fraction,
        recipe.seed + SEED_OFFSETS["train_prompts"],
        heldout=False,
    )
    jobs = {
        "train": AnswerJob(
            [render(tokenizer, q) for q in train],
            recipe.max_new_tokens,
            recipe.gen_batch,
            keep_hidden=True,
        )
    }
    if recipe.eval_prompts:
        for kind in KINDS:
            held = make_prompts(
                recipe.eval_prompts,
                1.0 if kind == "code" else 0.0,
                recipe.seed + SEED_OFFSETS["eval"],
                heldout=True,
            )
            prompts = [render(tokenizer, q) for q in held]
            jobs[kind] = AnswerJob(prompts, recipe.eval_tokens, recipe.gen_batch, False)
    return jobs


def _answer_all(
    target: LlamaForCausalLM, jobs: dict[str, AnswerJob], helper: AnswerHelper, phases: PhaseTracker
) -> dict[str, list[Continuation]]:
    """Every job's answers: alternate training batches and the code questions from
    ``helper``, the rest from ``target`` here, at the same time."""
    train = jobs["train"]
    mine, theirs = split_batches(train.prompts, train.batch_size)
    helper.submit(replace(train, prompts=[train.prompts[i] for i in theirs]))
    if "code" in jobs:
        helper.submit(jobs["code"])
    report = phases.batches("continuations")
    local = continue_prompts(
        target,
        [train.prompts[i] for i in mine],
        max_new_tokens=train.max_new_tokens,
        stop_ids=stop_ids(target),
        pad_id=pad_id(target),
        batch_size=train.batch_size,
        on_batch=report,
    )
    answers = {"chat": answer(target, jobs["chat"])} if "chat" in jobs else {}
    merged: list[Continuation | None] = [None] * len(train.prompts)
    for indices, part in ((mine, local), (theirs, helper.result())):
        for index, continuation in zip(indices, part, strict=True):
            merged[index] = continuation
    answers["train"] = [c for c in merged if c is not None]
    if "code" in jobs:
        answers["code"] = helper.result()
    log.info("answers of the target: %s", {k: len(v) for k, v in answers.items()})
    return answers


def _save(draft: LlamaForCausalLM, view: Path, out: Path) -> None:
    """The draft's weights and config, and the target's tokenizer and generation settings."""
    with no_hf_progress_bars():
        draft.save_pretrained(str(out))
    for name in (*TOKENIZER_FILES, "generation_config.json"):
        shutil.copyfile(view / name, out / name)


def build_smollm2_draft(
    out_dir: Path | None = None,
    *,
    gguf: Path,
    progress: ProgressCallback | None = None,
    recipe: DraftRecipe = DEFAULT_RECIPE,
    force: bool = False,
) -> Path:
    """The draft's HF folder in ``out_dir`` (default :func:`default_draft_dir`), reused when a
    complete build of ``recipe`` for this target is there, else built (``force``: always).

    ``gguf`` is the target's file (the demo's: :func:`fleetgui.demo.smollm2.fetch_smollm2`).
    Deterministic for a recipe on one machine and software stack. A helper process answers
    half the questions (:mod:`fleetgui.training.draft_distiller.target_answers`). ``progress``
    receives :class:`~fleetgui.training.progress.BuildProgress` events; an exception raised by
    it aborts the build and leaves ``out_dir`` untouched."""
    out_dir = Path(out_dir if out_dir is not None else default_draft_dir()).absolute()
    gguf = Path(gguf)
    gguf_sha = sha256_file(gguf)
    key = build_key(recipe, gguf_sha)
    if not force and load_built_draft(out_dir, key) is not None:
        log.info("reusing the draft in %s", out_dir)
        return out_dir
    check_replaceable(out_dir, MARKER, "a draft build", DraftBuildError)
    phases = PhaseTracker(progress, PHASE_WEIGHTS)
    seeds = {name: recipe.seed + offset for name, offset in SEED_OFFSETS.items()}
    log.info("building the SmolLM2 draft into %s", out_dir)
    with staging_dir(out_dir) as tmp:
        with AnswerHelper(gguf) as helper, deterministic_torch(1):
            with phases.phase("load-target"):
                target, tokenizer, view = load_target(gguf)
            with phases.phase("continuations"):
                jobs = _jobs(recipe, tokenizer)
                answers = _answer_all(target, jobs, helper, phases)
        data = make_distill_set(answers.pop("train"), recipe.loss.frequent)
        log.info("distillation set: %d answers, %d positions", len(data), data.positions)
        with deterministic_torch(recipe.threads):
            with phases.phase("draft"):
                draft = draft_from_target(target, recipe.layers)
                losses = train_candidate_draft(
                    draft,
                    data,
                    recipe.schedule,
                    recipe.loss,
                    seeds["draft_data"],
                    pad_id=pad_id(target),
                    bf16=recipe.bf16,
                    on_step=phases.steps("draft"),
                )
            with phases.phase("measure"):
                acceptance = {kind: agreement(draft, answers[kind], 8) for kind in answers}
            for kind, result in acceptance.items():
                log.info(
                    "draft on held-out %s questions: per-token %.3f, K=4 acceptance %.3f",
                    kind,
                    result["per_token_agreement"],
                    result["block_acceptance"]["4"],
                )
        with phases.phase("save"):
            _save(draft, view, tmp)
        files = {name: sha256_file(tmp / name) for name in MODEL_FILES}
        info = {
            "format": FORMAT,
            "builder_version": DRAFT_BUILDER_VERSION,
            "key": key,
            "recipe": recipe.to_dict(),
            "seeds": seeds,
            "target": {"gguf": gguf.name, "gguf_sha256": gguf_sha},
            "parameters": {
                "total": count_parameters(draft),
                "trained": sum(p.numel() for p in draft.parameters() if p.requires_grad),
            },
            "data": {"answers": len(data), "positions": data.positions},
            "training": loss_summary(losses),
            "acceptance": acceptance,
            "software": software_versions(),
            "phase_times_s": phases.times,
            "build_time_s": round(time.perf_counter() - phases.started, 2),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "files": files,
            "complete": True,
        }
        (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        replace_dir(tmp, out_dir)
    log.info("draft ready in %s (%.0f s)", out_dir, info["build_time_s"])
    return out_dir
