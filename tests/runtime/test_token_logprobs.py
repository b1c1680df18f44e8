"""Log-probabilities of chosen tokens: the log-softmax, top tokens ranked as greedy ranks."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgui.runtime.token_logprobs import LOGPROB_FLOOR, logprobs_of


def test_logprobs_are_the_log_softmax_of_each_row() -> None:
    logits = np.random.default_rng(3).standard_normal((3, 50)).astype(np.float32) * 4
    chosen = [7, 0, 49]
    got = logprobs_of(logits, chosen, top=5)
    wide = logits.astype(np.float64)
    expected = np.log(np.exp(wide) / np.exp(wide).sum(axis=1, keepdims=True))
    for row, (lp, token) in enumerate(zip(got, chosen, strict=True)):
        assert lp.token == token
        assert lp.logprob == pytest.approx(expected[row, token], abs=1e-9)
        order = np.argsort(-expected[row], kind="stable")[:5]
        assert [i for i, _ in lp.top] == order.tolist()
        assert [v for _, v in lp.top] == pytest.approx(expected[row, order].tolist(), abs=1e-9)


def test_ties_go_to_the_lowest_id_and_only_the_asked_rows_are_read() -> None:
    logits = np.array([[1.0, 3.0, 3.0, 0.0, 3.0], [9.0, 9.0, 9.0, 9.0, 9.0]])
    (lp,) = logprobs_of(logits, [4], top=2)  # the second row is past the tokens
    assert [i for i, _ in lp.top] == [1, 2]
    assert lp.top[0][1] == lp.top[1][1] == lp.logprob


def test_without_top_only_the_chosen_tokens_come_back() -> None:
    (lp,) = logprobs_of(np.array([[0.0, 0.0]]), [1], top=0)
    assert lp.top == () and lp.logprob == pytest.approx(np.log(0.5))


def test_an_impossible_token_is_floored_not_minus_infinity() -> None:
    (lp,) = logprobs_of(np.array([[0.0, -np.inf, 1.0]]), [1], top=3)
    assert lp.logprob == LOGPROB_FLOOR
    assert lp.top[-1] == (1, LOGPROB_FLOOR)


def test_too_few_rows_is_an_error() -> None:
    with pytest.raises(ValueError, match="row for each of 2 tokens"):
        logprobs_of(np.zeros((1, 4)), [0, 1], top=0)
