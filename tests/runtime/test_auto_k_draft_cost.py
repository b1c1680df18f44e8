"""K auto (``fleetgui.runtime.auto_k``) with a draft model whose passes are dear: each draft past
what the acceptance pays for slows the stream, so K must stay small on a fast link and still grow
where rounds are long. Rounds simulated with known costs (``auto_k_costs``: here every draft
pass costs ``step``, the proposal ``fixed`` besides) and a known acceptance rate, as the
pipeline times them."""

from __future__ import annotations

import numpy as np
import pytest
from auto_k_costs import Costs, best_k, tokens_per_ms

from fleetgui.runtime.auto_k import OFF, AutoK

# the distilled SmolLM2 draft and its target on 2 local workers at 0 ms a hop, the machine busy
# (docs/performance.md): a draft pass 6.5 ms, and rounds of 67, ~150 and ~250 ms at K=1, 5, 10
DISTILLED = Costs(fixed=0.5, step=6.5, verify=32.0, position=14.0, first_in_fixed=False)
# its first tokens agreed 39 % of the time, and 12 % of 5 drafts (6 % of 10) were accepted:
# about a per-token acceptance of 0.39 at every position
DISTILLED_ACCEPTANCE = 0.39
# n-gram prompt lookup (a proposal is a dictionary look-up) on an idle machine, where the
# target verifies more positions almost for free
NGRAM = Costs(fixed=0.01, step=0.001, verify=26.0, position=1.0, first_in_fixed=False)
HOPS_MS = (0, 25, 50, 100)
REPLY_TOKENS = 48  # what `fleetgui bench` generates per run, each with a new K chooser
NOISE = 0.25  # each measured time is off by about this much (a machine shared with others)


def pace(k: int, a: float, costs: Costs) -> float:
    """Expected tokens per ms at a fixed K (at :data:`OFF`: plain steps)."""
    if k == OFF:
        return 1 / costs.verify_ms(0)
    return tokens_per_ms(k, a, costs)


def reply(
    auto: AutoK, a: float, costs: Costs, rng: np.random.Generator, tokens: int = REPLY_TOKENS
) -> tuple[float, list[int]]:
    """One reply as the pipeline runs it: K (or a plain step) from ``auto``, drafts accepted
    one by one with probability ``a``, each time off by about :data:`NOISE`, the first round
    untimed and every round's draft pass timed. Its tokens per ms and the K of each round."""
    made, spent, ks = 0, 0.0, []
    while made < tokens:
        k = min(auto.choose(1), tokens - made)
        if k == OFF:
            ms = costs.verify_ms(0) * rng.lognormal(0.0, NOISE)
            auto.record_plain(ms)
            made, spent = made + 1, spent + ms
            continue
        accepted = 0
        while accepted < k and rng.random() < a:
            accepted += 1
        draft = costs.draft_ms(k) * rng.lognormal(0.0, NOISE)
        compute = costs.compute_ms(k) * rng.lognormal(0.0, NOISE)
        verify = costs.wait * rng.lognormal(0.0, NOISE) + compute
        one_pass = costs.step * rng.lognormal(0.0, NOISE)
        auto.update(
            k, accepted, draft, verify, timed=bool(ks), compute_ms=compute, pass_ms=one_pass
        )
        ks.append(k)
        made, spent = made + accepted + 1, spent + draft + verify
    return made / spent, ks


def replies(a: float, costs: Costs, count: int = 40, seed: int = 0) -> tuple[float, list[int]]:
    """``count`` replies, each with a new chooser (as the benchmark runs K auto): the mean of
    their tokens per ms and the K of every round."""
    rng = np.random.default_rng(seed)
    paces, ks = [], []
    for _ in range(count):
        one, reply_ks = reply(AutoK(), a, costs, rng)
        paces.append(one)
        ks += reply_ks
    return float(np.mean(paces)), ks


@pytest.mark.parametrize("hop_ms", HOPS_MS)
def test_a_costly_draft_runs_within_10_percent_of_the_best_k_at_every_delay(hop_ms: int) -> None:
    """The issue's must-hold, with the distilled draft's costs: K auto within 10 % of the best
    fixed K. At 0 ms the best is K=1 (K=2 runs at 0.85 of it); K auto as it was ran at 0.86
    of it there, with 1.7 drafts a round: each reply started at K=4 and measured K=6 next, and
    noisy round times priced a second draft below its cost."""
    costs = DISTILLED.at_hop(hop_ms)
    best = best_k(DISTILLED_ACCEPTANCE, costs)
    got, ks = replies(DISTILLED_ACCEPTANCE, costs)
    assert got >= 0.9 * pace(best, DISTILLED_ACCEPTANCE, costs), (best, np.mean(ks))
    if hop_ms == 0:
        assert best == 1
        assert float(np.mean(ks)) <= 1.5, np.mean(ks)


def test_a_costly_draft_on_a_fast_link_stays_at_k1_after_its_first_rounds() -> None:
    """Past a reply's first few rounds, K stays at 1: a second draft would be accepted 39 % of
    the time, and costs a draft pass and a verified position."""
    rng = np.random.default_rng(1)
    later = []
    for _ in range(20):
        _, ks = reply(AutoK(), DISTILLED_ACCEPTANCE, DISTILLED, rng, tokens=96)
        later += ks[4:]
    assert later.count(1) >= 0.85 * len(later), np.bincount(later)


@pytest.mark.parametrize("hop_ms", [50, 100])
def test_cheap_drafts_that_agree_reach_a_large_k_on_a_slow_link(hop_ms: int) -> None:
    """n-gram drafts cost nothing; on text they predict (acceptance 0.85) with 50-100 ms a hop,
    the best K is 10-16. A chat's replies (each starting from the last one's estimates) run
    within 10 % of it from the second reply on."""
    a, costs = 0.85, NGRAM.at_hop(hop_ms)
    best = best_k(a, costs)
    assert best >= 10
    rng = np.random.default_rng(2)
    auto, paces, later = AutoK(), [], []
    for turn in range(6):
        one, ks = reply(auto, a, costs, rng)
        auto = auto.carried_over()
        if turn:
            paces.append(one)
            later += ks
    assert float(np.mean(paces)) >= 0.9 * pace(best, a, costs), np.mean(later)
    assert float(np.median(later)) >= 8, later


def test_a_draft_never_costs_less_than_its_pass() -> None:
    """Rounds at K=2 and K=3 that happened to take the same time: the cost line still adds at
    least a draft pass per draft, so K does not climb on noise."""
    auto = AutoK()
    for k, ms in ((2, 60.0), (3, 60.0), (2, 60.0), (3, 60.0)):
        auto.update(k, 0, 13.0, ms - 13.0, pass_ms=6.5)
    assert auto.round_ms(3) - auto.round_ms(2) >= 6.5
    assert auto.round_ms(1) <= 60.0 - 6.5


@pytest.mark.parametrize(("pass_ms", "probe"), [(6.5, 1), (0.001, 4)])
def test_the_second_k_measured_is_below_when_drafts_cannot_pay_for_their_passes(
    pass_ms: float, probe: int
) -> None:
    """A lone stream with one K timed (K=2, rounds of 45 ms, its drafts accepted 1 in 4) runs
    its next round at another K to measure the cost line. Where even the draft passes alone
    make a larger K slower, that is K=1; with drafts that cost nothing, K=4."""
    auto = AutoK()
    assert auto.choose() == 2
    for accepted in (0, 1, 0):
        auto.update(2, accepted, 1 + 2 * pass_ms, 44.0 - 2 * pass_ms, pass_ms=pass_ms)
    assert auto.choose() == probe


def test_a_k_timed_long_ago_is_measured_again() -> None:
    """A lone stream at K=1 (its drafts accepted every other round) whose runner-up K=2 was
    last timed more than ``recheck`` rounds ago runs one round at K=2, then returns to K=1;
    the next such round comes no sooner than ``recheck`` rounds later. (The machine's load
    comes and goes: a K timed in a busy moment would otherwise stay dear for good.)"""
    costs = Costs(fixed=0.5, step=6.5, verify=26.0, position=4.0, first_in_fixed=False)
    auto = AutoK(initial_k=1)
    auto.update(2, 0, costs.draft_ms(2), costs.verify_ms(2), pass_ms=6.5)
    auto.update(2, 1, costs.draft_ms(2), costs.verify_ms(2), pass_ms=6.5)
    ks = []
    for i in range(2 * AutoK.recheck + 4):
        k = auto.choose()
        ks.append(k)
        auto.update(k, i % 2, costs.draft_ms(k), costs.verify_ms(k), pass_ms=6.5)
    rechecks = [i for i, k in enumerate(ks) if k == 2]
    assert len(rechecks) == 2 and rechecks[1] - rechecks[0] > AutoK.recheck, ks
    assert ks.count(1) == len(ks) - 2, ks
