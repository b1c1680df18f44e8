"""K auto: how many draft tokens a speculative round proposes.

:class:`AutoK` chooses K (or a plain step) from the measured acceptance rate and the measured
cost of a round; :class:`AutoKMemory` hands one stream's estimates to the next.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

K_MIN, K_MAX = 1, 16
OFF = 0  # what K auto chooses for a plain decoding step (speculation does not pay now)
MIN_SLOPE = 0.05  # the least a draft adds to a round, as a share of an average round
UNBRAKED_ALPHA = 0.99  # the acceptance rate a lone stream's choice believes at most


def check_k(k: int) -> int:
    if not K_MIN <= k <= K_MAX:
        raise ValueError(f"K must be between {K_MIN} and {K_MAX} (or auto), got {k}")
    return k


@dataclass
class AutoK:
    """Chooses K from the measured acceptance rate and the measured cost of a round.

    Expected tokens per round with per-token acceptance ``a`` is (1 - a^(K+1)) / (1 - a). A
    round (the draft's K proposals plus one verify pass of K+1 positions) costs what rounds at
    that K cost so far (a moving average), and at a K not run yet, the line through the Ks that
    were. K maximises tokens per millisecond.

    The draft's time counts per round, not per draft (a proposal has a fixed part, which made
    small Ks look dear per draft). ``a`` is estimated as a round sees it: each accepted draft a
    success and the first rejected one a failure, so ``a`` = successes / trials (moving
    averages); accepted / K would underestimate it the more the larger K is.

    With several streams generating, two brakes hold K: it moves only when the best K promises
    ``switch_gain`` more tokens per ms than the current one, and ``a`` counts as at most
    ``max_alpha``. Each stream's round time includes waiting for the other streams' rounds,
    which makes long rounds look cheap to each stream while they slow the others. A lone stream
    is not braked. A stream's first round is not timed (it warms a fresh state up), a lone
    stream with one K timed runs its next round 2 Ks away to measure the line's slope, and each
    K-auto stream starts from the last one's estimates (:meth:`carried_over`), so a chat's next
    reply does not learn the pair again. What each of these was measured to gain:
    docs/design-measurements.md.
    """

    initial_k: int = 4
    successes: float = 0.7  # accepted drafts per round (moving average)
    trials: float = 1.0  # drafts judged per round: accepted + the rejected one (moving average)
    smoothing: float = 0.2
    switch_gain: float = 0.1  # K changes only for this much more expected tokens per ms
    max_alpha: float = 0.9  # the highest acceptance rate the choice believes
    off_gain: float = 0.1  # speculation goes off when plain steps promise this much more
    off_window: int = 32  # ... judged by the acceptance over this many judged drafts, too
    off_evidence: int = 8  # ... once at least this many were judged
    probe_after: int = 16  # plain steps while off before a probe round
    match_probe_after: int = 2  # ... or this many when the drafter finds the text predictable
    _round: dict[int, float] = field(default_factory=dict)  # K -> draft + verify ms (EMA)
    _work: dict[int, float] = field(default_factory=dict)  # K -> draft + verify compute (EMA)
    _timed: dict[int, int] = field(default_factory=dict)  # K -> rounds timed at it
    _verify: dict[int, float] = field(default_factory=dict)  # K -> verify ms (EMA)
    _k: int | None = None  # the K chosen last (while off: the best K when it went off)
    _plain: float | None = None  # a plain decoding step's ms (EMA); None: none timed yet
    _off: bool = False  # speculation is off: plain steps until a probe
    _off_steps: int = 0  # plain steps since speculation went off
    _recent: collections.deque[tuple[int, int]] = field(default_factory=collections.deque)
    _recent_accepted: int = 0  # accepted drafts in _recent's rounds
    _recent_judged: int = 0  # judged drafts in _recent's rounds

    @property
    def off(self) -> bool:
        """Whether speculation is off (:meth:`choose` returns :data:`OFF` until a probe)."""
        return self._off

    @property
    def alpha(self) -> float:
        """Estimated per-token acceptance rate."""
        return self.successes / self.trials

    def carried_over(self) -> AutoK:
        """A chooser for the pipeline's next stream that starts from this one's estimates:
        its round costs, acceptance rate and K (a chat's next reply runs on the same pair).
        If speculation was off, the next stream probes it in its first round: its text is new."""
        return replace(
            self,
            _round=dict(self._round),
            _work=dict(self._work),
            _timed=dict(self._timed),
            _verify=dict(self._verify),
            _recent=collections.deque(self._recent),
            _off_steps=self.probe_after if self._off else 0,
        )

    def update(
        self,
        k: int,
        accepted: int,
        draft_ms: float,
        verify_ms: float,
        *,
        timed: bool = True,
        compute_ms: float | None = None,
    ) -> None:
        """Record a round; ``timed=False``: its acceptance only (a stream's first round costs
        more than the rest, ~25 % on the demo pair, and would mark its K as dear).
        ``compute_ms``: the verify pass's compute on the stages, without the network and the
        waiting that ``verify_ms`` includes (None: take ``verify_ms``)."""
        s = self.smoothing
        judged = accepted + (1 if accepted < k else 0)
        self.successes = (1 - s) * self.successes + s * accepted
        self.trials = (1 - s) * self.trials + s * judged
        self._recent.append((accepted, judged))
        self._recent_accepted += accepted
        self._recent_judged += judged
        while self._recent_judged - self._recent[0][1] >= self.off_window:
            old_accepted, old_judged = self._recent.popleft()
            self._recent_accepted -= old_accepted
            self._recent_judged -= old_judged
        if not timed:
            return
        ms = draft_ms + verify_ms
        old = self._round.get(k)
        self._round[k] = ms if old is None else (1 - s) * old + s * ms
        work = draft_ms + (verify_ms if compute_ms is None else compute_ms)
        old = self._work.get(k)
        self._work[k] = work if old is None else (1 - s) * old + s * work
        self._timed[k] = self._timed.get(k, 0) + 1
        old = self._verify.get(k)
        self._verify[k] = verify_ms if old is None else (1 - s) * old + s * verify_ms

    def record_plain(self, ms: float) -> None:
        """Record a plain decoding step (one token, no drafts) and its time."""
        s = self.smoothing
        self._plain = ms if self._plain is None else (1 - s) * self._plain + s * ms
        if self._off:
            self._off_steps += 1

    def round_ms(self, k: int) -> float:
        """A round's expected time at ``k`` (once a round was recorded)."""
        return self._round_costs()[k - K_MIN]

    def plain_ms(self) -> float:
        """A plain step's expected time (once a round or a plain step was recorded): measured,
        or before any plain step ran, the cheapest verify pass so far. That one checked K + 1
        positions, so it overestimates a plain step a little: speculation goes off on the
        estimate only when even it says so. (The round cost line at K=0 still held the draft's
        fixed cost: with it, a draft that never agreed never went off on the demo's costs.)"""
        if self._plain is not None:
            return self._plain
        return max(min(self._verify.values(), default=1e-3), 1e-3)

    def _round_costs(self) -> list[float]:
        """The expected round time for every K from :data:`K_MIN` to :data:`K_MAX`: measured
        where that K ran at least twice, else on the line through the Ks that ran (fitted once).
        One round is no measure: a lone stream whose draft never agreed ran K=1 once, slowly
        (a busy moment), and its K stayed at 4 for good although K=1 made the cheapest rounds
        (``tests/test_runtime_exact.py`` failed so in 3 of 13 runs here and once in CI)."""
        points = sorted(self._round.items())
        if len(points) >= 2:
            ks = np.array([p[0] for p in points], dtype=float)
            ms = np.array([p[1] for p in points], dtype=float)
            slope, intercept = (float(v) for v in np.polyfit(ks, ms, 1))
            # more drafts never make a round cheaper: a slow round at a small K (it waited
            # behind another stream) tilted the line down, and K=16 looked cheapest. The floor
            # is a share of the round's work (drafts, the stages' compute), not of its time: a
            # slow network's wait made the floor many times what a draft really adds
            floor = MIN_SLOPE * float(
                np.mean([self._work.get(k, self._round[k]) for k, _ in points])
            )
            if slope < floor:
                slope = floor
                intercept = float(ms.mean()) - slope * float(ks.mean())
        else:  # one K so far: a draft adds a pass, the verify a position
            ((base_k, base_ms),) = points
            slope, intercept = 0.1 * base_ms, base_ms * (1 - 0.1 * base_k)
        return [
            self._round[k] if self._timed.get(k, 0) >= 2 else max(intercept + slope * k, 1e-3)
            for k in range(K_MIN, K_MAX + 1)
        ]

    def choose(self, streams: int = 1, *, predictable: bool = False) -> int:
        """K for the next round of a stream, or :data:`OFF` for a plain decoding step;
        ``streams``: how many streams are generating on the pipeline now (with more than one,
        the brakes apply); ``predictable``: the drafter finds the text predictable now (while
        off, a probe round comes sooner).

        Speculation goes off when a plain step is expected to make ``off_gain`` more tokens per
        ms than a round at the best K (see :meth:`_plain_pays`). While off, a probe round of
        one draft (the cheapest) runs after ``probe_after`` plain steps (``match_probe_after``
        when ``predictable``); its outcome decides whether speculation comes back. Without
        this, a draft that agreed 0-7 % of the time held K at 1, slower than plain decoding."""
        if self._off:
            due = self.probe_after if not predictable else self.match_probe_after
            if self._off_steps < due:
                return OFF
            self._off = False  # one probe round; the choice after it judges with its outcome
            return K_MIN
        braked = streams > 1
        current = self.initial_k if self._k is None else self._k
        if not braked and len(self._round) == 1:
            # one K timed: the line's slope would be a guess that can hold K there for good;
            # one round two Ks away measures it (with other streams, waiting muddies it)
            return current + 2 if current + 2 <= K_MAX else current - 2
        if self._round:
            cap, gain = (self.max_alpha, self.switch_gain) if braked else (UNBRAKED_ALPHA, 0.0)
            costs = self._round_costs()  # one fit per round: np.polyfit per K cost 0.6 ms a round
            rates = _rates(min(max(self.alpha, 0.01), cap), costs)
            best = max(range(len(rates)), key=rates.__getitem__)
            if self._plain_pays(rates[best], cap, costs):
                self._k, self._off, self._off_steps = best + K_MIN, True, 0
                return OFF
            if rates[best] > (1 + gain) * rates[current - K_MIN]:
                current = best + K_MIN
        self._k = current
        return current

    def _plain_pays(self, best_rate: float, cap: float, costs: list[float]) -> bool:
        """Whether a plain step makes ``off_gain`` more tokens per ms than the best K, both by
        the moving acceptance estimate (``best_rate``) and by the acceptance pooled over the
        last ``off_window`` judged drafts (at least ``off_evidence``). The moving estimate
        alone, ~5 rounds long, read a draft accepted at 0.3 (14 % faster than plain in
        ``tests/test_auto_k.py``'s costs) as one at 0.04 often enough to turn it off."""
        if self._recent_judged < self.off_evidence:
            return False
        plain_rate = 1 / self.plain_ms() / (1 + self.off_gain)
        if plain_rate <= best_rate:
            return False
        pooled = min(max(self._recent_accepted / self._recent_judged, 0.01), cap)
        return plain_rate > max(_rates(pooled, costs))


def _rates(a: float, costs: list[float]) -> list[float]:
    """Expected tokens per ms of a round at each K from :data:`K_MIN`, for acceptance ``a``
    and the rounds' ``costs``."""
    return [
        (1 - a ** (k + 1)) / (1 - a) / ms
        for k, ms in zip(range(K_MIN, K_MAX + 1), costs, strict=True)
    ]


class AutoKMemory:
    """The K chooser of the last K-auto stream to finish, per maker of choosers: the next
    stream that maker serves starts from its estimates (a chat's next reply runs on the same
    pair, and should not learn its costs again)."""

    def __init__(self) -> None:
        self._last: dict[Callable[[], AutoK], AutoK] = {}

    def new_chooser(self, make: Callable[[], AutoK]) -> AutoK:
        """The last finished stream's K chooser carried over, or a new one from ``make``."""
        previous = self._last.get(make)
        return previous.carried_over() if previous is not None else make()

    def remember(self, make: Callable[[], AutoK], chooser: AutoK) -> None:
        """Keep ``chooser`` (a finished stream's) for the next stream ``make`` serves."""
        self._last[make] = chooser
