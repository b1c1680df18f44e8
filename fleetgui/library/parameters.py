"""A decoder's parameter count computed from its config, for when no weights say it (an
export, a model whose weights are not there)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _int(config: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def estimate_parameters(config: Mapping[str, Any]) -> int | None:
    """Parameters of a Llama-style decoder with ``config`` (attention with grouped KV heads, a
    gated MLP, RMS norms; biases left out), or None when the config lacks a dimension."""
    hidden = _int(config, "hidden_size", "n_embd")
    layers = _int(config, "num_hidden_layers", "n_layer")
    vocab = _int(config, "vocab_size")
    intermediate = _int(config, "intermediate_size")
    heads = _int(config, "num_attention_heads", "n_head")
    if hidden is None or layers is None or vocab is None or intermediate is None or not heads:
        return None
    kv_heads = _int(config, "num_key_value_heads") or heads
    head_dim = _int(config, "head_dim") or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o; k, v
    mlp = 3 * hidden * intermediate  # gate, up, down
    per_layer = attention + mlp + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return layers * per_layer + embeddings + hidden
