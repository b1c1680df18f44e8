"""The prompt tokens a pass may carry beside decode steps follow the stages' measured lines."""

from __future__ import annotations

import pytest

from fleetgui.runtime.pass_costs import (
    DEFAULT_PREFILL_ROOM,
    MAX_PREFILL_ROOM,
    MIN_PREFILL_ROOM,
    PassCosts,
    steady_room,
)


def test_lines_are_fitted_per_stage_and_bound_the_prompt_room() -> None:
    costs = PassCosts(slowdown=2.0)
    assert costs.prefill_room(1) == DEFAULT_PREFILL_ROOM  # nothing measured yet
    for tokens in (1, 2, 8, 64):
        # stage 0: 4 ms + 0.25 ms a token; stage 1: 5 ms + 0.25 ms; 3 ms of hops on top
        stages = {0: 4 + 0.25 * tokens, 1: 5 + 0.25 * tokens}
        costs.record(tokens, stages, sum(stages.values()) + 3)
    lines = costs.lines()
    assert lines[0].fixed_ms == pytest.approx(4) and lines[1].per_token_ms == pytest.approx(0.25)
    # a round trip of 2 decode tokens: 4.5 + 5.5 + 3 = 13 ms; twice that allows 13 ms more,
    # 26 tokens at 0.5 ms a token over both stages
    assert costs.prefill_room(2) == 26


def test_the_room_stays_within_its_bounds() -> None:
    cheap, dear = PassCosts(), PassCosts()
    for tokens in (1, 100):
        cheap.record(tokens, {0: 10 + 1e-4 * tokens}, 10)
        dear.record(tokens, {0: 0.1 + 5 * tokens}, 5 * tokens)
    assert cheap.prefill_room(1) == MAX_PREFILL_ROOM
    assert dear.prefill_room(1) == MIN_PREFILL_ROOM


def test_passes_that_carried_a_prompt_set_the_room_by_what_they_added() -> None:
    """Deep in a long prompt its tokens cost more than the lines say: the room follows the
    round trip such passes added over decode-only ones."""
    costs = PassCosts(slowdown=2.0)
    for tokens in (1, 2, 3):
        costs.record(tokens, {0: 4.0 + 0.1 * tokens}, 10.0)  # decode-only: 10 ms round trips
    assert costs.prefill_room(1) == 100  # the lines' 0.1 ms a token, 10 ms round trips
    costs.record(21, {0: 15.0}, 20.0, prefill_tokens=20)  # 20 prompt tokens added 10 ms
    assert costs.prefill_room(1) == 20  # 0.5 ms a prompt token: 10 ms more is 20 tokens
    for _ in range(20):
        costs.record(11, {0: 15.0}, 20.0, prefill_tokens=10)  # deeper: 1 ms a token
    assert costs.prefill_room(1) == 10
    costs.record_decode(1, 30.0)  # a lone stream's steps got slower: more room in proportion
    assert costs.prefill_room(1) > 10


def test_a_wavering_room_keeps_one_size_and_follows_a_lower_one_at_once() -> None:
    sizes, last = [], None
    for estimate in (11, 9, 17, 19, 8, 7, 12, 40):
        last = steady_room(estimate, last)
        sizes.append(last)
    # 17 and 19 are not well above 8 (a new pass size costs); 7 is below it; 12 is well above
    # 4, and 40 above 8
    assert sizes == [8, 8, 8, 8, 8, 4, 8, 32]
