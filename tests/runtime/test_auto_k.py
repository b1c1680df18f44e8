"""K auto (``fleetgui.runtime.auto_k``): the acceptance estimate and the choice of K, against
rounds simulated with a known per-token acceptance rate and known round costs
(``auto_k_costs``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from auto_k_costs import DEMO, Costs, best_k, tokens_per_ms

from fleetgui.runtime.auto_k import K_MAX, K_MIN, AutoK

# a draft pass 1 ms, a verify pass 10 ms + 0.5 ms a position: no fixed draft cost
PLAIN = Costs(fixed=1.0, step=1.0, verify=10.0, position=0.5)


def simulate(
    auto: AutoK,
    a: float,
    rounds: int,
    rng: np.random.Generator,
    costs: Costs = PLAIN,
    streams: int = 1,
) -> list[int]:
    """Rounds as the pipeline runs them: K from ``auto`` (told ``streams`` are generating),
    drafts accepted one by one with probability ``a`` until the first rejection. The K of each
    round."""
    chosen = []
    for _ in range(rounds):
        k = auto.choose(streams)
        chosen.append(k)
        accepted = 0
        while accepted < k and rng.random() < a:
            accepted += 1
        auto.update(k, accepted, costs.round_ms(k) - costs.verify_ms(k), costs.verify_ms(k))
    return chosen


@pytest.mark.parametrize("a", [0.6, 0.8, 0.9])
def test_the_acceptance_estimate_is_per_token_whatever_k(a: float) -> None:
    rng = np.random.default_rng(5)
    for k in (2, 4, 8):
        auto = AutoK(initial_k=k, smoothing=0.005)
        for _ in range(3000):
            accepted = 0
            while accepted < k and rng.random() < a:
                accepted += 1
            auto.update(k, accepted, PLAIN.round_ms(k) - PLAIN.verify_ms(k), PLAIN.verify_ms(k))
        # accepted / K would read 0.78 for a = 0.9 at K = 4, and 0.57 at K = 8
        assert auto.alpha == pytest.approx(a, abs=0.05), (k, auto.alpha)


def test_a_round_at_an_unseen_k_costs_the_line_through_the_seen_ones() -> None:
    auto = AutoK()
    for k in (4, 2, 8, 1, 6):
        auto.update(k, 0, DEMO.round_ms(k) - DEMO.verify_ms(k), DEMO.verify_ms(k))
    for k in (1, 3, 4, 16):
        assert auto.round_ms(k) == pytest.approx(DEMO.round_ms(k), rel=0.02), k


@pytest.mark.parametrize("a", [0.3, 0.7, 0.9])
def test_k_auto_settles_where_tokens_per_ms_are_highest(a: float) -> None:
    chosen_ks = simulate(AutoK(), a, 600, np.random.default_rng(11))
    chosen = int(np.median(chosen_ks[-300:]))  # K moves with the recent rounds' luck
    best = best_k(a, PLAIN)
    assert tokens_per_ms(chosen, a, PLAIN) >= 0.97 * tokens_per_ms(best, a, PLAIN), (chosen, best)
    if a == 0.3:
        assert chosen <= 2
    if a == 0.9:
        assert chosen >= 6


@pytest.mark.parametrize("a", [0.5, 0.8, 0.9])
def test_a_fixed_cost_per_proposal_does_not_hold_k_down(a: float) -> None:
    """With the demo fleet's costs, from any starting K, K ends where rounds are fastest.
    (With the draft's time divided by K as a per-draft cost, K stayed at 1 for a = 0.5.)"""
    best = best_k(a, DEMO)
    rng = np.random.default_rng(3)
    for start in (1, 4, 8):
        chosen_ks = simulate(AutoK(initial_k=start), a, 200, rng, DEMO)
        chosen = int(np.median(chosen_ks[-100:]))
        assert tokens_per_ms(chosen, a, DEMO) >= 0.97 * tokens_per_ms(best, a, DEMO), (
            start,
            chosen,
            best,
        )


def test_k_auto_finds_the_best_k_within_a_chat_turn() -> None:
    """A stream starts at the initial K; from a reply's 8th round on (~30 tokens) its rounds
    run within 5 % of the best K's pace on average."""
    a = 0.85
    best_rate = tokens_per_ms(best_k(a, DEMO), a, DEMO)
    rates = []
    for seed in range(20):
        chosen_ks = simulate(AutoK(), a, 16, np.random.default_rng(100 + seed), DEMO)
        rates += [tokens_per_ms(k, a, DEMO) for k in chosen_ks[8:]]
    assert float(np.mean(rates)) >= 0.95 * best_rate


# With several streams K stays unless another K promises this much more: the pace K auto owes
WITHIN_MARGIN = 1 / (1 + AutoK.switch_gain)


def test_with_several_streams_k_holds_where_its_neighbours_are_no_faster() -> None:
    """Near the best K, neighbouring Ks differ by a few % (on the demo fleet K=3..8 ran within
    10 % of each other). With other streams generating, K stays put; alone, it follows each
    round's estimate and moves in most rounds."""
    a = 0.75
    best_rate = tokens_per_ms(best_k(a, DEMO), a, DEMO)
    switches = {}
    for streams in (1, 2):
        counts, rates = [], []
        for seed in range(10):
            chosen_ks = simulate(AutoK(), a, 100, np.random.default_rng(seed), DEMO, streams)
            counts.append(sum(k != prev for prev, k in itertools.pairwise(chosen_ks)))
            rates += [tokens_per_ms(k, a, DEMO) for k in chosen_ks]
        switches[streams] = float(np.mean(counts))
        assert float(np.mean(rates)) >= 0.95 * best_rate, streams
    assert switches[2] <= 10 < 3 * switches[2] < switches[1], switches


@pytest.mark.parametrize("a", [0.5, 0.8])
def test_with_several_streams_k_still_moves_to_a_clearly_faster_k(a: float) -> None:
    """From any starting K, K ends within the switch margin of the best K's pace. (The price of
    the brakes: at a = 0.9 a stream that starts at K=4 stays there, at 0.87 of the best K's
    pace, as the line through one K's rounds guesses longer rounds dearer than they are.)"""
    best = best_k(a, DEMO)
    rng = np.random.default_rng(3)
    for start in (1, 4, 8):
        chosen_ks = simulate(AutoK(initial_k=start), a, 200, rng, DEMO, streams=2)
        chosen = int(np.median(chosen_ks[-100:]))
        assert tokens_per_ms(chosen, a, DEMO) >= WITHIN_MARGIN * tokens_per_ms(best, a, DEMO), (
            start,
            chosen,
            best,
        )


def test_with_several_streams_a_streak_of_accepted_rounds_does_not_send_k_to_the_maximum() -> None:
    """Six rounds that accept all their drafts read as an acceptance rate near 1. With other
    streams generating the choice believes at most ``max_alpha``, so K goes no further than that
    rate's best K; alone, it goes to the maximum."""
    ceiling = best_k(AutoK.max_alpha, DEMO)
    chosen = {}
    for streams in (1, 2):
        auto = AutoK()
        for k in (4, 6) * 3:
            auto.update(k, k, DEMO.round_ms(k) - DEMO.verify_ms(k), DEMO.verify_ms(k))
        assert auto.alpha > 0.95
        chosen[streams] = auto.choose(streams)
    assert chosen[2] <= ceiling < chosen[1] == K_MAX, (chosen, ceiling)


def test_a_slow_round_at_a_small_k_does_not_make_long_rounds_look_cheap() -> None:
    """With two streams a round's verify time includes waiting for the other stream's round: one
    such round at K=1 once tilted the cost line down, and K jumped to 16."""
    auto = AutoK()
    for _ in range(3):
        auto.update(4, 3, DEMO.round_ms(4) - DEMO.verify_ms(4), DEMO.verify_ms(4))
    waited = 2 * DEMO.round_ms(4)
    auto.update(1, 1, DEMO.round_ms(1) - DEMO.verify_ms(1), waited)
    assert auto.round_ms(K_MAX) > auto.round_ms(8) > auto.round_ms(4)
    assert auto.choose(streams=1) < K_MAX


def test_a_lone_stream_with_one_k_timed_measures_a_second_one() -> None:
    """From one K's rounds the cost line's slope is a guess that can hold K there for good: a
    lone stream's next round runs 2 Ks higher (at the top, 2 lower). With other streams the
    round times include waiting, and K stays."""
    for start, probe in ((4, 6), (K_MAX, K_MAX - 2)):
        auto = AutoK(initial_k=start)
        auto.update(start, 2, 5.0, 10.0)
        assert auto.choose(streams=1) == probe
    braked = AutoK(initial_k=4)
    braked.update(4, 2, 5.0, 10.0)
    assert braked.choose(streams=2) == 4


def test_an_untimed_round_moves_the_acceptance_estimate_only() -> None:
    """A stream's first round warms its fresh state up and costs more than the rest: the
    pipeline records its acceptance, not its time."""
    auto = AutoK()
    before = auto.alpha
    auto.update(4, 0, 50.0, 50.0, timed=False)
    assert auto.alpha < before
    assert auto.choose() == AutoK.initial_k  # no round time yet: nothing to compare
    auto.update(4, 4, 5.0, 10.0)
    assert auto.round_ms(4) == pytest.approx(15.0)


def test_a_carried_over_chooser_starts_from_the_estimates_and_keeps_its_own() -> None:
    auto = AutoK()
    for k in (4, 6, 2, 2):
        auto.update(k, 1, DEMO.round_ms(k) - DEMO.verify_ms(k), DEMO.verify_ms(k))
    chosen = auto.choose()
    carried = auto.carried_over()
    assert carried.alpha == auto.alpha
    assert carried.round_ms(6) == auto.round_ms(6)
    assert carried.choose() == chosen
    carried.update(6, 6, 1.0, 1.0)
    assert auto.round_ms(6) == pytest.approx(DEMO.round_ms(6))  # the original is untouched


def test_one_slow_round_at_a_k_does_not_keep_k_away_from_it_for_good() -> None:
    """A lone stream whose draft rarely agrees, as the pipeline ran it: K=4, the probe at K=6,
    then K=1, whose one round was slow (the machine was busy). Priced on the cost line through
    every K's rounds, the small Ks stay in play instead of K going back to 4 for good; a
    second slow round moves the line, weighted by rounds, only part of the way."""
    auto = AutoK(initial_k=4)
    for k in (4, 6):
        auto.update(k, 0, DEMO.round_ms(k) - DEMO.verify_ms(k), DEMO.verify_ms(k))
    slow = DEMO.round_ms(1) - DEMO.verify_ms(1) + 2 * DEMO.verify_ms(4)
    auto.update(1, 0, DEMO.round_ms(1) - DEMO.verify_ms(1), 2 * DEMO.verify_ms(4))
    assert auto.round_ms(1) < auto.round_ms(4) < slow
    assert auto.choose(streams=1) <= 2
    once = auto.round_ms(1)
    auto.update(1, 0, DEMO.round_ms(1) - DEMO.verify_ms(1), 2 * DEMO.verify_ms(4))
    assert once < auto.round_ms(1) < slow


def _with_network_wait(
    auto: AutoK, a: float, wait_ms: float, rounds: int, rng: np.random.Generator, *, tell: bool
) -> list[int]:
    """Rounds whose verify also waits ``wait_ms`` (give or take 10 ms) on the network, as at
    100 ms a hop; ``tell``: the pipeline passes the stages' compute apart from that wait."""
    chosen = []
    for _ in range(rounds):
        k = auto.choose(1)
        chosen.append(k)
        accepted = 0
        while accepted < k and rng.random() < a:
            accepted += 1
        compute = DEMO.verify_ms(k)
        waited = compute + wait_ms + float(rng.normal(0.0, 10.0))
        draft = DEMO.round_ms(k) - compute
        auto.update(k, accepted, draft, waited, compute_ms=compute if tell else None)
    return chosen


def test_a_slow_network_does_not_hold_k_down() -> None:
    """Each round waits ~300 ms for the network (3 hops at 100 ms) and computes ~15 ms, so a
    draft adds ~1 ms to a ~315 ms round. The cost line's floor is a share of the round's work:
    as a share of its time (the wait too) it priced a draft at ~16 ms and held K below the best."""
    a, wait = 0.9, 300.0

    def pace(k: int) -> float:
        return (1 - a ** (k + 1)) / (1 - a) / (wait + DEMO.round_ms(k))

    best = max(range(K_MIN, K_MAX + 1), key=pace)
    told, untold = [], []
    for seed in range(10):
        for tell, paces in ((True, told), (False, untold)):
            ks = _with_network_wait(AutoK(), a, wait, 60, np.random.default_rng(seed), tell=tell)
            paces.append(pace(int(np.median(ks[-30:]))) / pace(best))
    assert float(np.mean(told)) >= 0.97, told
    assert float(np.mean(untold)) < 0.95, untold  # the floor on the whole round's time
