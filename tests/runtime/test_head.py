"""The last stage's head (``fleetgui.runtime.head``): logits to probabilities, sampling, and the
sparse distributions a draft sends. (Speculative verification: ``test_verification.py``; the
sampling values themselves: ``tests/test_generation_config.py``.)"""

from __future__ import annotations

import numpy as np
import pytest

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.head import SparseDist, probabilities, sample

# --------------------------------------------------------------------------------------------
# the sampling values


def test_the_head_checks_the_sampling_values_it_is_given() -> None:
    config = GenerationConfig(temperature=1.0, top_p=0.0)  # as a peer might send it
    with pytest.raises(ValueError, match=r"top_p"):
        probabilities(np.zeros(4, dtype=np.float32), config)


# --------------------------------------------------------------------------------------------
# probabilities


def test_temperature_scaling_matches_hand_computation() -> None:
    logits = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    weights = np.exp(np.array([0.5, 1.0, 1.5]))  # logits / 2
    expected = weights / weights.sum()
    got = probabilities(logits, GenerationConfig(temperature=2.0))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # Low temperature sharpens, high temperature flattens.
    cold = probabilities(logits, GenerationConfig(temperature=0.25))
    hot = probabilities(logits, GenerationConfig(temperature=8.0))
    assert cold[2] > got[2] > hot[2] > 1 / 3


def test_softmax_is_numerically_safe() -> None:
    logits = np.array([1e4, 1e4 - 1.0, -1e4, -np.inf], dtype=np.float32)
    got = probabilities(logits, GenerationConfig(temperature=1.0))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[:2], [1 / (1 + np.e**-1), np.e**-1 / (1 + np.e**-1)])
    assert got[3] == 0.0


@pytest.mark.parametrize(
    "logits",
    [[1.0, np.nan, 0.0], [1.0, np.inf, 0.0], [-np.inf, -np.inf]],
)
def test_bad_logits_raise(logits: list[float]) -> None:
    with pytest.raises(ValueError, match="logits"):
        probabilities(np.array(logits, dtype=np.float32), GenerationConfig(temperature=1.0))


def test_top_k_keeps_exactly_k_with_ties_broken_by_id() -> None:
    logits = np.array([1.0, 3.0, 3.0, 2.0, 3.0], dtype=np.float32)
    got = probabilities(logits, GenerationConfig(temperature=1.0, top_k=2))
    # Three tokens tie for the top; the two lowest ids win and share the mass equally.
    np.testing.assert_allclose(got, [0.0, 0.5, 0.5, 0.0, 0.0])
    got = probabilities(logits, GenerationConfig(temperature=1.0, top_k=4))
    assert np.count_nonzero(got) == 4 and got[0] == 0.0
    w = np.exp([3.0, 3.0, 2.0, 3.0])
    np.testing.assert_allclose(got[1:], w / w.sum(), rtol=1e-12)
    # top_k >= V is no cut.
    full = probabilities(logits, GenerationConfig(temperature=1.0, top_k=9))
    assert np.count_nonzero(full) == 5


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [
        (0.39, {1}),
        (0.4, {1}),  # exactly the top token's mass: the top token alone reaches it
        (0.41, {1, 3}),
        (0.7, {1, 3}),  # exactly 0.4 + 0.3: an off-by-one ("mass before < p") keeps 3 tokens
        (0.71, {1, 3, 2}),
        (0.9, {1, 3, 2}),
        (0.91, {0, 1, 2, 3}),
        (1.0, {0, 1, 2, 3}),
    ],
)
def test_top_p_keeps_the_minimal_nucleus(top_p: float, kept: set[int]) -> None:
    target = np.array([0.1, 0.4, 0.2, 0.3])
    logits = np.log(target).astype(np.float64)
    got = probabilities(logits, GenerationConfig(temperature=1.0, top_p=top_p))
    assert set(np.flatnonzero(got).tolist()) == kept
    ids = sorted(kept)
    np.testing.assert_allclose(got[ids], target[ids] / target[ids].sum(), rtol=1e-9)


def test_top_p_ties_broken_by_id_and_at_least_one_token() -> None:
    logits = np.array([2.0, 1.0, 2.0, 2.0], dtype=np.float32)  # three ~0.30 and one ~0.11
    got = probabilities(logits, GenerationConfig(temperature=1.0, top_p=0.5))
    np.testing.assert_allclose(got, [0.5, 0.0, 0.5, 0.0])
    tiny = probabilities(logits, GenerationConfig(temperature=1.0, top_p=1e-9))
    np.testing.assert_array_equal(tiny, [1.0, 0.0, 0.0, 0.0])


def test_top_p_applies_to_the_renormalised_top_k_distribution() -> None:
    logits = np.log([0.5, 0.3, 0.2])
    # After top-k=2 the distribution is [0.625, 0.375]: top_p=0.6 keeps the first token only
    # (on the un-renormalised distribution 0.5 < 0.6 would keep two).
    got = probabilities(logits, GenerationConfig(temperature=1.0, top_k=2, top_p=0.6))
    np.testing.assert_array_equal(got, [1.0, 0.0, 0.0])


def test_top_p_on_a_large_vocabulary_matches_a_full_sort() -> None:
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(50_000) * 2).astype(np.float32)
    logits[rng.integers(0, 50_000, 500)] = 4.0  # many exact ties
    for temperature, top_p in [(0.7, 0.5), (1.0, 0.9), (3.0, 0.97)]:
        got = probabilities(logits, GenerationConfig(temperature=temperature, top_p=top_p))
        full = probabilities(logits, GenerationConfig(temperature=temperature))
        order = np.argsort(-full, kind="stable")
        mass_before = np.concatenate([[0.0], np.cumsum(full[order])[:-1]])
        expected = np.sort(order[mass_before < top_p - 1e-9])
        np.testing.assert_array_equal(np.flatnonzero(got), expected)
        np.testing.assert_allclose(got.sum(), 1.0)


def test_greedy_is_one_hot_argmax_with_lowest_id_on_ties() -> None:
    logits = np.array([0.5, 2.0, -1.0, 2.0], dtype=np.float32)
    for params in [GenerationConfig(), GenerationConfig(temperature=0.0, top_k=1, top_p=0.3)]:
        np.testing.assert_array_equal(probabilities(logits, params), [0.0, 1.0, 0.0, 0.0])


def test_rows_are_handled_independently() -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((5, 40)).astype(np.float32)
    rows[3] = 0.0  # a flat row: every cut is decided by ids
    for params in [
        GenerationConfig(),
        GenerationConfig(temperature=0.8),
        GenerationConfig(temperature=1.3, top_k=7),
        GenerationConfig(temperature=1.0, top_p=0.6),
        GenerationConfig(temperature=0.9, top_k=10, top_p=0.8),
    ]:
        batch = probabilities(rows, params)
        assert batch.shape == rows.shape
        for i in range(rows.shape[0]):
            np.testing.assert_array_equal(batch[i], probabilities(rows[i], params))
        np.testing.assert_allclose(batch.sum(axis=1), 1.0)
        # Deterministic: the same input gives bit-identical output.
        np.testing.assert_array_equal(batch, probabilities(rows.copy(), params))


def test_bad_logits_shape_raises() -> None:
    with pytest.raises(ValueError, match=r"shape \[V\] or \[N, V\]"):
        probabilities(np.zeros((2, 3, 4), dtype=np.float32), GenerationConfig(temperature=1.0))


# --------------------------------------------------------------------------------------------
# sample


def test_sample_is_deterministic_for_fixed_u() -> None:
    probs = np.array([0.2, 0.5, 0.3])
    assert [sample(probs, u) for u in (0.0, 0.1999, 0.2, 0.69, 0.7, 0.99)] == [0, 0, 1, 1, 2, 2]
    assert sample(probs, 0.42) == sample(probs.copy(), 0.42)


def test_sample_frequencies_over_a_uniform_grid_match_probs() -> None:
    probs = np.array([0.1, 0.0, 0.25, 0.05, 0.0, 0.6, 0.0])
    n = 1000
    draws = [sample(probs, (j + 0.5) / n) for j in range(n)]
    freqs = np.bincount(draws, minlength=probs.size) / n
    assert np.all(np.abs(freqs - probs) <= 1 / n)
    assert freqs[probs == 0].sum() == 0


def test_sample_never_returns_a_zero_probability_token() -> None:
    top = float(np.nextafter(1.0, 0.0))
    assert sample(np.array([0.2, 0.8, 0.0, 0.0]), top) == 1
    assert sample(np.array([0.0, 0.0, 1.0]), 0.0) == 2
    # float32 probabilities whose sum is not exactly 1, and unnormalised weights.
    probs32 = np.array([0.1, 0.0, 0.7, 0.2, 0.0], dtype=np.float32)
    for u in [0.0, 0.5, 0.9999, top, float(np.nextafter(np.float32(1.0), np.float32(0.0)))]:
        assert probs32[sample(probs32, u)] > 0
    assert sample(np.array([3.0, 0.0, 1.0, 0.0]), top) == 2
    assert sample(np.array([3.0, 0.0, 1.0, 0.0]), 0.74) == 0
    assert sample(np.array([3.0, 0.0, 1.0, 0.0]), 0.76) == 2
    # Tiny masses next to zeros.
    probs = np.array([0.0, 1e-300, 0.0, 1.0, 0.0])
    for u in np.linspace(0.0, top, 101):
        assert probs[sample(probs, float(u))] > 0


@pytest.mark.parametrize("u", [-0.1, 1.0, float("nan")])
def test_sample_rejects_bad_uniforms(u: float) -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        sample(np.array([0.5, 0.5]), u)


@pytest.mark.parametrize("probs", [[0.0, 0.0], [0.5, -0.1, 0.6], [np.nan, 1.0]])
def test_sample_rejects_bad_probs(probs: list[float]) -> None:
    with pytest.raises(ValueError, match="probs"):
        sample(np.array(probs), 0.5)


# --------------------------------------------------------------------------------------------
# SparseDist


def test_sparse_dist_round_trips() -> None:
    dense = np.array([0.0, 0.25, 0.0, 0.5, 0.25, 0.0])
    for dtype in (np.float32, np.float64):
        dist = SparseDist.from_dense(dense, dtype=dtype)
        assert dist.ids.dtype == np.int32 and dist.probs.dtype == dtype
        np.testing.assert_array_equal(dist.ids, [1, 3, 4])
        np.testing.assert_array_equal(dist.to_dense(6), dense)
        np.testing.assert_array_equal(dist.to_dense(10)[6:], 0.0)
        assert dist.nbytes == 3 * 4 + 3 * np.dtype(dtype).itemsize
        assert len(dist) == 3
        assert dist == SparseDist.from_dense(dist.to_dense(6), dtype=dtype)
    with pytest.raises(ValueError, match="outside a vocabulary"):
        dist.to_dense(4)


def test_sparse_dist_prob_of() -> None:
    dist = SparseDist.from_dense(np.array([0.0, 0.25, 0.0, 0.5, 0.25]), dtype=np.float64)
    assert [dist.prob_of(t) for t in range(5)] == [0.0, 0.25, 0.0, 0.5, 0.25]
    assert dist.prob_of(99) == 0.0
    assert dist.prob_of(-1) == 0.0


def test_sparse_dist_max_support_keeps_the_most_probable() -> None:
    dense = np.array([0.1, 0.3, 0.1, 0.4, 0.1])
    dist = SparseDist.from_dense(dense, max_support=3, dtype=np.float64)
    np.testing.assert_array_equal(dist.ids, [0, 1, 3])  # the 0.1 tie goes to the lowest id
    np.testing.assert_allclose(dist.probs, [0.125, 0.375, 0.5])


def test_sparse_dist_sample_matches_dense_sample() -> None:
    dist = SparseDist.from_dense(np.array([0.0, 0.25, 0.0, 0.5, 0.25, 0.0]))
    dense = dist.to_dense(6)
    for u in np.linspace(0.0, 0.999, 37):
        assert dist.sample(float(u)) == sample(dense, float(u))


@pytest.mark.parametrize(
    ("ids", "probs", "message"),
    [
        ([3, 1], [0.5, 0.5], "strictly increasing"),
        ([1, 1], [0.5, 0.5], "strictly increasing"),
        ([1, 2], [0.5], "equal length"),
        ([1, 2], [0.5, -0.5], "non-negative"),
        ([1, 2], [0.5, 0.6], "sum to 1"),
    ],
)
def test_sparse_dist_validates(ids: list[int], probs: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SparseDist(np.array(ids, dtype=np.int32), np.array(probs))
