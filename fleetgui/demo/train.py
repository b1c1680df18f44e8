"""Deterministic CPU training of small Llama models: set-up, data sampling, the training loop.

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
from typing import TYPE_CHECKING, Any

from fleetgui.demo.spec import BOS_ID, EOS_ID, PAD_ID, ModelDims, TrainSchedule

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM

log = logging.getLogger(__name__)

#: ``on_step(step, total, loss)`` after every optimizer step (1-based step).
StepCallback = Callable[[int, int, float], None]
#: ``loss_fn(model, step) -> loss`` for one batch; ``step`` is 0-based.
LossFn = Callable[["LlamaForCausalLM", int], "torch.Tensor"]


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


def make_llama(dims: ModelDims, vocab_size: int, max_positions: int, seed: int) -> LlamaForCausalLM:
    """A freshly initialised ``LlamaForCausalLM``; the initial weights depend only on ``seed``."""
    import torch

    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=dims.hidden_size,
        intermediate_size=dims.intermediate_size,
        num_hidden_layers=dims.num_layers,
        num_attention_heads=dims.num_heads,
        num_key_value_heads=dims.num_kv_heads,
        head_dim=dims.head_dim,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        tie_word_embeddings=False,
        initializer_range=0.02,
        attn_implementation="sdpa",
    )
    config = LlamaConfig(**kwargs)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.do_sample = False
    model.generation_config.bos_token_id = BOS_ID
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.pad_token_id = PAD_ID
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters (embeddings and lm_head included)."""
    return sum(p.numel() for p in model.parameters())


@dataclass
class TokenStream:
    """All training files' ids, concatenated; windows are sampled at random offsets."""

    ids: torch.Tensor

    @classmethod
    def from_files(cls, files: Sequence[Sequence[int]]) -> TokenStream:
        """Concatenate per-file id lists (each already framed by ``<|bos|>``/``<|eos|>``)."""
        import torch

        flat = [i for ids in files for i in ids]
        return cls(torch.tensor(flat, dtype=torch.long))

    def __len__(self) -> int:
        return int(self.ids.numel())

    def windows(self, gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
        """``batch`` random windows of ``length`` ids, shape ``(batch, length)``."""
        import torch

        if len(self) <= length:
            raise ValueError(
                f"corpus of {len(self)} tokens is shorter than a {length}-token window"
            )
        starts = torch.randint(0, len(self) - length, (batch,), generator=gen)
        offsets = torch.arange(length)
        return self.ids[starts[:, None] + offsets[None, :]]


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


def lm_loss(model: LlamaForCausalLM, batch: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of ``batch`` (shape ``(B, T)``), averaged over ``B*(T-1)``."""
    import torch.nn.functional as F  # noqa: N812

    logits = model(input_ids=batch).logits[:, :-1].float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def pretrain(
    model: LlamaForCausalLM,
    stream: TokenStream,
    schedule: TrainSchedule,
    seed: int,
    *,
    bf16: bool = False,
    on_step: StepCallback | None = None,
) -> list[float]:
    """Language-model training of ``model`` on random windows of ``stream``."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def loss_fn(m: LlamaForCausalLM, step: int) -> torch.Tensor:
        return lm_loss(m, stream.windows(gen, schedule.batch_size, schedule.seq_len))

    return train_loop(model, schedule, loss_fn, bf16=bf16, on_step=on_step)
