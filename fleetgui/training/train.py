"""Deterministic CPU training of small Llama models: the schedule, the optimizers, the loop.

Reproducibility: the same inputs give the same weights on the same machine and software. The
torch thread count is fixed while training (results of float reductions depend on how work is
split between threads), all randomness comes from seeded generators, and
``torch.use_deterministic_algorithms(True)`` is on. Different CPUs (e.g. AVX2 versus AVX-512
kernels) or torch versions may round differently and so give slightly different weights.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM

log = logging.getLogger(__name__)

#: ``on_step(step, total, loss)`` after every optimizer step (1-based step).
StepCallback = Callable[[int, int, float], None]
#: ``loss_fn(model, step) -> loss`` for one batch; ``step`` is 0-based.
LossFn = Callable[["LlamaForCausalLM", int], "torch.Tensor"]


@dataclass(frozen=True)
class TrainSchedule:
    """Linear warm-up and cosine decay to ``min_lr_ratio`` of the peak rates. AdamW at ``lr``
    trains everything, unless ``muon_lr`` is set: then Muon at that rate trains the matrices
    inside the transformer blocks and AdamW the embedding, the head and the norms."""

    steps: int
    batch_size: int
    seq_len: int
    lr: float
    warmup_steps: int
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    muon_lr: float = 0.0


@contextlib.contextmanager
def deterministic_torch(threads: int) -> Iterator[None]:
    """Fix the thread count, turn on deterministic algorithms and flush denormal floats to zero;
    restore these settings afterwards."""
    import torch
    import torch.utils.deterministic

    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    old_fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    # Denormal floats (tiny AdamW moments, gradients) are very slow on x86; flushed to zero, the
    # AdamW update took ~10x less time in a profile of the small target (deterministic either way).
    torch.set_flush_denormal(True)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    # Deterministic mode would also fill every new tensor with NaN, a debugging aid that cost
    # ~10% of a training step in memory traffic (the tiny build's test checks that two builds
    # are bit-identical without it).
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det, warn_only=old_warn)
        torch.utils.deterministic.fill_uninitialized_memory = old_fill  # type: ignore[attr-defined]
        torch.set_flush_denormal(False)  # torch's default (its state cannot be read)


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters (embeddings and lm_head included)."""
    return sum(p.numel() for p in model.parameters())


def lr_at(step: int, schedule: TrainSchedule) -> float:
    """Learning rate of 0-based ``step``: linear warm-up, then cosine decay to the floor."""
    if step < schedule.warmup_steps:
        return schedule.lr * (step + 1) / schedule.warmup_steps
    span = max(1, schedule.steps - schedule.warmup_steps)
    progress = min(1.0, (step - schedule.warmup_steps) / span)
    floor = schedule.lr * schedule.min_lr_ratio
    return floor + (schedule.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _is_hidden_matrix(name: str, param: torch.Tensor) -> bool:
    """A 2-D weight inside the transformer blocks (not the embedding or the output head)."""
    return param.ndim == 2 and "embed_tokens" not in name and "lm_head" not in name


def make_optimizers(model: torch.nn.Module, schedule: TrainSchedule) -> list[torch.optim.Optimizer]:
    """AdamW (weight decay only on matrices, not on norms); with ``schedule.muon_lr`` set, the
    blocks' matrices are trained by Muon instead (torch's, orthogonalised momentum) and AdamW
    keeps the embedding, the head and the norms. Each group's peak rate is kept as
    ``group["peak_lr"]`` for :func:`set_learning_rates`."""
    import torch

    muon: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, param in model.named_parameters():
        (muon if schedule.muon_lr and _is_hidden_matrix(name, param) else rest).append(param)
    groups = [
        {"params": [p for p in rest if p.ndim >= 2], "weight_decay": schedule.weight_decay},
        {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0},
    ]
    optimizers: list[torch.optim.Optimizer] = [
        torch.optim.AdamW(groups, lr=schedule.lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    ]
    if muon:
        optimizers.append(
            torch.optim.Muon(muon, lr=schedule.muon_lr, weight_decay=schedule.weight_decay)
        )
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["peak_lr"] = group["lr"]
    return optimizers


def set_learning_rates(
    optimizers: Sequence[torch.optim.Optimizer], step: int, schedule: TrainSchedule
) -> None:
    """Scale every group's peak rate by the schedule's factor at 0-based ``step``."""
    factor = lr_at(step, schedule) / schedule.lr
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = group["peak_lr"] * factor


def train_loop(
    model: LlamaForCausalLM,
    schedule: TrainSchedule,
    loss_fn: LossFn,
    *,
    bf16: bool = False,
    on_step: StepCallback | None = None,
) -> list[float]:
    """Run ``schedule.steps`` optimizer steps of ``loss_fn``; returns the loss of every step."""
    import torch

    model.train()
    optimizers = make_optimizers(model, schedule)
    losses: list[float] = []
    for step in range(schedule.steps):
        set_learning_rates(optimizers, step, schedule)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model, step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"training diverged at step {step + 1} (loss {value})")
        losses.append(value)
        if on_step is not None:
            on_step(step + 1, schedule.steps, value)
    model.eval()
    return losses


def row_batches(rows: int, batch_size: int, gen: torch.Generator) -> Iterator[list[int]]:
    """Endless batches of ``batch_size`` indices of ``rows`` training rows: each pass over the
    rows in a fresh random order drawn from ``gen``; a pass's last rows too few for a batch are
    left out. Draws from ``gen`` only when a pass starts, so callers may share it."""
    import torch

    order: list[int] = []
    while True:
        if len(order) < batch_size:
            order = torch.randperm(rows, generator=gen).tolist()
        yield order[:batch_size]
        order = order[batch_size:]
