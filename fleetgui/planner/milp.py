"""Exact assignment by mixed-integer linear programming (``scipy.optimize.milp``, HiGHS).

Variables per device d (0 is the coordinator): ``n_d`` layers (integer), ``y_d`` takes part and
``z_d`` is last (binary). With ``m`` ms per layer, ``h`` the lm_head time, ``j`` the hops a member
adds per token, ``R`` the layers that fit on a device and ``H`` the lm_head's memory in layers::

    minimise  T = sum_d (m_d n_d + j_d y_d + h_d z_d)      time per token of one user
    sum_d n_d = L                      every layer placed once
    y_d <= n_d <= min(L, R_d) y_d      a member runs >= 1 layer; others none
    n_d + H z_d <= R_d y_d             memory (the last device also holds the lm_head)
    sum_d z_d = 1,  z_d <= y_d         one last device, a member
    z_0 + y_d <= 1  (d > 0)            the coordinator is last only when alone
    y_0 = 1                            the coordinator holds stage 0

Because hops only depend on which devices take part (see :mod:`fleetgui.planner.cost`), ring
order needs no variables: contiguous ranges follow from the counts and the order.

Throughput minimises ``max(T / S, B)``, ``B`` the bottleneck. Written directly as a MILP
(``tau >= T / S``, ``tau >= m_d n_d + h_d z_d``, ...) its relaxation is weak and 16 devices take
seconds, so it is solved parametrically instead: ``B`` is one of finitely many values ``c``
(``k m_d``, ``k m_d + h_d``, a link's busy time). Let ``F(c)`` be the latency MILP above with
``m_d n_d + h_d z_d <= c`` and links busier than ``c`` excluded; ``F`` does not increase with
``c``, so a bisection finds the smallest candidate ``c*`` with ``F(c*) <= S c*``, and the optimum is
the better of ``c*`` and its predecessor ``c'`` (score ``F(c') / S``), ties going to the smaller
``T``. That is at most about log2(2 D L) latency MILPs; fewer, because a feasible ``c`` also
proves every candidate from its solution's ``max(B, T / S)`` up feasible.
"""

from __future__ import annotations

import bisect
import logging
import math
from typing import Any

import numpy as np

from fleetgui.planner.problem import Choice, Problem

log = logging.getLogger(__name__)

_GAP = 1e-9  # relative MIP gap: solve to optimality
_EPS = 1e-9


class _Rows:
    """Constraint rows ``lower <= row @ x <= upper`` of one MILP."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows: list[np.ndarray] = []
        self.lower: list[float] = []
        self.upper: list[float] = []

    def add(self, coefficients: dict[int, float], lower: float, upper: float) -> None:
        row = np.zeros(self.size)
        for index, value in coefficients.items():
            row[index] += value
        self.rows.append(row)
        self.lower.append(lower)
        self.upper.append(upper)

    def constraint(self) -> Any:
        from scipy.optimize import LinearConstraint

        return LinearConstraint(np.array(self.rows), np.array(self.lower), np.array(self.upper))


def _latency(
    problem: Problem, *, force: int | None, bottleneck: float | None
) -> tuple[Choice, float] | None:
    """The choice of least time per token (and that time), with every device's compute and link
    within ``bottleneck`` if given; None if nothing fits."""
    from scipy.optimize import Bounds, milp

    count, layers = len(problem.devices), problem.n_layers
    n_, y_, z_ = 0, count, 2 * count
    rows = _Rows(3 * count)
    rows.add({n_ + d: 1.0 for d in range(count)}, layers, layers)
    rows.add({z_ + d: 1.0 for d in range(count)}, 1, 1)
    lb, ub = np.zeros(3 * count), np.ones(3 * count)
    for d in range(count):
        cap = min(layers, max(0, math.floor(problem.room[d] + _EPS)))
        if bottleneck is not None:
            cap = min(cap, max(0, math.floor(bottleneck / problem.ms[d] + _EPS)))
            if problem.busy_ms[d] > bottleneck * (1 + _EPS):
                cap = 0
            rows.add(
                {n_ + d: problem.ms[d], z_ + d: problem.head_ms[d]},
                -math.inf,
                bottleneck * (1 + _EPS),
            )
        ub[n_ + d] = cap
        rows.add({n_ + d: 1.0, y_ + d: -1.0}, 0, math.inf)
        rows.add({n_ + d: 1.0, y_ + d: -float(cap)}, -math.inf, 0)
        rows.add(
            {n_ + d: 1.0, z_ + d: problem.head_room, y_ + d: -problem.room[d]}, -math.inf, _EPS
        )
        rows.add({z_ + d: 1.0, y_ + d: -1.0}, -math.inf, 0)
        if d > 0:
            rows.add({z_: 1.0, y_ + d: 1.0}, -math.inf, 1)
    lb[y_] = 1.0  # the coordinator takes part
    if force is not None:
        lb[y_ + force] = 1.0
    if np.any(lb > ub):
        return None
    objective = np.concatenate([problem.ms, problem.join_ms, problem.head_ms])
    result = milp(
        objective,
        constraints=rows.constraint(),
        integrality=np.ones(3 * count),
        bounds=Bounds(lb, ub),
        options={"mip_rel_gap": _GAP, "time_limit": problem.config.time_limit_s},
    )
    if result.x is None:
        log.debug("MILP: %s", result.message)
        return None
    x = np.rint(result.x).astype(int)
    counts = tuple(int(x[n_ + d]) if x[y_ + d] else 0 for d in range(count))
    choice = Choice(counts, int(np.argmax(x[z_ : z_ + count])))
    if not problem.feasible(choice):  # numerical trouble: should not happen
        log.warning("MILP returned an infeasible assignment %s; ignoring it", choice)
        return None
    return choice, problem.token_ms(choice)


def bottleneck_candidates(problem: Problem) -> list[float]:
    """Every value the bottleneck of a choice can take, sorted."""
    values = {busy for busy in problem.busy_ms if busy > 0}
    for d, ms in enumerate(problem.ms):
        for k in range(1, problem.max_layers(d, False) + 1):
            values.add(k * ms)
            values.add(k * ms + problem.head_ms[d])
    return sorted(values)


def _throughput(problem: Problem, force: int | None) -> Choice | None:
    candidates = bottleneck_candidates(problem)
    streams = problem.streams
    memo: dict[int, tuple[Choice, float] | None] = {}

    def at(index: int) -> tuple[Choice, float] | None:
        if index not in memo:
            memo[index] = _latency(problem, force=force, bottleneck=candidates[index])
        return memo[index]

    def good(index: int) -> bool:
        found = at(index)
        return found is not None and found[1] <= streams * candidates[index] * (1 + _EPS)

    if not candidates or at(len(candidates) - 1) is None:
        return None
    low, high = 0, len(candidates) - 1  # F(c) <= S c holds at the largest candidate
    if not good(high):
        return at(high)[0]  # type: ignore[index]  # latency-bound everywhere: least T wins
    while low < high:
        middle = (low + high) // 2
        if good(middle):
            # The choice found also works for every candidate >= max(its B, T / S), with the
            # same T: jump down to the first of those.
            choice, token = memo[middle]  # type: ignore[misc]
            bound = max(problem.bottleneck_ms(choice), token / streams) * (1 - _EPS)
            high = max(low, min(middle, bisect.bisect_left(candidates, bound)))
            memo.setdefault(high, (choice, token))
        else:
            low = middle + 1
    found = [at(low)] + ([at(low - 1)] if low > 0 else [])
    choices = [f[0] for f in found if f is not None]
    return min(choices, key=problem.score) if choices else None


def solve_milp(problem: Problem, *, force: int | None = None) -> Choice | None:
    """The optimal choice, or None if nothing fits. ``force``: a device that must take part."""
    if problem.config.objective == "throughput":
        return _throughput(problem, force)
    found = _latency(problem, force=force, bottleneck=None)
    return found[0] if found else None
