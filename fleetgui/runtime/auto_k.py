"""K auto: how many draft tokens a speculative round proposes.

:class:`AutoK` chooses K (or a plain step) from the measured acceptance rate and the measured
cost of a round; :class:`AutoKMemory` hands one stream's estimates to the next.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from fleetgui.generation_config import K_MAX, K_MIN

OFF = 0  # what K auto chooses for a plain decoding step (speculation does not pay now)
MIN_SLOPE = 0.05  # the least a draft adds to a round, as a share of an average round
UNBRAKED_ALPHA = 0.99  # the acceptance rate a lone stream's choice believes at most


@dataclass
class RecentAcceptance:
    """Accepted and judged drafts of the last rounds (about ``AutoK.off_window`` judged): the
    pooled acceptance that confirms the moving estimate before speculation goes off."""

    rounds: collections.deque[tuple[int, int]] = field(default_factory=collections.deque)
    accepted: int = 0
    judged: int = 0

    @property
    def rate(self) -> float:
        return self.accepted / self.judged if self.judged else 0.0

    def add(self, accepted: int, judged: int, window: int) -> None:
        """Count a round's drafts and drop the oldest rounds past ``window`` judged drafts."""
        self.rounds.append((accepted, judged))
        self.accepted += accepted
        self.judged += judged
        while self.judged - self.rounds[0][1] >= window:
            old_accepted, old_judged = self.rounds.popleft()
            self.accepted -= old_accepted
            self.judged -= old_judged

    def copy(self) -> RecentAcceptance:
        return replace(self, rounds=collections.deque(self.rounds))


@dataclass
class AutoK:
    """Chooses K from the measured acceptance rate and the measured cost of a round.

    Expected tokens per round with per-token acceptance ``a`` is (1 - a^(K+1)) / (1 - a). A
    round (the draft's K proposals plus one verify pass of K+1 positions) costs what the line
    through the Ks run so far says (each K's moving average, weighted by its rounds), and K
    maximises tokens per millisecond. The line never prices a draft below one draft pass, which
    the rounds measure: a draft whose pass is dear and whose drafts past the first rarely pay
    stays at K=1, however the noise of the round times falls.

    The draft's time counts per round, not per draft (a proposal has a fixed part, which made
    small Ks look dear per draft). ``a`` is estimated as a round sees it: each accepted draft a
    success and the first rejected one a failure, so ``a`` = successes / trials (moving
    averages); accepted / K would underestimate it the more the larger K is.

    With several streams generating, two brakes hold K: it moves only when the best K promises
    ``switch_gain`` more tokens per ms than the current one, and ``a`` counts as at most
    ``max_alpha``. Each stream's round time includes waiting for the other streams' rounds,
    which makes long rounds look cheap to each stream while they slow the others. A lone stream
    is not braked. A stream starts at a small K and its first round is not timed (it warms a
    fresh state up); a lone stream with one K timed runs its next round at another K to measure
    the line's slope (see :meth:`_probe`), and runs the runner-up K once when its time is older
    than ``recheck`` rounds (the machine's load comes and goes); each K-auto stream starts from
    the last one's estimates (:meth:`carried_over`), so a chat's next reply does not learn the
    pair again. What each of these was measured to gain: docs/design-measurements.md.
    """

    initial_k: int = 2  # a stream's first K: cheap if drafts do not pay, left soon if they do
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
    recheck: int = 16  # timed rounds after which a K's time is stale (a lone stream re-measures)
    _round: dict[int, float] = field(default_factory=dict)  # K -> draft + verify ms (EMA)
    _work: dict[int, float] = field(default_factory=dict)  # K -> draft + verify compute (EMA)
    _timed: dict[int, int] = field(default_factory=dict)  # K -> rounds timed at it
    _verify: dict[int, float] = field(default_factory=dict)  # K -> verify ms (EMA)
    _last_timed: dict[int, int] = field(default_factory=dict)  # K -> _rounds when last timed
    _rounds: int = 0  # rounds timed
    _judged_rounds: int = 0  # rounds in the acceptance estimate (the first few: a plain mean)
    _recheck_at: int = 0  # _rounds from which a lone stream looks for a stale runner-up
    _pass: float | None = None  # one draft pass's ms (EMA): what one more draft costs at least
    _k: int | None = None  # the K chosen last (while off: the best K when it went off)
    _plain: float | None = None  # a plain decoding step's ms (EMA); None: none timed yet
    _off: bool = False  # speculation is off: plain steps until a probe
    _off_steps: int = 0  # plain steps since speculation went off
    _recent: RecentAcceptance = field(default_factory=RecentAcceptance)

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
            _last_timed=dict(self._last_timed),
            _recent=self._recent.copy(),
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
        pass_ms: float | None = None,
    ) -> None:
        """Record a round; ``timed=False``: its acceptance only (a stream's first round costs
        more than the rest, ~25 % on the demo pair, and would mark its K as dear).
        ``draft_ms``: the proposal's wall time; ``compute_ms``: the verify pass's compute on
        the stages, without the network and the waiting that ``verify_ms`` includes (None: take
        ``verify_ms``); ``pass_ms``: one draft pass's time, what one more draft adds at least
        (None: not timed; ``draft_ms / k`` would overstate it by a proposal's fixed part)."""
        # the first rounds weigh as much as the initial guess (it counts as one round), so a
        # draft that rarely agrees is not judged by that guess of 0.7 for several rounds
        s = max(self.smoothing, 1 / (self._judged_rounds + 2))
        self._judged_rounds += 1
        judged = accepted + (1 if accepted < k else 0)
        self.successes = (1 - s) * self.successes + s * accepted
        self.trials = (1 - s) * self.trials + s * judged
        s = self.smoothing
        self._recent.add(accepted, judged, self.off_window)
        if not timed:
            return
        if pass_ms is not None:
            self._pass = _ema(self._pass, pass_ms, s)
        if self._rounds - self._last_timed.get(k, self._rounds) > self.recheck:
            for estimates in (self._round, self._work, self._verify, self._timed):
                estimates.pop(k, None)  # stale: the new time replaces it
        self._rounds += 1
        self._last_timed[k] = self._rounds
        self._round[k] = _ema(self._round.get(k), draft_ms + verify_ms, s)
        work = draft_ms + (verify_ms if compute_ms is None else compute_ms)
        self._work[k] = _ema(self._work.get(k), work, s)
        self._verify[k] = _ema(self._verify.get(k), verify_ms, s)
        self._timed[k] = self._timed.get(k, 0) + 1

    def record_plain(self, ms: float) -> None:
        """Record a plain decoding step (one token, no drafts) and its time."""
        self._plain = _ema(self._plain, ms, self.smoothing)
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
        """The expected round time for every K from :data:`K_MIN` to :data:`K_MAX`, on the line
        through the Ks that ran (fitted once), each weighted by its rounds (up to a moving
        average's span). No K is priced by its own average alone: two neighbouring Ks differ
        by one draft, less than a busy moment adds to a round, and a K whose few rounds came
        out cheap held K there where one draft less ran faster."""
        points = sorted(self._round.items())
        ks = np.array([k for k, _ in points], dtype=float)
        ms = np.array([v for _, v in points], dtype=float)
        weights = np.array([min(self._timed[k], 1 / self.smoothing) for k, _ in points])
        # more drafts never make a round cheaper, and each costs at least its draft pass: a
        # slow round at a small K (it waited behind another stream) tilted the line down, and
        # K=16 looked cheapest. The other floor is a share of the round's work (drafts, the
        # stages' compute), not of its time: a slow network's wait made that floor many
        # times what a draft really adds
        floor = max(
            MIN_SLOPE * float(np.mean([self._work.get(k, v) for k, v in points])),
            self._pass or 0.0,
        )
        if len(points) >= 2:
            slope, intercept = (float(v) for v in np.polyfit(ks, ms, 1, w=np.sqrt(weights)))
        else:  # one K so far: a draft adds a pass, the verify a position
            slope, intercept = 0.1 * float(ms[0]), float(ms[0]) * (1 - 0.1 * float(ks[0]))
        if slope < floor:
            slope = floor
            intercept = float(
                np.average(ms, weights=weights) - slope * np.average(ks, weights=weights)
            )
        return [max(intercept + slope * k, 1e-3) for k in range(K_MIN, K_MAX + 1)]

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
        if self._round:
            cap, gain = (self.max_alpha, self.switch_gain) if braked else (UNBRAKED_ALPHA, 0.0)
            a = min(max(self.alpha, 0.01), cap)
            if not braked and len(self._round) == 1 and current in self._round:
                # one K timed: the line's slope would be a guess that can hold K there for
                # good; one round at another K measures it (with other streams, waiting
                # muddies it)
                probe = self._probe(a, current)
                if probe != current:
                    return probe
            costs = self._round_costs()  # one fit per round: np.polyfit per K cost 0.6 ms
            rates = _rates(a, costs)
            ranked = sorted(range(len(rates)), key=rates.__getitem__, reverse=True)
            best = ranked[0]
            if self._plain_pays(rates[best], cap, costs):
                self._k, self._off, self._off_steps = best + K_MIN, True, 0
                return OFF
            if rates[best] > (1 + gain) * rates[current - K_MIN]:
                current = best + K_MIN
            runner_up = ranked[1] + K_MIN
            if not braked and self._stale(runner_up):
                self._k = current  # one round measures the runner-up; the next comes back
                return runner_up
        self._k = current
        return current

    def _stale(self, k: int) -> bool:
        """Whether a lone stream's next round should measure ``k``, the runner-up, as it was
        not timed in the last ``recheck`` rounds (at most one such round in ``recheck``)."""
        if self._rounds < max(self._recheck_at, self.recheck):
            return False
        if self._rounds - self._last_timed.get(k, 0) <= self.recheck:
            return False
        self._recheck_at = self._rounds + self.recheck
        return True

    def _probe(self, a: float, current: int) -> int:
        """Where a lone stream measures the cost line's slope from ``current``, its one K
        timed: up to 2 Ks higher if a higher K would pay even if its extra drafts cost only
        their draft passes (its verify checks more positions too, so they cost at least
        that), else 2 lower. Always going higher cost a draft that rarely agrees its dearest
        rounds, at the start of every reply."""
        base = self._round[current]
        extra = self._pass or 0.0
        best = max(
            range(K_MIN, K_MAX + 1),
            key=lambda k: _expected(a, k) / max(base + (k - current) * extra, 1e-3),
        )
        if best > current:
            return min(current + 2, best)
        return max(current - 2, K_MIN)

    def _plain_pays(self, best_rate: float, cap: float, costs: list[float]) -> bool:
        """Whether a plain step makes ``off_gain`` more tokens per ms than the best K, both by
        the moving acceptance estimate (``best_rate``) and by the acceptance pooled over the
        last ``off_window`` judged drafts (at least ``off_evidence``). The moving estimate
        alone, ~5 rounds long, read a draft accepted at 0.3 (14 % faster than plain in
        ``tests/runtime/test_auto_k.py``'s costs) as one at 0.04 often enough to turn it off."""
        if self._recent.judged < self.off_evidence:
            return False
        plain_rate = 1 / self.plain_ms() / (1 + self.off_gain)
        if plain_rate <= best_rate:
            return False
        pooled = min(max(self._recent.rate, 0.01), cap)
        return plain_rate > max(_rates(pooled, costs))


def _ema(old: float | None, new: float, s: float) -> float:
    """A moving average ``old`` (None: none yet) updated with ``new`` at smoothing ``s``."""
    return new if old is None else (1 - s) * old + s * new


def _expected(a: float, k: int) -> float:
    """Expected tokens of a round at ``k`` for per-token acceptance ``a`` (< 1)."""
    return (1 - a ** (k + 1)) / (1 - a)


def _rates(a: float, costs: list[float]) -> list[float]:
    """Expected tokens per ms of a round at each K from :data:`K_MIN` on, for acceptance ``a``
    and the rounds' ``costs`` (one a K)."""
    return [_expected(a, k) / ms for k, ms in enumerate(costs, start=K_MIN)]


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
