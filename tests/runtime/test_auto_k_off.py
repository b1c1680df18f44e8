"""K auto (``fleetgui.runtime.auto_k``) turns speculation off while plain decoding is faster, and
back on when the text becomes predictable: simulated steps with a known acceptance rate and
known costs (``auto_k_costs``: the demo fleet's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from auto_k_costs import DEMO, Costs

from fleetgui.runtime.auto_k import OFF, AutoK


@dataclass
class Run:
    steps: list[int]  # K of each step, OFF for a plain one
    tokens: list[int]  # tokens each step made
    ms: list[float]  # each step's time

    def pace(self, start: int = 0) -> float:
        """Tokens per ms from step ``start`` on."""
        return sum(self.tokens[start:]) / sum(self.ms[start:])

    def step_at_token(self, token: int) -> int:
        """The first step at or after the ``token``-th token."""
        return int(np.searchsorted(np.cumsum(self.tokens), token))


def simulate(
    auto: AutoK,
    alpha: Callable[[int], float],
    n_tokens: int,
    rng: np.random.Generator,
    costs: Costs = DEMO,
    predictable: Callable[[int], bool] = lambda token: False,
) -> Run:
    """Steps as the pipeline runs them: K (or OFF) from ``auto``; a round's drafts accepted one
    by one with probability ``alpha(tokens so far)``; a plain step makes one token."""
    run = Run([], [], [])
    made = 0
    while made < n_tokens:
        k = auto.choose(1, predictable=auto.off and predictable(made))
        if k == OFF:
            auto.record_plain(costs.plain_ms)
            run.steps.append(OFF)
            run.tokens.append(1)
            run.ms.append(costs.plain_ms)
        else:
            accepted = 0
            while accepted < k and rng.random() < alpha(made):
                accepted += 1
            auto.update(k, accepted, costs.draft_ms(k), costs.verify_ms(k))
            run.steps.append(k)
            run.tokens.append(accepted + 1)
            run.ms.append(costs.draft_ms(k) + costs.verify_ms(k))
        made += run.tokens[-1]
    return run


def never_off() -> AutoK:
    """K auto as it was: speculation always on."""
    return AutoK(off_gain=float("inf"))


def test_a_draft_that_rarely_agrees_turns_speculation_off() -> None:
    """Accepted 4 % of the time, speculation at its best K (1) is slower than plain decoding;
    K auto as it was stayed there. Now most steps are plain, and from the 50th token on the
    stream runs within 5 % of plain decoding's pace."""
    plain_pace = 1 / DEMO.plain_ms
    for seed in range(5):
        run = simulate(AutoK(), lambda _: 0.04, 400, np.random.default_rng(seed))
        start = run.step_at_token(50)
        assert run.steps[start:].count(OFF) > 0.85 * len(run.steps[start:]), seed
        assert run.pace(start) >= 0.95 * plain_pace, (seed, run.pace(start), plain_pace)
        before = simulate(never_off(), lambda _: 0.04, 400, np.random.default_rng(seed))
        assert before.pace(before.step_at_token(50)) < 0.9 * plain_pace


@pytest.mark.parametrize("a", [0.5, 0.8])
def test_a_draft_that_agrees_keeps_speculation_on(a: float) -> None:
    for seed in range(5):
        run = simulate(AutoK(), lambda _: a, 400, np.random.default_rng(seed))
        assert OFF not in run.steps, (seed, run.steps)


def test_speculation_comes_back_when_the_text_becomes_predictable() -> None:
    """The draft agrees 3 % of the time for 200 tokens, then 90 %: the probe rounds see it and
    speculation comes back within a few probes; after that the stream runs at least at 85 %
    of the best K's pace."""
    best_pace = max((1 - 0.9 ** (k + 1)) / 0.1 / (DEMO.draft_ms(k) + DEMO.verify_ms(k))
                    for k in range(1, 17))  # fmt: skip
    for seed in range(5):
        run = simulate(
            AutoK(), lambda made: 0.03 if made < 200 else 0.9, 600, np.random.default_rng(seed)
        )
        switch = run.step_at_token(200)
        assert run.steps[switch - 20 : switch].count(OFF) >= 15, seed  # off before the change
        back = next(i for i in range(switch, len(run.steps)) if run.steps[i] != OFF and all(
            s != OFF for s in run.steps[i : i + 10]))  # fmt: skip
        assert sum(run.tokens[switch:back]) <= 3 * AutoK.probe_after + 10, (seed, back - switch)
        assert run.pace(back) >= 0.85 * best_pace, (seed, run.pace(back), best_pace)


def test_a_predictable_text_is_probed_sooner() -> None:
    """While off, a probe comes after ``probe_after`` plain steps, or after
    ``match_probe_after`` once the drafter finds the text predictable (a long n-gram match)."""
    for predictable, due in ((False, AutoK.probe_after), (True, AutoK.match_probe_after)):
        auto = AutoK()
        for _ in range(40):  # rejected rounds until speculation goes off
            if (k := auto.choose(1, predictable=predictable)) == OFF:
                break
            auto.update(k, 0, DEMO.draft_ms(k), DEMO.verify_ms(k))
        assert auto.off
        plain = 1
        auto.record_plain(DEMO.plain_ms)
        while (k := auto.choose(1, predictable=predictable)) == OFF:
            auto.record_plain(DEMO.plain_ms)
            plain += 1
        assert plain == due and k >= 1


def test_the_measured_plain_step_decides() -> None:
    """The same rounds (acceptance 0.2 at K=1..2): off when plain steps measure fast, on when
    they measure slow (the verify pass's fixed cost is the plain step here)."""
    chosen = {}
    for plain_ms in (5.0, 30.0):
        auto = AutoK()
        auto.record_plain(plain_ms)
        rng = np.random.default_rng(2)
        for _ in range(30):
            k = auto.choose()
            if k == OFF:
                auto.record_plain(plain_ms)
                continue
            accepted = int(rng.random() < 0.2)
            auto.update(k, min(accepted, k), DEMO.draft_ms(k), DEMO.verify_ms(k))
        chosen[plain_ms] = auto.off
    assert chosen == {5.0: True, 30.0: False}


def test_too_few_judged_drafts_never_turn_speculation_off() -> None:
    """Before ``off_evidence`` drafts were judged, a run of rejections is no evidence."""
    auto = AutoK(successes=0.0)
    auto.record_plain(1.0)  # plain looks far faster than any round
    for _ in range(AutoK.off_evidence - 1):
        k = auto.choose()
        assert k != OFF
        auto.update(k, 0, DEMO.draft_ms(k), DEMO.verify_ms(k))
    auto.update(1, 0, DEMO.draft_ms(1), DEMO.verify_ms(1))
    assert auto.choose() == OFF


def test_a_carried_over_chooser_that_was_off_probes_first() -> None:
    auto = AutoK()
    simulate(auto, lambda _: 0.0, 60, np.random.default_rng(3))
    assert auto.off
    carried = auto.carried_over()
    assert carried.choose() != OFF  # a new reply's text: one probe round first
    assert carried.plain_ms() == auto.plain_ms()
    on = AutoK()
    simulate(on, lambda _: 0.8, 60, np.random.default_rng(3))
    assert not on.off and not on.carried_over().off
