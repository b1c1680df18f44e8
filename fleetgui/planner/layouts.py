"""Choose how the fleet serves ``users`` users at once: :func:`plan_layout`.

One pipeline over several PCs makes every token of every user wait for every hop; interleaving
users fills the pipeline only in part. When PCs can hold the whole model, a copy per PC with the
users spread over the copies pays no split at all. The candidates, a bounded and deterministic
list in this order:

1. one pipeline over the fleet (what :func:`~fleetgui.planner.solve` plans, for all users);
2. one pipeline over the workers only (the coordinator just routes tokens);
3. a whole copy on every PC that can hold one;
4. those copies plus ``k`` pipelines over the other PCs, ``k = 1, 2, ...``;
5. ``k`` pipelines over disjoint groups of all PCs, and of the workers only, ``k = 2, 3, ...``.

Groups for 4 and 5 are built greedily: the PCs, most usable memory first, join the group with the
least memory until every group can hold the model (with its share of the users' KV caches), then
the group with the least speed; ``k`` grows while that works. Each group is then planned by the
solver, which may leave some of its PCs out.

Every candidate spreads the users over its groups (:mod:`fleetgui.planner.groups`, which also
says how a group without the coordinator is costed). The layout with the most predicted tokens/s
in all wins among those whose slowest user gets at least the floor; ties go to more for the
slowest user, then less time per token, then fewer PCs, then the earlier candidate. When no
layout meets the floor, the one whose slowest user gets most wins. A runtime whose coordinator
runs no stage asks for workers-only layouts (``coordinator_runs_stages=False``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fleetgui.planner import cost
from fleetgui.planner.groups import GroupPlanner, Pool, serve
from fleetgui.planner.layout import Alternative, Layout, describe, kind_of
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import GB, LeftOut, PlanConfig
from fleetgui.planner.profiles import DeviceProfile
from fleetgui.planner.solver import NoPlanFitsError, no_fit_message

log = logging.getLogger(__name__)

_ROUND = 6  # decimals of tokens/s and ms compared when ranking (equal figures tie)


@dataclass(frozen=True)
class _Candidate:
    label: str  # what was tried, shown when it does not fit
    pools: tuple[Pool, ...]  # disjoint, each sorted; the coordinator's pool starts at it
    outside: tuple[tuple[int, str], ...] = ()  # PCs in no pool, and why


class _Fleet:
    """The fleet's numbers the candidates are built from."""

    def __init__(
        self,
        devices: Sequence[DeviceProfile],
        model: ModelProfile,
        config: PlanConfig,
        users: int,
        coordinator_runs_stages: bool = True,
    ) -> None:
        self.devices = tuple(devices)
        self.coordinator_runs_stages = coordinator_runs_stages
        self.model = model
        self.config = config
        self.users = users
        self.planner = GroupPlanner(devices, model, config)
        self.usable = [cost.capacity_bytes(d, config) - config.runtime_bytes for d in self.devices]

    def need(self, groups: int) -> int:
        """Memory one group needs for its even share of the users (weights and KV caches)."""
        share = max(1, math.ceil(self.users / groups))
        return self.model.with_workload(
            context_length=self.model.context_length, streams=share
        ).total_bytes

    def split(self, members: Sequence[int], k: int, need: int) -> tuple[Pool, ...] | None:
        """``members`` in ``k`` groups that can each hold ``need`` bytes, or None."""
        if k > len(members):
            return None
        order = sorted(members, key=lambda d: (-self.usable[d], self.devices[d].ms_per_layer, d))
        pools: list[list[int]] = [[] for _ in range(k)]
        memory = [0] * k
        speed = [0.0] * k
        for d in order:
            short = [p for p in range(k) if memory[p] < need]
            if short:  # memory first: every group must hold the model
                target = min(short, key=lambda p: (memory[p], p))
            else:  # then speed: the spare PCs go to the slowest group
                target = min(range(k), key=lambda p: (speed[p], p))
            pools[target].append(d)
            memory[target] += max(0, self.usable[d])
            speed[target] += 1.0 / self.devices[d].ms_per_layer
        if any(m < need for m in memory):
            return None
        return tuple(sorted(tuple(sorted(p)) for p in pools))

    def copy_shortfall(self, d: int) -> str:
        one = self.model.with_workload(context_length=self.model.context_length, streams=1)
        need = cost.stage_memory_bytes(one.n_layers, one, self.config, first=True, last=True)
        usable = cost.capacity_bytes(self.devices[d], self.config)
        return (
            f"cannot hold a whole copy: one user's copy needs {need / GB:.2f} GB, it has "
            f"{max(0, usable) / GB:.2f} GB after {self.config.headroom_bytes / GB:.1f} GB headroom"
        )

    def candidates(self) -> tuple[list[_Candidate], list[Alternative]]:
        """The candidates, and notes on layouts that cannot be built at all."""
        n = len(self.devices)
        workers = tuple(range(1, n))
        routes = (0, "only routes tokens: the groups here are workers only")
        # a runtime whose coordinator runs no stage gets layouts of workers only
        everyone = tuple(range(n)) if self.coordinator_runs_stages else workers
        always: tuple[tuple[int, str], ...] = () if self.coordinator_runs_stages else (routes,)
        out = [_Candidate("one pipeline over all PCs", (everyone,), always)] if everyone else []
        if workers and self.coordinator_runs_stages:
            out.append(_Candidate("one pipeline over the workers", (workers,), (routes,)))
        notes: list[Alternative] = []
        holds = [d for d in everyone if self.planner.plan((d,), 1) is not None]
        rest = [d for d in everyone if d not in holds]
        outside = always + tuple((d, self.copy_shortfall(d)) for d in rest)
        if holds:
            out.append(_Candidate("whole copies", tuple((d,) for d in holds), outside))
        else:
            notes.append(Alternative("whole copies", None, None, None, "no PC can hold one"))
        for k in range(1, len(rest) + 1) if holds else ():
            pools = self.split(rest, k, self.need(len(holds) + k))
            if pools is None:
                break
            copies = tuple((d,) for d in holds)
            out.append(_Candidate(f"whole copies and {k} pipeline(s)", copies + pools, always))
        member_sets = [(everyone, always)]
        if self.coordinator_runs_stages:
            member_sets.append((workers, (routes,)))
        for members, extra in member_sets:
            for k in range(2, len(members) + 1):
                pools = self.split(members, k, self.need(k))
                if pools is None:
                    if k == 2 and members == everyone:
                        notes.append(
                            Alternative(
                                "2 pipelines", None, None, None,
                                "the PCs do not split into 2 groups that each hold the model",
                            )
                        )  # fmt: skip
                    break
                out.append(_Candidate(f"{k} pipelines", pools, extra))
        return out, notes

    def build(
        self, candidate: _Candidate, floor: float | None, spread_floor: float | None
    ) -> Layout | None:
        """``candidate`` serving the users, spread with ``spread_floor`` in mind."""
        served = serve(self.planner, candidate.pools, self.users, spread_floor)
        if served is None:
            return None
        names = {d: self.devices[d].name for d in range(len(self.devices))}
        left: dict[str, str] = {names[d]: why for d, why in candidate.outside}
        for plan in served.plans:
            left.update((x.device, x.reason) for x in plan.left_out)
        for pool in served.idle:
            if self.planner.plan(pool, 1) is None:
                why = (
                    self.copy_shortfall(pool[0])
                    if len(pool) == 1
                    else "its group (" + ", ".join(names[d] for d in pool) + ") cannot hold "
                    "the model"
                )
            else:
                why = f"idle: the other groups serve the {self.users} user(s) better"
            left.update((names[d], why) for d in pool)
        return Layout(
            model_id=self.model.model_id,
            weight_format=self.model.weight_format,
            context_length=self.model.context_length,
            coordinator=self.devices[0].name,
            users=self.users,
            groups=tuple(replace(p, left_out=()) for p in served.plans),
            users_per_group=served.users,
            floor_tok_s=floor,
            left_out=tuple(LeftOut(name, why) for name, why in sorted(left.items())),
        )


def _rank(layout: Layout, order: int, by_slowest: bool) -> tuple[float, ...]:
    """Larger is better (see the module docstring)."""
    total = round(layout.predicted_tokens_per_s, _ROUND)
    slowest = round(layout.slowest_user_tokens_per_s, _ROUND)
    first, second = (slowest, total) if by_slowest else (total, slowest)
    mean = round(layout.mean_ms_per_token, _ROUND)
    return first, second, -mean, -len(layout.devices), -order


def _why(loser: Layout, best: Layout, floor: float | None) -> str:
    """Why ``loser`` was not chosen over ``best``."""
    total, best_total = (round(x.predicted_tokens_per_s, _ROUND) for x in (loser, best))
    slowest, best_slowest = (round(x.slowest_user_tokens_per_s, _ROUND) for x in (loser, best))
    mean, best_mean = (round(x.mean_ms_per_token, _ROUND) for x in (loser, best))
    if floor is not None and best.meets_floor and not loser.meets_floor:
        reason = f"its slowest user gets less than the floor of {floor:g} tokens/s"
    elif floor is not None and not best.meets_floor and slowest < best_slowest:
        reason = "less for the slowest user (no layout meets the floor)"
    elif total < best_total:  # two decimals: the table's one may show the same figure
        reason = (
            f"fewer tokens/s in all ({loser.predicted_tokens_per_s:.2f} vs "
            f"{best.predicted_tokens_per_s:.2f})"
        )
    elif slowest < best_slowest:
        reason = "as many tokens/s in all, less for the slowest user"
    elif mean > best_mean:
        reason = f"as many tokens/s, but a token takes longer ({mean:.2f} vs {best_mean:.2f} ms)"
    elif len(loser.devices) > len(best.devices):
        reason = "the same figures on more PCs"
    else:
        reason = "the same figures (the layout found first is kept)"
    return reason


def _check(
    devices: Sequence[DeviceProfile], users: int, floor_tok_s: float | None, workers_only: bool
) -> None:
    if users < 1:
        raise ValueError(f"users must be at least 1, got {users}")
    if floor_tok_s is not None and not floor_tok_s > 0:
        raise ValueError(f"the per-user floor must be positive, got {floor_tok_s}")
    if not devices:
        raise ValueError("a fleet needs at least one device (the coordinator)")
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ValueError(f"device names must be unique: {names}")
    if workers_only and len(devices) < 2:
        raise ValueError("a coordinator that runs no stage needs at least one worker")


def candidate_layouts(
    devices: Sequence[DeviceProfile],
    model: ModelProfile,
    config: PlanConfig | None = None,
    users: int = 1,
    floor_tok_s: float | None = None,
    *,
    coordinator_runs_stages: bool = True,
) -> tuple[list[Layout], list[Alternative]]:
    """Every layout :func:`plan_layout` considers, in candidate order without repeats (their
    ``alternatives`` empty), and notes on the candidates that do not fit in memory."""
    config = config or PlanConfig()
    _check(devices, users, floor_tok_s, not coordinator_runs_stages)
    # workers in (speed, name) order, as the solver takes them: equal fleets give equal layouts
    # whatever the order of the devices file
    ordered = (devices[0], *sorted(devices[1:], key=lambda d: (d.ms_per_layer, d.name)))
    fleet = _Fleet(ordered, model, config, users, coordinator_runs_stages)
    candidates, notes = fleet.candidates()
    built: list[Layout] = []
    seen: set[tuple[tuple[str, str, int], ...]] = set()
    # with a floor, the users are also spread without it: the preview then shows what the floor
    # costs (that layout's figures, and that its slowest user is below the floor)
    spreads = (None,) if floor_tok_s is None else (floor_tok_s, None)
    for candidate in candidates:
        layouts = [fleet.build(candidate, floor_tok_s, spread) for spread in spreads]
        if layouts[0] is None:
            reason = f"does not fit in memory for {users} user(s)"
            notes.append(Alternative(candidate.label, None, None, None, reason))
        for layout in layouts:
            if layout is None:
                continue
            key = tuple(
                (g.layers_arg, ",".join(g.devices), n)
                for g, n in zip(layout.groups, layout.users_per_group, strict=True)
            )
            if key not in seen:  # different candidates can end in the same layout
                seen.add(key)
                built.append(layout)
    log.debug("%d candidate(s), %d layout(s) for %d user(s)", len(candidates), len(built), users)
    return built, notes


def plan_layout(
    devices: Sequence[DeviceProfile],
    model: ModelProfile,
    config: PlanConfig | None = None,
    users: int = 1,
    floor_tok_s: float | None = None,
    *,
    coordinator_runs_stages: bool = True,
) -> Layout:
    """The layout of ``devices`` (coordinator first) that serves ``users`` users at once with
    the most predicted tokens/s in all, every user getting at least ``floor_tok_s`` tokens/s
    where some layout can (see the module docstring). ``model.streams`` is ignored: each group
    is planned for the users it serves. ``config.objective`` is ignored too. With
    ``coordinator_runs_stages=False`` every group is of workers only (the coordinator routes
    tokens), for a runtime whose coordinator runs no stage when it serves replicas.

    Raises :class:`~fleetgui.planner.solver.NoPlanFitsError` when no layout fits in memory.
    """
    config = config or PlanConfig()
    layouts, notes = candidate_layouts(
        devices,
        model,
        config,
        users,
        floor_tok_s,
        coordinator_runs_stages=coordinator_runs_stages,
    )
    if not layouts:
        one = model.with_workload(context_length=model.context_length, streams=users)
        raise NoPlanFitsError(no_fit_message(devices, one, config))
    built = list(enumerate(layouts))
    by_slowest = floor_tok_s is not None and not any(x.meets_floor for x in layouts)
    meeting = [x for x in built if x[1].meets_floor] or built
    ranked = sorted(meeting, key=lambda x: _rank(x[1], x[0], by_slowest), reverse=True)
    best = ranked[0][1]
    rest = [x for x in built if x[1] is not best]
    rest.sort(key=lambda x: (x[1].meets_floor, *_rank(x[1], x[0], by_slowest)), reverse=True)
    alternatives = [
        Alternative(
            describe(x.groups),
            kind_of(x.groups),
            x.predicted_tokens_per_s,
            x.slowest_user_tokens_per_s,
            _why(x, best, floor_tok_s),
        )
        for _, x in rest
    ]
    best = replace(best, alternatives=tuple(alternatives + notes))
    log.info(
        "layout for %d user(s) of %s: %s, %.1f tokens/s in all, slowest user %.1f (%d layouts)",
        users,
        model.model_id,
        best.description,
        best.predicted_tokens_per_s,
        best.slowest_user_tokens_per_s,
        len(layouts),
    )
    return best
