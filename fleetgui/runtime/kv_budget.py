"""How many tokens of KV the idle conversations of a pipeline may keep: a budget in bytes on each
PC that holds stages, turned into tokens by the layers that PC holds.

Every stage keeps an entry per token for each of its layers, so a PC's KV of one kept token is
its layers times ``2 * kv_heads * head_dim`` elements; the memory it costs there is
:data:`KEPT_TOKEN_COST` times that. The pipeline keeps one count of
tokens for all stages alike; the PC whose budget buys the fewest tokens sets it. Without a
budget given, each PC spends :data:`FREE_MEMORY_SHARE` of the memory it had free when the
pipeline opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The share of a PC's free memory its idle conversations' KV may take when no budget is given:
#: the rest stays for the PC's own use and the active streams' growing caches.
FREE_MEMORY_SHARE = 0.5
#: The memory a kept conversation costs a stage's process, over its KV's bytes. Each stream
#: has its own OpenVINO infer request, whose cache grows in steps and whose buffers for a
#: prompt chunk stay allocated while it idles: measured on SmolLM2-135M (2 stages, f32, 256-token
#: chunks), an idle stream of 1,500 tokens took 1.8x its KV in RSS, one of 512 tokens 3.2x
#: (``benchmarks/bench_kv_memory.py``). A budget counts each kept token at this many times its
#: KV, so that what the budget allows is close to the memory it takes.
KEPT_TOKEN_COST = 2
#: The fewest tokens a budget keeps: one conversation of this length, whatever the memory says.
MIN_BUDGET_TOKENS = 256


@dataclass(frozen=True)
class KvHolder:
    """A PC holding stages: its name, the decoder layers it holds and its memory."""

    name: str
    layers: int
    free_bytes: int | None  # None: not known (then only a given budget limits it)


@dataclass(frozen=True)
class KvHeld:
    """The KV entries a pipeline's streams hold now, the same on every stage (each entry costs
    a stage its layers' share of a token's KV)."""

    tokens: int  # of every stream, generating or idle
    idle_tokens: int  # of the conversations kept between requests
    budget_tokens: int | None  # what the idle ones may hold (None: no limit, or reuse off)


def kv_element_bytes(precision: str, kv_cache_precision: str | None) -> int:
    """Bytes of one KV element as a stage is compiled: f32 with precision f32 (exact runs) or
    when asked, else f16 (OpenVINO's CPU default keeps it at most that large)."""
    return 4 if "f32" in (precision, kv_cache_precision) else 2


def kv_bytes_per_token_per_layer(config: Mapping[str, Any], element_bytes: int) -> int:
    """``2 * kv_heads * head_dim`` elements of ``element_bytes``: a token's key and value in
    one layer, from a model's HF config."""
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size", 0)) // heads)
    return 2 * kv_heads * head_dim * element_bytes


def budget_tokens(
    holders: Sequence[KvHolder],
    bytes_per_token_per_layer: int,
    *,
    budget_bytes: int | None = None,
) -> int | None:
    """The tokens idle conversations may keep: each holder spends ``budget_bytes`` (or
    :data:`FREE_MEMORY_SHARE` of its free memory) on its layers' share, each token costing
    :data:`KEPT_TOKEN_COST` times its KV; the tightest holder decides. None when nothing limits
    it (no budget, no holder's memory known)."""
    limits = []
    for holder in holders:
        if holder.layers <= 0:
            continue
        spend = budget_bytes
        if spend is None and holder.free_bytes is not None:
            spend = int(holder.free_bytes * FREE_MEMORY_SHARE)
        if spend is not None:
            limits.append(spend // (holder.layers * bytes_per_token_per_layer * KEPT_TOKEN_COST))
    return max(MIN_BUDGET_TOKENS, min(limits)) if limits else None
