"""The idle conversations' KV budget (:mod:`fleetgui.runtime.kv_budget`): bytes on each PC that
holds stages, in tokens by the layers it holds; the tightest PC decides."""

from __future__ import annotations

import pytest

from fleetgui.runtime.kv_budget import (
    FREE_MEMORY_SHARE,
    KEPT_TOKEN_COST,
    MIN_BUDGET_TOKENS,
    KvHolder,
    budget_tokens,
    kv_bytes_per_token_per_layer,
    kv_element_bytes,
)

SMOLLM2 = {"num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
PER_LAYER = 2 * 3 * 64 * 2  # SmolLM2: 3 KV heads of 64 at f16


def test_a_tokens_kv_per_layer_follows_the_config() -> None:
    assert kv_bytes_per_token_per_layer(SMOLLM2, 2) == PER_LAYER
    assert kv_bytes_per_token_per_layer({**SMOLLM2, "head_dim": 128}, 4) == 2 * 3 * 128 * 4
    assert kv_bytes_per_token_per_layer({"num_attention_heads": 4, "hidden_size": 64}, 2) == 256


@pytest.mark.parametrize(
    ("precision", "kv", "size"), [("f32", None, 4), ("auto", None, 2), ("auto", "f32", 4)]
)
def test_kv_elements_are_f32_only_when_asked(precision: str, kv: str | None, size: int) -> None:
    assert kv_element_bytes(precision, kv) == size


@pytest.mark.parametrize(
    ("holders", "budget", "tokens"),
    [
        # half of 1 GiB free, 15 layers here: what those layers' share of a token buys
        (
            [KvHolder("pc", 15, 2**30)],
            None,
            int(2**30 * FREE_MEMORY_SHARE) // (15 * PER_LAYER * KEPT_TOKEN_COST),
        ),
        # a given budget instead of free memory; the PC with more layers decides
        (
            [KvHolder("pc", 10, 2**30), KvHolder("w", 20, 2**34)],
            2**28,
            2**28 // (20 * PER_LAYER * KEPT_TOKEN_COST),
        ),
        # a worker with little memory left holds the budget down
        (
            [KvHolder("pc", 10, 2**32), KvHolder("w", 20, 2**26)],
            None,
            2**25 // (20 * PER_LAYER * KEPT_TOKEN_COST),
        ),
        # a PC with no stages costs nothing; one with unknown memory limits only by a budget
        ([KvHolder("pc", 0, 10), KvHolder("w", 30, None)], None, None),
        (
            [KvHolder("pc", 0, 10), KvHolder("w", 30, None)],
            2**27,
            2**27 // (30 * PER_LAYER * KEPT_TOKEN_COST),
        ),
        # never below one short conversation
        ([KvHolder("pc", 30, 1000)], None, MIN_BUDGET_TOKENS),
    ],
)
def test_the_tightest_pc_sets_the_budget(
    holders: list[KvHolder], budget: int | None, tokens: int | None
) -> None:
    assert budget_tokens(holders, PER_LAYER, budget_bytes=budget) == tokens
