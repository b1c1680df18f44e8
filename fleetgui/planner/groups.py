"""Independent groups of PCs: one group's plan for the users it serves, and spreading users.

A group is a pipeline over some of the fleet's PCs; a group of one PC runs a whole copy of the
model. A group that holds the coordinator (``devices[0]``) starts at it, as every plan did before.
A group of workers only is planned with its first device, the *start*, in the coordinator's place
(:func:`fleetgui.planner.cost.evaluate` takes the ring's first device as the coordinator): the
start holds the embedding and the first layers, and its link counts as perfect. The real
coordinator then only sends token ids to the start and takes each new token back (a few bytes, no
compute), so :func:`with_token_trip` adds what ``evaluate`` left out: the token ids' latency on
the start's link (``rtt / 2``), and the start's own output crossing its link (``rtt / 2`` plus
one activation's transfer, the same whether it goes to the next device or, for a copy, back to the
coordinator). The start's link is busy one transfer per token. Every other hop is the cost model's
own (the last device's return is charged like any ring's). Routing token ids for several groups
costs the coordinator nothing in this model.

Users are spread greedily, one at a time, to the group whose aggregate rate gains most (each group
``g`` with ``S`` users gives ``min(S / T_g, 1 / B_g)``, concave in ``S``, so this maximises the
sum), preferring a group whose users all stay at or above the per-user floor.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fleetgui.planner import cost
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import Plan, PlanConfig
from fleetgui.planner.profiles import DeviceProfile
from fleetgui.planner.solver import try_solve

log = logging.getLogger(__name__)

_STARTS = 2  # starts tried for a group of workers: the most memory and the fastest
_TOLERANCE = 1e-9  # relative slack when comparing a rate with the floor

Pool = tuple[int, ...]  # indices into the fleet's devices, sorted


def group_tokens_per_s(plan: Plan) -> float:
    """A group's aggregate tokens/s with its ``streams`` users: min(S / T, 1 / B)."""
    return plan.predicted_tokens_per_s


def user_tokens_per_s(plan: Plan) -> float:
    """What each of a group's ``streams`` users gets: min(1 / T, 1 / (B * S))."""
    return 1000.0 * min(
        1.0 / plan.predicted_ms_per_token, 1.0 / (plan.bottleneck_ms * plan.streams)
    )


def meets(rate: float, floor: float | None) -> bool:
    return floor is None or rate >= floor * (1 - _TOLERANCE)


def with_token_trip(plan: Plan, start: DeviceProfile, model: ModelProfile) -> Plan:
    """``plan``, evaluated with ``start`` in the coordinator's place, plus the coordinator's
    token round trip through the start's link (see the module docstring)."""
    token_in = cost.link_latency_ms(start, False)
    out = cost.link_latency_ms(start, False)
    out += cost.link_transfer_ms(start, model.activation_bytes, False)
    stages = list(plan.stages)
    stages[0] = replace(stages[0], hop_in_ms=token_in)
    if len(stages) == 1:
        stages[0] = replace(stages[0], hop_out_ms=stages[0].hop_out_ms + out)
    else:
        stages[1] = replace(stages[1], hop_in_ms=stages[1].hop_in_ms + out)
    busy = cost.link_transfer_ms(start, model.activation_bytes, False)
    return replace(
        plan,
        stages=tuple(stages),
        predicted_ms_per_token=plan.predicted_ms_per_token + token_in + out,
        bottleneck_ms=max(plan.bottleneck_ms, busy),
    )


def _score(plan: Plan) -> tuple[float, float]:
    """Smaller is better: ms per aggregate token, then one user's ms per token."""
    return 1000.0 / plan.predicted_tokens_per_s, plan.predicted_ms_per_token


class GroupPlanner:
    """Plans of device pools for a number of users, memoised (candidate layouts share pools)."""

    def __init__(
        self, devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
    ) -> None:
        self.devices = tuple(devices)
        self.model = model
        # a group serves its users together: the throughput objective (with one user it is
        # the latency objective)
        self.config = replace(config, objective="throughput")
        self._plans: dict[tuple[Pool, int], Plan | None] = {}

    def plan(self, pool: Pool, users: int) -> Plan | None:
        """The best plan of ``pool`` with KV caches for ``users`` users, or None if none fits."""
        key = (pool, users)
        if key not in self._plans:
            self._plans[key] = self._plan(pool, users)
        return self._plans[key]

    def capacity(self, pool: Pool, at_most: int, fits: int = 0) -> int:
        """The most users (up to ``at_most``) whose KV caches ``pool`` can hold, knowing that
        ``fits`` users fit (0: none known); memory only shrinks as users are added, so bisect."""
        low, high = fits, at_most
        while low < high:
            middle = (low + high + 1) // 2
            if self.plan(pool, middle) is not None:
                low = middle
            else:
                high = middle - 1
        return low

    def starts(self, pool: Pool) -> list[int]:
        """Devices tried as a workers-only group's start (it also holds the embedding)."""
        by_memory = min(pool, key=lambda d: (-self.devices[d].memory_bytes, d))
        by_speed = min(pool, key=lambda d: (self.devices[d].ms_per_layer, d))
        return list(dict.fromkeys([by_memory, by_speed]))[:_STARTS]

    def _plan(self, pool: Pool, users: int) -> Plan | None:
        model = self.model.with_workload(context_length=self.model.context_length, streams=users)
        if 0 in pool:
            return self._solve(pool, model)
        best: Plan | None = None
        for start in self.starts(pool):
            order = (start, *(d for d in pool if d != start))
            plan = self._solve(order, model)
            if plan is None:
                continue
            plan = with_token_trip(plan, self.devices[start], model)
            if best is None or _score(plan) < _score(best):
                best = plan
        return best

    def _solve(self, order: Sequence[int], model: ModelProfile) -> Plan | None:
        devices = [self.devices[d] for d in order]
        if len(devices) == 1:  # a whole copy: nothing to choose
            plan = cost.evaluate([(devices[0], model.n_layers)], model, self.config)
            return replace(plan, solver="single") if plan.fits else None
        return try_solve(devices, model, self.config)


@dataclass(frozen=True)
class Served:
    """Users spread over pools: the plans of the pools that serve at least one user."""

    pools: tuple[Pool, ...]  # the pools serving users, in the order given
    plans: tuple[Plan, ...]
    users: tuple[int, ...]
    idle: tuple[Pool, ...]  # pools left without users (or unable to hold even one)


def _rate(t_ms: float, b_ms: float, users: int) -> tuple[float, float]:
    """(aggregate, per user) tokens/s of a group with ``users`` users."""
    if users == 0:
        return 0.0, math.inf
    return 1000.0 * min(users / t_ms, 1.0 / b_ms), 1000.0 * min(1.0 / t_ms, 1.0 / (b_ms * users))


def spread_users(
    rates: Sequence[tuple[float, float]],
    caps: Sequence[int],
    users: int,
    floor: float | None,
) -> list[int] | None:
    """Users per group, given each group's (T ms, B ms) and the most users it can hold; None if
    the groups cannot hold ``users`` users. Greedy on the aggregate gain (see the module
    docstring), keeping every group's users at or above ``floor`` where some group can."""
    counts = [0] * len(rates)
    for _ in range(users):
        best: tuple[tuple[bool, float, float, int], int] | None = None
        for g, (t_ms, b_ms) in enumerate(rates):
            if counts[g] >= caps[g]:
                continue
            now, _ = _rate(t_ms, b_ms, counts[g])
            after, per_user = _rate(t_ms, b_ms, counts[g] + 1)
            key = (meets(per_user, floor), after - now, per_user, -g)
            if best is None or key > best[0]:
                best = (key, g)
        if best is None:
            return None
        counts[best[1]] += 1
    return counts


def serve(
    planner: GroupPlanner, pools: Sequence[Pool], users: int, floor: float | None
) -> Served | None:
    """Spread ``users`` over ``pools`` and plan each pool for its share; None if they cannot
    hold that many users' KV caches."""
    share = max(1, math.ceil(users / len(pools)))
    caps: list[int] = []
    rates: list[tuple[float, float]] = []
    for pool in pools:
        plan = planner.plan(pool, share)
        cap = users  # at least ``share``; checked below once the users are spread
        if plan is None:
            cap = planner.capacity(pool, share - 1)
            plan = planner.plan(pool, cap) if cap else None
        caps.append(cap if plan is not None else 0)
        rates.append(
            (plan.predicted_ms_per_token, plan.bottleneck_ms) if plan is not None else (1.0, 1.0)
        )
    counts: list[int] | None = None
    for _ in range(len(pools) + 1):  # every round fixes at least one cap to its true value
        counts = spread_users(rates, caps, users, floor)
        if counts is None:
            return None
        changed = False
        for g, n in enumerate(counts):
            if n and planner.plan(pools[g], n) is None:
                caps[g] = planner.capacity(pools[g], n - 1, fits=min(share, n - 1))
                changed = True
        if not changed:
            break
    else:
        return None
    assert counts is not None
    used = [g for g, n in enumerate(counts) if n]
    plans: list[Plan] = []
    for g in used:
        plan = planner.plan(pools[g], counts[g])
        assert plan is not None  # every count was checked to fit above
        plans.append(plan)
    return Served(
        pools=tuple(pools[g] for g in used),
        plans=tuple(plans),
        users=tuple(counts[g] for g in used),
        idle=tuple(pool for g, pool in enumerate(pools) if not counts[g]),
    )
