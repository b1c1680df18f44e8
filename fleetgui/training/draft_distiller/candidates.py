"""Distil a draft that shares its target's output head, scoring only a candidate set of tokens.

The draft keeps the target's (tied) embedding as its head, frozen, so the target's logits at
any position are ``E @ h`` for the target's final hidden state ``h`` (kept by
:mod:`fleetgui.training.continuations`). A 49152-token head costs as much as 8 of SmolLM2's layers
per position, and more than the draft's own layers in a training step, so each step scores a
candidate set instead of the whole vocabulary: every position's target top-k tokens, the
tokens most often in the target's top-k over the whole set, and a fresh random sample. The
loss is the KL divergence from the target's softmax over that set to the draft's, plus a
weighted cross-entropy to the target's top token (what greedy speculation accepts).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetgui.training.train import StepCallback, TrainSchedule, row_batches, train_loop

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM

    from fleetgui.training.continuations import Continuation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CandidateLoss:
    """How a step's candidate set is drawn and its loss weighted."""

    frequent: int = 2048  # the tokens most often in the target's top-k, always scored
    random: int = 1024  # uniformly drawn tokens per step
    temperature: float = 1.0
    hard_weight: float = 0.5


@dataclass
class DistillSet:
    """Target continuations as training rows, with the target's hidden states and top-k."""

    ids: list[torch.Tensor]  # per row: prompt + continuation ids
    starts: list[int]  # per row: first position with a target (prompt_len - 1)
    hidden: list[torch.Tensor]  # per row: (G, H) target final hidden states
    top_ids: list[torch.Tensor]  # per row: (G, k) target's most likely next tokens
    frequent: torch.Tensor  # token ids most often in the target's top-k, most frequent first

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def positions(self) -> int:
        """Positions with a target."""
        return sum(int(h.shape[0]) for h in self.hidden)


def make_distill_set(continuations: Sequence[Continuation], frequent: int) -> DistillSet:
    """Rows from continuations kept with their hidden states (``keep_hidden=True``)."""
    import torch

    ids, starts, hidden, top = [], [], [], []
    for c in continuations:
        if c.hidden is None or c.top_ids is None:
            raise ValueError("continuations must keep their hidden states for distillation")
        ids.append(torch.tensor(c.ids, dtype=torch.long))
        starts.append(c.prompt_len - 1)
        # clone outside inference mode: tensors made under it cannot take part in autograd
        hidden.append(c.hidden.clone())
        top.append(c.top_ids.clone())
    counts = torch.bincount(torch.cat([t.reshape(-1) for t in top]))
    order = torch.argsort(counts, descending=True, stable=True)
    common = order[: min(frequent, int((counts > 0).sum()))]
    return DistillSet(ids, starts, hidden, top, common)


def candidate_loss(
    draft_hidden: torch.Tensor,
    target_hidden: torch.Tensor,
    top_ids: torch.Tensor,
    head: torch.Tensor,
    *,
    extra: torch.Tensor,
    spec: CandidateLoss,
) -> torch.Tensor:
    """KL(target || draft) over the candidate set plus ``hard_weight`` x cross-entropy to the
    target's top token; ``draft_hidden``/``target_hidden`` are ``(N, H)``, ``top_ids`` ``(N, k)``,
    ``head`` the ``(V, H)`` output matrix and ``extra`` further candidate ids."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    candidates = torch.unique(torch.cat([top_ids.reshape(-1), extra]))  # sorted
    weights = head[candidates]
    t = spec.temperature
    draft_logits = (draft_hidden @ weights.T).float()
    with torch.no_grad():
        target_logp = torch.log_softmax((target_hidden @ weights.T).float() / t, dim=-1)
    draft_logp = torch.log_softmax(draft_logits / t, dim=-1)
    kl = (target_logp.exp() * (target_logp - draft_logp)).sum(-1).mean() * t * t
    hard = F.cross_entropy(draft_logits, torch.searchsorted(candidates, top_ids[:, 0].contiguous()))
    return kl + spec.hard_weight * hard


def _batch(
    data: DistillSet, rows: Sequence[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded inputs ``(B, T)`` (a causal model's earlier positions do not see the
    padding), flat indices of the positions with targets, their target hidden states and top-k."""
    import torch

    width = max(int(data.ids[r].numel()) - 1 for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    flat = []
    for b, r in enumerate(rows):
        seq = data.ids[r][:-1]
        ids[b, : seq.numel()] = seq
        g = int(data.hidden[r].shape[0])
        flat.append(b * width + data.starts[r] + torch.arange(g))
    hidden = torch.cat([data.hidden[r] for r in rows])
    top = torch.cat([data.top_ids[r] for r in rows])
    return ids, torch.cat(flat), hidden, top


def train_candidate_draft(
    draft: LlamaForCausalLM,
    data: DistillSet,
    schedule: TrainSchedule,
    spec: CandidateLoss,
    seed: int,
    *,
    pad_id: int,
    bf16: bool = False,
    on_step: StepCallback | None = None,
) -> list[float]:
    """Train ``draft`` (its head frozen and shared with the target) on ``data``; rows are
    drawn in seeded random order, ``schedule.batch_size`` a step. Returns per-step losses."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    head = draft.get_output_embeddings().weight
    vocab = int(head.shape[0])
    # rows and random candidates draw from one seeded generator in a fixed order: deterministic
    batches = row_batches(len(data), schedule.batch_size, gen)

    def loss_fn(model: LlamaForCausalLM, step: int) -> torch.Tensor:
        ids, flat, target_hidden, top = _batch(data, next(batches), pad_id)
        hidden = model.model(input_ids=ids).last_hidden_state
        draft_hidden = hidden.reshape(-1, hidden.shape[-1])[flat]
        extra = torch.cat([data.frequent, torch.randint(0, vocab, (spec.random,), generator=gen)])
        return candidate_loss(
            draft_hidden, target_hidden, top, head.detach(), extra=extra, spec=spec
        )

    return train_loop(draft, schedule, loss_fn, bf16=bf16, on_step=on_step)
