"""Heuristic assignment for fleets too large for the exact solver.

For a fixed set of members and last device the best layer counts are easy: for latency, give
every member one layer and the rest to the fastest members first, up to their memory (exact,
since each layer costs the member's ms per layer); for throughput, bisect the smallest bottleneck
``tau`` for which per-member caps ``(tau - lm_head) / ms`` admit such a fill whose time per token
is within ``S * tau``. The member set is searched greedily: every prefix of the devices that can
hold a layer, sorted by ``(ms_per_layer + hops per layer, name)``, then single removals and
additions (first improvement) while they improve the score.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from fleetgui.planner.problem import Choice, Problem

log = logging.getLogger(__name__)

_LAST_CANDIDATES = 3  # lm_head placements tried per member set
_SEARCH_STEPS = 24  # bisection steps for the throughput bottleneck
_MAX_ROUNDS = 16  # improvement rounds


class _Search:
    """Allocation for fixed member sets, with the problem's fastest-first order computed once."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.fastest = sorted(range(len(problem.devices)), key=lambda d: (problem.ms[d], d))

    def fill(self, members: set[int], caps: dict[int, int]) -> dict[int, int] | None:
        """One layer per member, the rest to the fastest members within ``caps``."""
        layers = self.problem.n_layers
        if len(members) > layers or any(caps[d] < 1 for d in members):
            return None
        if sum(caps[d] for d in members) < layers:
            return None
        counts = dict.fromkeys(members, 1)
        left = layers - len(members)
        for d in self.fastest:
            if not left:
                break
            if d in members:
                extra = min(left, caps[d] - 1)
                counts[d] += extra
                left -= extra
        return counts

    def choice(self, counts: dict[int, int], last: int) -> Choice:
        return Choice(tuple(counts.get(d, 0) for d in range(len(self.problem.devices))), last)

    def score(self, counts: dict[int, int], last: int) -> tuple[float, float]:
        """``Problem.score`` over the members only (the hot path of the search)."""
        problem = self.problem
        token = problem.head_ms[last]
        worst = 0.0
        for d, n in counts.items():
            compute = n * problem.ms[d]
            token += compute + problem.join_ms[d]
            if d == last:
                compute += problem.head_ms[d]
            worst = max(worst, compute, problem.busy_ms[d])
        if problem.config.objective == "throughput":
            return max(token / problem.streams, worst), token
        return token, token

    def allocate(self, members: set[int], last: int) -> Choice | None:
        problem = self.problem
        caps = {d: problem.max_layers(d, d == last) for d in members}
        best = self.fill(members, caps)
        if best is None:
            return None
        best_score = self.score(best, last)
        if problem.config.objective == "throughput":
            low = max(problem.busy_ms[d] for d in members)
            high = best_score[0]
            for _ in range(_SEARCH_STEPS):
                if high - low <= 1e-9 * high:
                    break
                tau = (low + high) / 2
                limited = {
                    d: min(caps[d], int((tau - (problem.head_ms[d] if d == last else 0.0)) / ms))
                    for d in members
                    for ms in (problem.ms[d],)
                }
                trial = self.fill(members, limited)
                trial_score = self.score(trial, last) if trial is not None else None
                if trial is not None and trial_score is not None and trial_score[0] <= tau:
                    high = trial_score[0]
                    if trial_score < best_score:
                        best, best_score = trial, trial_score
                else:
                    low = tau
        return self.choice(best, last)

    def best_for(self, members: set[int]) -> Choice | None:
        """The best choice found with exactly ``members`` taking part."""
        problem = self.problem
        if members == {0}:
            return self.allocate(members, 0)
        workers = sorted(
            (d for d in members if d != 0 and problem.max_layers(d, True) >= 1),
            key=lambda d: (problem.head_ms[d], d),
        )
        best: Choice | None = None
        for last in workers[:_LAST_CANDIDATES]:
            choice = self.allocate(members, last)
            if better(problem, choice, best):
                best = choice
        return best


def better(problem: Problem, a: Choice | None, b: Choice | None) -> bool:
    return a is not None and (b is None or problem.score(a) < problem.score(b))


def with_member(problem: Problem, choice: Choice, device: int) -> Choice | None:
    """The best choice found when ``device`` joins ``choice``'s members (to explain leaving it
    out), or None if that does not fit."""
    return _Search(problem).best_for(set(choice.members) | {device})


def solve_heuristic(problem: Problem, *, force: int | None = None) -> Choice | None:
    """A good feasible choice (not always optimal), or None if none was found."""
    search = _Search(problem)
    count = len(problem.devices)
    per_layer = problem.n_layers / max(1, count)
    usable = [d for d in range(1, count) if problem.max_layers(d, False) >= 1]
    order = sorted(
        usable,
        key=lambda d: (problem.ms[d] + problem.join_ms[d] / per_layer, problem.devices[d].name),
    )
    required = {0} | ({force} if force is not None else set())

    def members_of(items: Iterable[int]) -> set[int]:
        return set(items) | required

    best: Choice | None = None
    for k in range(len(order) + 1):
        choice = search.best_for(members_of(order[:k]))
        if better(problem, choice, best):
            best = choice
    for _ in range(_MAX_ROUNDS):
        if best is None:
            break
        current = set(best.members)
        moves: Sequence[set[int]] = [current - {d} for d in sorted(current - required)]
        moves = [*moves, *(current | {d} for d in order if d not in current)]
        for move in moves:
            choice = search.best_for(members_of(move))
            if better(problem, choice, best):
                best = choice
                break
        else:
            break
    return best
