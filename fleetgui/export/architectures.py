"""Per-architecture differences the stage exporter needs, one small adapter per ``model_type``.

Everything that is the same for every HuggingFace decoder (the decoder layer class, its norms,
attention and MLP, the rotary-embedding class) is taken from the model's own transformers code.
An adapter only says what the stage wrapper must do *around* the decoder layers: where the
embedding, final norm and lm_head live in the checkpoint, how the embedding is scaled, whether the
logits are soft-capped, which layers use a sliding attention window, and which attention
implementation traces to something OpenVINO can fuse.

Adding an architecture is one entry in ``_REGISTRY`` (plus a tiny test model).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)


class UnsupportedArchitectureError(FleetguiError):
    """The model's ``config.model_type`` has no export adapter."""


def _no_embed_scale(config: Any) -> float | None:
    return None


def _sqrt_hidden_embed_scale(config: Any) -> float | None:
    return float(config.hidden_size) ** 0.5


def _no_softcap(config: Any) -> float | None:
    return None


def _final_logit_softcap(config: Any) -> float | None:
    value = getattr(config, "final_logit_softcapping", None)
    return float(value) if value else None


def _sdpa(config: Any) -> str:
    return "sdpa"


def _eager_if_attn_softcap(config: Any) -> str:
    # OpenVINO's ScaledDotProductAttention has no logit soft-capping, and transformers' sdpa
    # path silently drops the cap, so a soft-capped model must trace the eager attention.
    return "eager" if getattr(config, "attn_logit_softcapping", None) else "sdpa"


def _always_supported(config: Any) -> str | None:
    return None


def _refuse_bidirectional(config: Any) -> str | None:
    # EmbeddingGemma-style configs attend both ways (and halve the window): not a causal decoder.
    if getattr(config, "use_bidirectional_attention", False):
        return "use_bidirectional_attention is set (an embedding model, not a causal decoder)"
    return None


def sliding_window_from_config(config: Any, layer_idx: int) -> int | None:
    """The attention window of decoder layer ``layer_idx``, or None for full attention.

    Models with ``config.layer_types`` (Qwen2/3, Gemma 2, ...) mark each layer as
    ``"sliding_attention"`` or ``"full_attention"``; older ones (Mistral, Phi-3) apply
    ``config.sliding_window`` to every layer when it is set.
    """
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return int(window) if layer_types[layer_idx] == "sliding_attention" else None
    return int(window)


@dataclass(frozen=True, slots=True)
class ArchitectureAdapter:
    """What differs between decoder architectures around their decoder layers.

    Module paths are dotted attribute paths inside the ``*ForCausalLM`` model and, identically,
    key prefixes inside the safetensors checkpoint.
    """

    model_type: str
    embed_path: str = "model.embed_tokens"
    layers_path: str = "model.layers"
    norm_path: str = "model.norm"
    lm_head_path: str = "lm_head"
    rotary_path: str = "model.rotary_emb"
    embed_scale: Callable[[Any], float | None] = _no_embed_scale
    final_logit_softcap: Callable[[Any], float | None] = _no_softcap
    sliding_window: Callable[[Any, int], int | None] = sliding_window_from_config
    attn_implementation: Callable[[Any], str] = _sdpa
    #: Why this config cannot be exported although its model_type can, or None.
    unsupported_reason: Callable[[Any], str | None] = _always_supported

    def layer_prefix(self, layer_idx: int) -> str:
        """Checkpoint key prefix of decoder layer ``layer_idx`` (with trailing dot)."""
        return f"{self.layers_path}.{layer_idx}."


_REGISTRY: dict[str, ArchitectureAdapter] = {
    adapter.model_type: adapter
    for adapter in (
        ArchitectureAdapter("llama"),
        ArchitectureAdapter("qwen2"),
        ArchitectureAdapter("qwen3"),
        ArchitectureAdapter("mistral"),
        ArchitectureAdapter("phi3"),
        ArchitectureAdapter(
            "gemma2",
            embed_scale=_sqrt_hidden_embed_scale,
            final_logit_softcap=_final_logit_softcap,
            attn_implementation=_eager_if_attn_softcap,
        ),
        # Gemma 3 text: the rotary class keeps one table per layer type (local and global
        # bases), which build_stage_module picks up from the model's own code.
        ArchitectureAdapter(
            "gemma3_text",
            embed_scale=_sqrt_hidden_embed_scale,
            final_logit_softcap=_final_logit_softcap,
            attn_implementation=_eager_if_attn_softcap,
            unsupported_reason=_refuse_bidirectional,
        ),
    )
}


def supported_model_types() -> tuple[str, ...]:
    """The ``config.model_type`` values the exporter supports, sorted."""
    return tuple(sorted(_REGISTRY))


def adapter_for(config: Any) -> ArchitectureAdapter:
    """The adapter for ``config.model_type``; raise ``UnsupportedArchitectureError`` if none."""
    model_type = getattr(config, "model_type", None)
    adapter = _REGISTRY.get(str(model_type))
    if adapter is None:
        raise UnsupportedArchitectureError(
            f"model_type {model_type!r} is not supported for export; supported model types: "
            f"{', '.join(supported_model_types())}"
        )
    reason = adapter.unsupported_reason(config)
    if reason is not None:
        raise UnsupportedArchitectureError(
            f"this {adapter.model_type} model cannot be exported: {reason}"
        )
    log.debug("architecture adapter %s", adapter.model_type)
    return adapter
