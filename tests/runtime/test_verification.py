"""Speculative verification (``fleetgui.runtime.verification``): greedy and sampled, step by step,
then statistically.

The statistical tests simulate many speculative rounds with fixed seeds (so they are
deterministic) and check with chi-square tests that speculative sampling emits tokens with the
target's distribution; negative controls show the same tests reject subtly wrong verifiers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from fleetgui.runtime.head import SparseDist, sample
from fleetgui.runtime.verification import uniforms_for_round, verify_greedy, verify_sampling

# --------------------------------------------------------------------------------------------
# verify_greedy


def test_verify_greedy_all_accepted_gives_the_bonus_token() -> None:
    assert verify_greedy(np.array([5, 6, 7, 8]), [5, 6, 7]) == (3, [5, 6, 7, 8])


def test_verify_greedy_first_rejected() -> None:
    assert verify_greedy(np.array([4, 6, 7, 8]), [5, 6, 7]) == (0, [4])


def test_verify_greedy_middle_rejected() -> None:
    # Positions after the first mismatch are ignored even if they happen to match.
    assert verify_greedy(np.array([5, 9, 7, 8]), [5, 6, 7]) == (1, [5, 9])


def test_verify_greedy_k1_and_k0() -> None:
    assert verify_greedy(np.array([3, 4]), [3]) == (1, [3, 4])
    assert verify_greedy(np.array([2, 4]), [3]) == (0, [2])
    assert verify_greedy(np.array([2]), []) == (0, [2])


def test_verify_greedy_checks_lengths() -> None:
    with pytest.raises(ValueError, match="K \\+ 1"):
        verify_greedy(np.array([1, 2]), [1, 2])


# --------------------------------------------------------------------------------------------
# verify_sampling: deterministic behaviour


def _dists(*rows: Sequence[float]) -> list[SparseDist]:
    return [SparseDist.from_dense(np.array(r), dtype=np.float64) for r in rows]


def test_verify_sampling_accepts_iff_u_below_ratio() -> None:
    p = np.array([[0.2, 0.6, 0.2], [0.5, 0.25, 0.25]])
    q = _dists([0.1, 0.3, 0.6])
    # Draft 2: ratio p/q = 0.2/0.6 = 1/3.
    assert verify_sampling(p, [2], q, [0.33], 0.0) == (1, [2, 0])  # bonus from p_1 with u=0
    assert verify_sampling(p, [2], q, [0.34], 0.0)[0] == 0
    # Draft 1: ratio 2 -> always accepted; the bonus uses u_resample on p_1.
    assert verify_sampling(p, [1], q, [float(np.nextafter(1.0, 0.0))], 0.6) == (1, [1, 1])
    assert verify_sampling(p, [1], q, [0.0], 0.8) == (1, [1, 2])


def test_verify_sampling_replacement_comes_from_the_residual() -> None:
    p = np.array([[0.2, 0.6, 0.2], [1 / 3, 1 / 3, 1 / 3]])
    q = _dists([0.1, 0.3, 0.6])
    # Residual max(0, p - q) = [0.1, 0.3, 0] -> normalised [0.25, 0.75, 0]: token 2 impossible.
    for u, expected in [(0.0, 0), (0.24, 0), (0.26, 1), (0.999, 1)]:
        assert verify_sampling(p, [2], q, [0.9], u) == (0, [expected])


def test_verify_sampling_stops_at_the_first_rejection() -> None:
    p = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    q = _dists([0.0, 1.0], [0.0, 1.0])
    # Draft 0 accepted (ratio 1), draft 1 rejected (p_1(1) = 0): replacement from residual [1, 0].
    assert verify_sampling(p, [1, 1], q, [0.5, 0.0], 0.9) == (1, [1, 0])


def test_verify_sampling_guards_q_zero_and_an_empty_residual() -> None:
    p = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = _dists([0.5, 0.5, 0.0])
    # Token 2 has q = 0 (and p = 0): rejected; residual p - q is all zero (p == q), so the
    # replacement is sampled from p itself and never is token 2.
    assert verify_sampling(p, [2], q, [0.0], 0.7) == (0, [1])
    assert verify_sampling(p, [2], q, [0.0], 0.2) == (0, [0])


def test_verify_sampling_rejects_draft_ids_past_the_target_vocabulary() -> None:
    # The draft's (padded) vocabulary has 5 ids, the target's logits only 3.
    p = np.array([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    q = [SparseDist.from_dense(np.array([0.25, 0.0, 0.25, 0.0, 0.5]), dtype=np.float64)]
    # Residual max(0, p - q) over the target's ids = [0.25, 0.5, 0] -> [1/3, 2/3, 0].
    assert verify_sampling(p, [4], q, [0.0], 0.3) == (0, [0])
    assert verify_sampling(p, [4], q, [0.0], 0.34) == (0, [1])
    assert verify_sampling(p, [0], q, [0.99], 0.0) == (1, [0, 0])  # ratio 2: accepted


def test_verify_sampling_k0_samples_from_p() -> None:
    p = np.array([[0.25, 0.75]])
    assert verify_sampling(p, [], [], [], 0.3) == (0, [1])


def test_verify_sampling_checks_its_inputs() -> None:
    p = np.full((3, 4), 0.25)
    q = _dists([0.25] * 4, [0.25] * 4)
    with pytest.raises(ValueError, match=r"\[K \+ 1, V\]"):
        verify_sampling(p, [1], q[:1], [0.5], 0.5)
    with pytest.raises(ValueError, match="one draft distribution"):
        verify_sampling(p, [1, 2], q[:1], [0.5, 0.5], 0.5)
    with pytest.raises(ValueError, match="negative"):
        verify_sampling(p, [1, -2], q, [0.5, 0.5], 0.5)
    with pytest.raises(ValueError, match=r"u_accept\[1\]"):
        verify_sampling(p, [1, 2], q, [0.5, 1.5], 0.5)
    with pytest.raises(ValueError, match="u_resample"):
        verify_sampling(p, [1, 2], q, [0.5, 0.5], -0.5)


def test_uniforms_for_round_fixed_order() -> None:
    u_accept, u_resample = uniforms_for_round(np.random.default_rng(11), 3)
    reference = np.random.default_rng(11).random(4)
    np.testing.assert_array_equal(u_accept, reference[:3])
    assert u_resample == reference[3]
    assert np.all((u_accept >= 0) & (u_accept < 1))
    empty, only = uniforms_for_round(np.random.default_rng(11), 0)
    assert empty.shape == (0,) and only == reference[0]
    with pytest.raises(ValueError, match="k must be >= 0"):
        uniforms_for_round(np.random.default_rng(0), -1)


# --------------------------------------------------------------------------------------------
# verify_sampling: statistical tests

VOCAB = 8
K = 3
ROUNDS = 20_000
P_OK = 1e-3  # a correct verifier must not be rejected at this level (fixed seeds: deterministic)
P_WRONG = 1e-6  # a wrong verifier must be rejected at this level on the same data size

Verifier = Callable[
    [np.ndarray, Sequence[int], Sequence[SparseDist], Sequence[float], float], tuple[int, list[int]]
]


@dataclass(frozen=True)
class Case:
    """Per-position target rows ``p`` [K+1, V] and draft distributions ``q`` (K of them)."""

    p: np.ndarray
    q: tuple[SparseDist, ...]


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


@functools.cache
def _case(name: str) -> Case:
    rng = np.random.default_rng(
        {"random": 1, "far": 2, "equal": 3, "q_top3": 4, "p_zeros": 5}[name]
    )
    p = rng.dirichlet(np.ones(VOCAB), size=K + 1)
    if name == "random":
        q = rng.dirichlet(np.ones(VOCAB), size=K)
    elif name == "far":  # the draft bets on what the target finds least likely
        q = np.full((K, VOCAB), 0.05 / VOCAB)
        q[np.arange(K), p[:K].argmin(axis=1)] += 0.95
    elif name == "equal":  # a perfect draft: everything is accepted
        q = p[:K].copy()
    elif name == "q_top3":  # a top-3 draft: the target has mass the draft can never propose
        q = rng.dirichlet(np.ones(VOCAB), size=K)
        for row in q:
            row[np.argsort(-row, kind="stable")[3:]] = 0.0
        q = _normalise(q)
    else:  # "p_zeros": a top-k target; the draft often proposes impossible tokens
        p[:, :3] = 0.0
        p = _normalise(p)
        q = rng.dirichlet(np.ones(VOCAB), size=K)
    dtype = np.float32 if name == "q_top3" else np.float64  # float32 is what travels on the wire
    dists = tuple(SparseDist.from_dense(row, dtype=dtype) for row in q)
    if name == "equal":
        # The verifier must see q == p exactly, as when the draft is the target itself.
        p[:K] = np.stack([d.to_dense(VOCAB) for d in dists])
    return Case(p, dists)


CASES = ["random", "far", "equal", "q_top3", "p_zeros"]


def _wrong_accept_if_possible(
    p: np.ndarray,
    drafts: Sequence[int],
    dists: Sequence[SparseDist],
    u_accept: Sequence[float],
    u_resample: float,
) -> tuple[int, list[int]]:
    """Broken on purpose: accepts any draft the target deems possible (ignores p/q)."""
    out: list[int] = []
    for i, token in enumerate(drafts):
        if p[i, token] > 0:
            out.append(int(token))
            continue
        residual = np.maximum(p[i] - dists[i].to_dense(p.shape[1]), 0.0)
        return i, [*out, sample(residual if residual.sum() > 0 else p[i], u_resample)]
    return len(drafts), [*out, sample(p[len(drafts)], u_resample)]


def _wrong_resample_from_p(
    p: np.ndarray,
    drafts: Sequence[int],
    dists: Sequence[SparseDist],
    u_accept: Sequence[float],
    u_resample: float,
) -> tuple[int, list[int]]:
    """Broken on purpose, subtly: correct acceptance, but resamples from p, not the residual."""
    out: list[int] = []
    for i, token in enumerate(drafts):
        q_token = dists[i].prob_of(int(token))
        if q_token > 0 and u_accept[i] < min(1.0, p[i, token] / q_token):
            out.append(int(token))
            continue
        return i, [*out, sample(p[i], u_resample)]
    return len(drafts), [*out, sample(p[len(drafts)], u_resample)]


def _wrong_reuse_accept_uniform(
    p: np.ndarray,
    drafts: Sequence[int],
    dists: Sequence[SparseDist],
    u_accept: Sequence[float],
    u_resample: float,
) -> tuple[int, list[int]]:
    """Broken on purpose, subtly: on rejection, resamples with the rejecting accept uniform
    (which is then known to be >= p/q) instead of an independent one."""
    out: list[int] = []
    for i, token in enumerate(drafts):
        q_token = dists[i].prob_of(int(token))
        if q_token > 0 and u_accept[i] < min(1.0, p[i, token] / q_token):
            out.append(int(token))
            continue
        residual = np.maximum(p[i] - dists[i].to_dense(p.shape[1]), 0.0)
        return i, [*out, sample(residual if residual.sum() > 0 else p[i], u_accept[i])]
    return len(drafts), [*out, sample(p[len(drafts)], u_resample)]


VERIFIERS: dict[str, Verifier] = {
    "real": verify_sampling,
    "accept_if_possible": _wrong_accept_if_possible,
    "resample_from_p": _wrong_resample_from_p,
    "reuse_accept_uniform": _wrong_reuse_accept_uniform,
}


@dataclass(frozen=True)
class Rounds:
    accepted: np.ndarray  # [ROUNDS] drafts accepted per round
    tokens: np.ndarray  # [ROUNDS, K + 1] emitted tokens, -1 past the end


@functools.cache
def _simulate(case_name: str, verifier_name: str) -> Rounds:
    """ROUNDS speculative rounds: drafts sampled from q, uniforms from a seeded stream."""
    case = _case(case_name)
    verifier = VERIFIERS[verifier_name]
    rng = np.random.default_rng(12345)
    # The draft samples each of its K tokens from its SparseDist (vectorised SparseDist.sample).
    u_draft = rng.random((ROUNDS, K))
    drafts = np.empty((ROUNDS, K), dtype=np.int64)
    for i, dist in enumerate(case.q):
        cdf = np.cumsum(dist.probs, dtype=np.float64)
        drafts[:, i] = dist.ids[np.searchsorted(cdf, u_draft[:, i] * cdf[-1], side="right")]
    assert dist.sample(float(u_draft[0, -1])) == drafts[0, -1]
    accepted = np.empty(ROUNDS, dtype=np.int64)
    tokens = np.full((ROUNDS, K + 1), -1, dtype=np.int64)
    for r in range(ROUNDS):
        u_accept, u_resample = uniforms_for_round(rng, K)
        row = drafts[r].tolist()
        n, new = verifier(case.p, row, case.q, u_accept.tolist(), u_resample)
        assert len(new) == n + 1 and new[:n] == row[:n]
        accepted[r] = n
        tokens[r, : n + 1] = new
    return Rounds(accepted, tokens)


def _goodness_of_fit(observed: np.ndarray, p: np.ndarray) -> float:
    """Chi-square p-value of ``observed`` token ids against ``p``; impossible tokens must be
    absent."""
    counts = np.bincount(observed, minlength=p.size)
    assert counts[p == 0].sum() == 0, "a zero-probability token was emitted"
    support = p > 0
    expected = p[support] / p[support].sum() * counts.sum()
    observed_counts = counts[support]
    small = expected < 5  # pool rare tokens into one bin so the chi-square approximation holds
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed_counts = np.append(observed_counts[~small], observed_counts[small].sum())
    if expected.size == 1:
        return 1.0
    return float(stats.chisquare(observed_counts, expected).pvalue)


def _alpha(p_row: np.ndarray, dist: SparseDist) -> float:
    return float(np.minimum(p_row, dist.to_dense(p_row.size)).sum())


@pytest.mark.parametrize("case_name", CASES)
def test_first_token_has_the_target_distribution(case_name: str) -> None:
    case, rounds = _case(case_name), _simulate(case_name, "real")
    pvalue = _goodness_of_fit(rounds.tokens[:, 0], case.p[0])
    assert pvalue > P_OK, f"{case_name}: first token p-value {pvalue:.3g}"


@pytest.mark.parametrize("case_name", CASES)
def test_later_tokens_given_accepted_prefix_have_the_target_distribution(case_name: str) -> None:
    """Token j, given that drafts 0..j-1 were accepted, is distributed as p_j (j = K: bonus)."""
    case, rounds = _case(case_name), _simulate(case_name, "real")
    tested = 0
    for j in range(1, K + 1):
        given = rounds.accepted >= j
        if j > 1 and given.sum() < 500:  # too few rounds get this deep for a chi-square test
            continue
        pvalue = _goodness_of_fit(rounds.tokens[given, j], case.p[j])
        assert pvalue > P_OK, f"{case_name}: token {j} p-value {pvalue:.3g}"
        tested += 1
    assert tested >= 1  # j = 1 is always tested


@pytest.mark.parametrize("case_name", CASES)
def test_acceptance_rate_is_leviathan_alpha(case_name: str) -> None:
    case, rounds = _case(case_name), _simulate(case_name, "real")
    for i in range(K):
        reached = rounds.accepted >= i
        trials = int(reached.sum())
        if trials < 500:
            continue
        successes = int((rounds.accepted[reached] > i).sum())
        alpha = min(1.0, _alpha(case.p[i], case.q[i]))
        if alpha >= 1.0 - 1e-12:
            assert successes == trials
            continue
        pvalue = stats.binomtest(successes, trials, alpha).pvalue
        assert pvalue > P_OK, f"{case_name} position {i}: {successes}/{trials} vs alpha={alpha:.4f}"


def test_cases_cover_low_and_full_acceptance() -> None:
    far = _case("far")
    assert all(_alpha(far.p[i], far.q[i]) < 0.1 for i in range(K))
    equal = _case("equal")
    assert all(_alpha(equal.p[i], equal.q[i]) > 1 - 1e-9 for i in range(K))
    assert np.all(_simulate("equal", "real").accepted == K)


@pytest.mark.parametrize(
    "verifier_name", ["accept_if_possible", "resample_from_p", "reuse_accept_uniform"]
)
def test_negative_control_wrong_verifiers_are_detected(verifier_name: str) -> None:
    """The goodness-of-fit test has power: broken verifiers fail it on the same data size."""
    case, rounds = _case("far"), _simulate("far", verifier_name)
    pvalue = _goodness_of_fit(rounds.tokens[:, 0], case.p[0])
    assert pvalue < P_WRONG, f"{verifier_name}: p-value {pvalue:.3g} should be tiny"
