"""The toy pair's models: fresh Llamas, and their language-model training on the corpus.

The target learns the corpus from random windows of its token stream (:func:`pretrain`); the
draft starts the same way (:func:`make_llama`) and is then distilled
(:mod:`fleetgui.training.toy_pair.distill`). Determinism as in :mod:`fleetgui.training.train`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetgui.training.toy_pair.spec import BOS_ID, EOS_ID, PAD_ID, ModelDims
from fleetgui.training.train import StepCallback, TrainSchedule, train_loop

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM


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
