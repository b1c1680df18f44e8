"""K auto: the acceptance estimate and the choice of K, against rounds simulated with a known
per-token acceptance rate and known draft and verify costs."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgui.runtime.speculative import K_MAX, K_MIN, AutoK

DRAFT_MS = 1.0  # per draft token


def verify_ms(k: int) -> float:
    return 10.0 + 0.5 * k


def simulate(auto: AutoK, a: float, rounds: int, rng: np.random.Generator) -> list[int]:
    """Rounds as the pipeline runs them: K from ``auto``, drafts accepted one by one with
    probability ``a`` until the first rejection. The K of each round."""
    chosen = []
    for _ in range(rounds):
        k = auto.choose()
        chosen.append(k)
        accepted = 0
        while accepted < k and rng.random() < a:
            accepted += 1
        auto.update(k, accepted, DRAFT_MS * k, verify_ms(k))
    return chosen


def tokens_per_ms(k: int, a: float) -> float:
    return (1 - a ** (k + 1)) / (1 - a) / (k * DRAFT_MS + verify_ms(k))


@pytest.mark.parametrize("a", [0.6, 0.8, 0.9])
def test_the_acceptance_estimate_is_per_token_whatever_k(a: float) -> None:
    rng = np.random.default_rng(5)
    for k in (2, 4, 8):
        auto = AutoK(initial_k=k, smoothing=0.005)
        for _ in range(3000):
            accepted = 0
            while accepted < k and rng.random() < a:
                accepted += 1
            auto.update(k, accepted, DRAFT_MS * k, verify_ms(k))
        # accepted / K would read 0.78 for a = 0.9 at K = 4, and 0.57 at K = 8
        assert auto.alpha == pytest.approx(a, abs=0.05), (k, auto.alpha)


@pytest.mark.parametrize("a", [0.3, 0.7, 0.9])
def test_k_auto_settles_where_tokens_per_ms_are_highest(a: float) -> None:
    chosen_ks = simulate(AutoK(), a, 600, np.random.default_rng(11))
    chosen = int(np.median(chosen_ks[-300:]))  # K moves with the recent rounds' luck
    best = max(range(K_MIN, K_MAX + 1), key=lambda k: tokens_per_ms(k, a))
    assert tokens_per_ms(chosen, a) >= 0.97 * tokens_per_ms(best, a), (chosen, best)
    if a == 0.3:
        assert chosen <= 2
    if a == 0.9:
        assert chosen >= 6
