"""The torch module of one pipeline stage, built from streamed weights, ready to trace.

A stage runs decoder layers ``[start, end)`` of a HuggingFace decoder model, plus the token
embedding when it is the first stage and the final norm, lm_head and a compact top-1 when it is the
last. The causal (and sliding-window) mask and the rotary tables are computed inside the stage from
``attention_mask`` and ``position_ids``, so a hop only carries the hidden state.

The decoder layers are the model's own transformers classes, taken from a model instantiated on the
``meta`` device (no memory, no weights) and materialised one layer at a time from the checkpoint's
safetensors files: the full model is never built with real weights.
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fleetgui.errors import FleetguiError
from fleetgui.export.architectures import (
    ArchitectureAdapter,
    UnsupportedArchitectureError,
    adapter_for,
)
from fleetgui.shard import Shard
from fleetgui.torch_env import hide_torchvision

log = logging.getLogger(__name__)

MASK_MIN = torch.finfo(torch.float32).min


class CheckpointError(FleetguiError):
    """The model folder's safetensors checkpoint lacks or mismatches a tensor a stage needs."""


class TracingKVCache:
    """The part of transformers' ``Cache`` API that HF attention calls, in traceable form.

    ``update`` concatenates the explicit past tensors of a layer with the new key/value states
    along the sequence axis and records the result as that layer's present. Layers are keyed by
    their global index (``self_attn.layer_idx``), so names stay stable across splits.
    """

    def __init__(self, past: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.past = past
        self.present: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        past_key, past_value = self.past[layer_idx]
        keys = torch.cat([past_key, key_states], dim=-2)
        values = torch.cat([past_value, value_states], dim=-2)
        self.present[layer_idx] = (keys, values)
        return keys, values


def attention_bias(
    attention_mask: torch.Tensor, position_ids: torch.Tensor, window: int | None
) -> torch.Tensor:
    """Additive float mask ``[batch, 1, seq, past+seq]`` built from positions, not indices.

    Key positions are ``cumsum(attention_mask) - 1`` over the whole mask, so entries masked out by
    a KV rewind keep their slot but are never attended and do not shift later positions. A query
    at position ``p`` attends key ``j`` iff ``attention_mask[j] == 1``, ``key_pos[j] <= p`` and,
    for sliding-window layers, ``p - key_pos[j] < window``. Masked entries get float32's minimum
    (not -inf) so a row can never turn into NaN; the query itself is always visible.
    """
    key_pos = torch.cumsum(attention_mask, dim=-1) - 1  # [batch, total]
    key_pos = key_pos[:, None, None, :]
    query_pos = position_ids[:, None, :, None]  # [batch, 1, seq, 1]
    allowed = (attention_mask[:, None, None, :] > 0) & (key_pos <= query_pos)
    if window is not None:
        allowed = allowed & (query_pos - key_pos < window)
    zero = torch.zeros((), dtype=torch.float32)
    return torch.where(allowed, zero, torch.full((), MASK_MIN, dtype=torch.float32))


class StageRotary(nn.Module):
    """cos/sin for ``position_ids`` from the model's own rotary class, entirely in the graph.

    transformers picks "longrope" factors in Python from ``max(position_ids)``, which a trace
    would freeze; here both tables are computed and the same rule (``max position + 1 >
    original_max_position_embeddings`` selects the long factors) is applied with ``torch.where``.
    "dynamic" (NTK) RoPE depends on the history of calls and is refused.

    ``layer_type`` selects one table of a rotary class that keeps one per layer type (Gemma 3's
    local and global bases, see :func:`layer_typed_rope`); it is passed to the class's forward.
    """

    def __init__(
        self, rotary_cls: type[nn.Module], config: Any, layer_type: str | None = None
    ) -> None:
        super().__init__()
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        self.layer_type = layer_type
        self.short = rotary_cls(config=config)
        rope_types: Any = getattr(self.short, "rope_type", "default")  # a dict per layer type
        rope_type = str(rope_types if layer_type is None else rope_types[layer_type])
        rope_params = config.rope_parameters
        if layer_type is not None:
            rope_params = rope_params[layer_type]
        if "dynamic" in rope_type:
            raise UnsupportedArchitectureError(
                f"rope_type {rope_type!r} recomputes its frequencies from the generation history "
                f"and cannot be exported as a stateless stage"
            )
        # The undecorated forward (below no_grad and dynamic_rope_update): the latter's Python
        # branching on position values must stay out of the trace.
        self._forward = inspect.unwrap(rotary_cls.forward)
        self.long: nn.Module | None = None
        self.threshold = 0
        self._extra: tuple[str, ...] = () if layer_type is None else (layer_type,)
        if rope_type == "longrope":
            self.threshold = int(rope_params["original_max_position_embeddings"])
            self.long = rotary_cls(config=config)
            kwargs = {} if layer_type is None else {"layer_type": layer_type}
            long_inv_freq, _ = ROPE_INIT_FUNCTIONS["longrope"](
                config, None, seq_len=self.threshold + 1, **kwargs
            )
            prefix = "" if layer_type is None else f"{layer_type}_"
            self.long.register_buffer(f"{prefix}inv_freq", long_inv_freq, persistent=False)

    def forward(
        self, hidden: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self._forward(self.short, hidden, position_ids, *self._extra)
        if self.long is None:
            return cos, sin
        long_cos, long_sin = self._forward(self.long, hidden, position_ids, *self._extra)
        use_long = position_ids.max() + 1 > self.threshold
        return torch.where(use_long, long_cos, cos), torch.where(use_long, long_sin, sin)


def layer_typed_rope(rotary_cls: type[nn.Module], config: Any) -> bool:
    """Whether the model's rotary class keeps one table per ``config.layer_types`` entry.

    Gemma 3 rotates sliding and full layers with different bases (``rope_local_base_freq``) and
    scalings; its rotary class then holds ``rope_type`` as a dict keyed by layer type and takes
    the layer type in ``forward``.
    """
    return isinstance(getattr(rotary_cls(config=config), "rope_type", None), dict)


class StageModule(nn.Module):
    """Decoder layers ``[start, end)`` with in-stage mask and rotary, traceable by OpenVINO.

    ``forward(main, attention_mask, position_ids, *past)`` where ``main`` is ``input_ids`` for the
    first stage and ``hidden_in`` otherwise, and ``past`` holds ``key, value`` per stage layer in
    layer order. Returns ``(hidden_out,)`` or ``(logits, top1_ids, top1_probs)``, followed by the
    presents in the same order as ``past``.

    ``rotary`` is one module for every layer, or a dict of modules keyed by layer type with
    ``rotary_keys`` naming each stage layer's; each table is computed once per forward.
    """

    def __init__(
        self,
        *,
        shard: Shard,
        layers: list[nn.Module],
        windows: list[int | None],
        rotary: nn.Module | dict[str, nn.Module],
        embed_weight: torch.Tensor | None,
        embed_scale: float | None,
        norm: nn.Module | None,
        lm_head: nn.Module | None,
        final_softcap: float | None,
        rotary_keys: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.shard = shard
        self.layer_ids = list(range(shard.start_layer, shard.end_layer))
        self.layers = nn.ModuleList(layers)
        self.windows = windows
        if isinstance(rotary, nn.Module):
            rotary, rotary_keys = {"all": rotary}, ["all"] * len(layers)
        if rotary_keys is None or len(rotary_keys) != len(layers):
            raise ValueError("a rotary per layer type needs rotary_keys, one per stage layer")
        self.rotaries = nn.ModuleDict(rotary)
        self.rotary_keys = rotary_keys
        self.embed_weight = None if embed_weight is None else nn.Parameter(embed_weight, False)
        # A 0-d buffer, multiplied in the hidden's dtype like HF's scaled embeddings (Gemma).
        self.embed_scale: torch.Tensor | None
        if embed_scale is None:
            self.embed_scale = None
        else:
            self.register_buffer("embed_scale", torch.tensor(embed_scale), persistent=False)
        self.norm = norm
        self.lm_head = lm_head
        self.final_softcap = final_softcap

    def forward(
        self,
        main: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        if self.embed_weight is not None:
            hidden = nn.functional.embedding(main, self.embed_weight)
            if self.embed_scale is not None:
                hidden = hidden * self.embed_scale.to(hidden.dtype)
        else:
            hidden = main
        tables = {key: rotary(hidden, position_ids) for key, rotary in self.rotaries.items()}
        biases = {w: attention_bias(attention_mask, position_ids, w) for w in set(self.windows)}
        cache = TracingKVCache(
            {idx: (past[2 * i], past[2 * i + 1]) for i, idx in enumerate(self.layer_ids)}
        )
        for layer, window, key in zip(self.layers, self.windows, self.rotary_keys, strict=True):
            out = layer(
                hidden,
                attention_mask=biases[window],
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
                position_embeddings=tables[key],
            )
            hidden = out[0] if isinstance(out, tuple) else out
        presents = tuple(t for idx in self.layer_ids for t in cache.present[idx])
        if self.lm_head is None:
            return (hidden, *presents)
        assert self.norm is not None
        logits = self.lm_head(self.norm(hidden)).float()
        if self.final_softcap is not None:
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        top_logit, top1_ids = logits.max(dim=-1)
        top1_probs = 1.0 / torch.exp(logits - top_logit.unsqueeze(-1)).sum(dim=-1)
        return (logits, top1_ids, top1_probs, *presents)


class CheckpointReader:
    """Reads single tensors from a (possibly sharded) safetensors checkpoint, lazily."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._handles: dict[Path, Any] = {}
        index = model_dir / "model.safetensors.index.json"
        if index.is_file():
            weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
            self.weight_map = {key: model_dir / name for key, name in weight_map.items()}
        else:
            files = sorted(model_dir.glob("*.safetensors"))
            if not files:
                raise CheckpointError(f"no *.safetensors files in {model_dir}")
            self.weight_map = {}
            for path in files:
                self.weight_map.update(dict.fromkeys(self._open(path).keys(), path))

    def _open(self, path: Path) -> Any:
        from safetensors import safe_open

        if path not in self._handles:
            self._handles[path] = safe_open(str(path), framework="pt")
        return self._handles[path]

    def __contains__(self, key: str) -> bool:
        return key in self.weight_map

    def get(self, key: str) -> torch.Tensor:
        """The tensor stored under ``key``; raise ``CheckpointError`` naming it if absent."""
        path = self.weight_map.get(key)
        if path is None:
            raise CheckpointError(
                f"tensor {key!r} is missing from the checkpoint in {self.model_dir}"
            )
        return self._open(path).get_tensor(key)


def open_checkpoint(model_dir: Path) -> Any:
    """The weights of ``model_dir``: its safetensors files, or, for a GGUF file's view folder,
    the GGUF file (one tensor dequantized at a time). Both answer ``in`` and ``get(key)``."""
    from fleetgui.export.gguf_source import GGUFCheckpoint, is_gguf_view

    if is_gguf_view(model_dir):
        return GGUFCheckpoint(model_dir)
    return CheckpointReader(model_dir)


def _materialize(
    module: nn.Module, prefix: str, reader: Any, fallback: dict[str, str] | None = None
) -> None:
    """Allocate ``module`` (built on ``meta``) on CPU and fill every tensor from the checkpoint."""
    module.to_empty(device="cpu")
    state_keys = set(module.state_dict())
    stray = [name for name, _ in module.named_buffers() if name not in state_keys]
    if stray:
        raise CheckpointError(
            f"{prefix or 'module'} has non-persistent buffers {stray} that a checkpoint cannot "
            f"restore; the architecture needs explicit support in fleetgui.export"
        )
    tensors: dict[str, torch.Tensor] = dict(module.named_parameters())
    tensors.update(module.named_buffers())
    with torch.no_grad():
        for name, target in tensors.items():
            key = prefix + name
            if key not in reader and fallback and key in fallback:
                key = fallback[key]
            source = reader.get(key)
            if tuple(source.shape) != tuple(target.shape):
                raise CheckpointError(
                    f"tensor {key!r} has shape {tuple(source.shape)} in the checkpoint but the "
                    f"model expects {tuple(target.shape)}"
                )
            target.copy_(source.to(target.dtype))


def load_config(model_dir: Path) -> Any:
    """The model's transformers config (imports transformers with torchvision hidden)."""
    hide_torchvision()
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_dir)


def build_stage_module(model_dir: Path, shard: Shard) -> tuple[StageModule, Any]:
    """Build the fp32 stage module for ``shard`` from ``model_dir``; return it and the config.

    Only the stage's own layers (and embedding / norm / lm_head when first / last) are allocated
    and loaded. Raises ``CheckpointError`` naming the first missing or mis-shaped tensor and
    ``UnsupportedArchitectureError`` for an unknown ``model_type``.
    """
    hide_torchvision()
    from transformers import AutoModelForCausalLM

    config = load_config(model_dir)
    adapter: ArchitectureAdapter = adapter_for(config)
    if config.num_hidden_layers != shard.n_layers:
        raise FleetguiError(
            f"shard {shard} does not match the model, which has {config.num_hidden_layers} layers"
        )
    impl = adapter.attn_implementation(config)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(
            config, attn_implementation=impl, dtype=torch.float32
        )
    config = skeleton.config  # carries the resolved attention implementation
    reader = open_checkpoint(model_dir)
    layers_container = skeleton.get_submodule(adapter.layers_path)
    layers: list[nn.Module] = []
    for idx in range(shard.start_layer, shard.end_layer):
        layer = layers_container[idx]
        _materialize(layer, adapter.layer_prefix(idx), reader)
        layers.append(layer)
    embed_key = f"{adapter.embed_path}.weight"
    embed_weight = reader.get(embed_key).float() if shard.is_first else None
    norm = lm_head = None
    if shard.is_last:
        norm = skeleton.get_submodule(adapter.norm_path)
        _materialize(norm, f"{adapter.norm_path}.", reader)
        lm_head = skeleton.get_submodule(adapter.lm_head_path)
        fallback = {}
        if getattr(config, "tie_word_embeddings", False):
            fallback = {f"{adapter.lm_head_path}.weight": embed_key}
        _materialize(lm_head, f"{adapter.lm_head_path}.", reader, fallback)
    rotary_cls = type(skeleton.get_submodule(adapter.rotary_path))
    del skeleton
    rotary: nn.Module | dict[str, nn.Module]
    rotary_keys = None
    with torch.device("cpu"):
        if layer_typed_rope(rotary_cls, config):
            rotary_keys = [config.layer_types[i] for i in range(shard.start_layer, shard.end_layer)]
            rotary = {
                key: StageRotary(rotary_cls, config, key) for key in dict.fromkeys(rotary_keys)
            }
        else:
            rotary = StageRotary(rotary_cls, config)
    module = StageModule(
        shard=shard,
        layers=layers,
        windows=[
            adapter.sliding_window(config, i) for i in range(shard.start_layer, shard.end_layer)
        ],
        rotary=rotary,
        embed_weight=embed_weight,
        embed_scale=adapter.embed_scale(config) if shard.is_first else None,
        norm=norm,
        lm_head=lm_head,
        final_softcap=adapter.final_logit_softcap(config) if shard.is_last else None,
        rotary_keys=rotary_keys,
    )
    module.eval()
    log.info("built stage module for %s (%s, attention %s)", shard, config.model_type, impl)
    return module, config
