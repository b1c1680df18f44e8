"""Distillation: teach the small draft model to predict what the target model predicts.

Speculative decoding accepts a draft token when it equals the target's (greedy) choice, so the
draft is trained on the target's behaviour rather than on the corpus alone:

1. corpus prompts are continued greedily by the target (``greedy_generate``, under bf16 autocast
   when the recipe trains in bf16), so the draft sees the kind of text it will have to predict
   during decoding (the target's own output);
2. the target scores these sequences and plain corpus windows once; its top-k next-token
   distribution at every position is kept (:func:`teacher_topk`);
3. the draft minimises the cross-entropy to that (renormalised top-k) distribution, i.e. the KL
   divergence up to a constant, plus a weighted cross-entropy to the target's argmax token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetgui.training.continuations import BatchCallback, greedy_generate
from fleetgui.training.toy_pair.pretrain import TokenStream
from fleetgui.training.toy_pair.spec import DistillSpec
from fleetgui.training.train import StepCallback, row_batches, train_loop

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM

log = logging.getLogger(__name__)

#: Teacher probabilities kept per position.
TOP_K = 32


@dataclass
class TeacherTargets:
    """Sequences with the teacher's top-k next-token log-probabilities at every position."""

    ids: torch.Tensor  # (N, T) token ids
    top_ids: torch.Tensor  # (N, T-1, K) int32: teacher's most likely next tokens
    top_logp: torch.Tensor  # (N, T-1, K) float32: their log-probabilities, renormalised

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def teacher_topk(
    teacher: LlamaForCausalLM,
    ids: torch.Tensor,
    batch_size: int,
    *,
    temperature: float = 1.0,
    bf16: bool = False,
    on_batch: BatchCallback | None = None,
) -> TeacherTargets:
    """Score ``ids`` (``(N, T)``) with ``teacher`` and keep its top-:data:`TOP_K` predictions."""
    import torch

    teacher.eval()
    top_ids, top_logp = [], []
    total = (ids.shape[0] + batch_size - 1) // batch_size
    with torch.inference_mode():
        for index, start in enumerate(range(0, ids.shape[0], batch_size)):
            batch = ids[start : start + batch_size, :-1]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = teacher(input_ids=batch).logits
            values, indices = torch.topk(logits.float() / temperature, TOP_K, dim=-1)
            top_logp.append(torch.log_softmax(values, dim=-1))
            top_ids.append(indices.to(torch.int32))
            if on_batch is not None:
                on_batch(index + 1, total)
    return TeacherTargets(ids, torch.cat(top_ids), torch.cat(top_logp))


def distill_loss(
    draft: LlamaForCausalLM,
    ids: torch.Tensor,
    top_ids: torch.Tensor,
    top_logp: torch.Tensor,
    hard_weight: float,
) -> torch.Tensor:
    """Soft cross-entropy to the teacher's top-k distribution plus ``hard_weight`` times the
    cross-entropy to the teacher's argmax, averaged over positions."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    logits = draft(input_ids=ids[:, :-1]).logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    index = top_ids.long()
    picked = torch.gather(logp, -1, index)
    soft = -(top_logp.exp() * picked).sum(-1).mean()
    hard = F.nll_loss(logp.reshape(-1, logp.shape[-1]), index[..., 0].reshape(-1))
    return soft + hard_weight * hard


def build_distill_set(
    target: LlamaForCausalLM,
    stream: TokenStream,
    spec: DistillSpec,
    seed: int,
    *,
    bf16: bool = False,
    on_batch: BatchCallback | None = None,
) -> TeacherTargets:
    """Target continuations of corpus prompts plus plain corpus windows, scored by the target.

    Both kinds of sequence are ``prompt_len + gen_len`` tokens long; the number of corpus
    windows is ``corpus_fraction`` of the total.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    length = spec.prompt_len + spec.gen_len
    prompts = stream.windows(gen, spec.num_prompts, spec.prompt_len)
    n_corpus = round(spec.num_prompts * spec.corpus_fraction / (1.0 - spec.corpus_fraction))
    windows = stream.windows(gen, n_corpus, length)
    gen_batches = (spec.num_prompts + spec.gen_batch - 1) // spec.gen_batch
    score_batches = (spec.num_prompts + n_corpus + spec.gen_batch - 1) // spec.gen_batch
    total = gen_batches + score_batches

    def gen_progress(done: int, _total: int) -> None:
        if on_batch is not None:
            on_batch(done, total)

    def score_progress(done: int, _total: int) -> None:
        if on_batch is not None:
            on_batch(gen_batches + done, total)

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        generated = greedy_generate(target, prompts, spec.gen_len, spec.gen_batch, gen_progress)
    ids = torch.cat([generated, windows], dim=0)
    log.info(
        "distillation set: %d target continuations + %d corpus windows", len(prompts), n_corpus
    )
    return teacher_topk(
        target,
        ids,
        spec.gen_batch,
        temperature=spec.temperature,
        bf16=bf16,
        on_batch=score_progress,
    )


def train_draft(
    draft: LlamaForCausalLM,
    targets: TeacherTargets,
    spec: DistillSpec,
    seed: int,
    *,
    bf16: bool = False,
    on_step: StepCallback | None = None,
) -> list[float]:
    """Train ``draft`` on ``targets`` (random batches, seeded); returns per-step losses."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    schedule = spec.schedule
    batches = row_batches(len(targets), schedule.batch_size, gen)

    def loss_fn(model: LlamaForCausalLM, step: int) -> torch.Tensor:
        rows = torch.tensor(next(batches))
        return distill_loss(
            model,
            targets.ids[rows],
            targets.top_ids[rows],
            targets.top_logp[rows],
            spec.hard_weight,
        )

    return train_loop(draft, schedule, loss_fn, bf16=bf16, on_step=on_step)
