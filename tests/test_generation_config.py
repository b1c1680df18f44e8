"""How an answer is decoded (``fleetgui.generation_config.GenerationConfig``): greedy by
default, sampling values checked with clear errors, a seeded generator."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgui.generation_config import GenerationConfig


def test_the_default_config_is_greedy() -> None:
    config = GenerationConfig()
    assert config.greedy
    assert not GenerationConfig(temperature=0.7).greedy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, r"temperature must be a finite number >= 0"),
        ({"temperature": float("nan")}, r"temperature must be a finite number >= 0"),
        ({"temperature": float("inf")}, r"temperature must be a finite number >= 0"),
        ({"top_k": -1}, r"top_k must be >= 0"),
        ({"top_k": 2.5}, r"top_k must be an integer"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_p": -0.2}, r"top_p must be in \(0, 1\]"),
        ({"top_p": float("nan")}, r"top_p must be in \(0, 1\]"),
        ({"seed": -3}, r"seed must be a non-negative integer"),
    ],
)
def test_invalid_sampling_values_raise_clear_errors(kwargs: dict[str, float], message: str) -> None:
    config = GenerationConfig(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        config.check_sampling()
    with pytest.raises(ValueError, match=message):
        config.check()


def test_make_rng_is_seeded() -> None:
    a = GenerationConfig(temperature=1.0, seed=7).make_rng().random(3)
    b = GenerationConfig(temperature=1.0, seed=7).make_rng().random(3)
    np.testing.assert_array_equal(a, b)
