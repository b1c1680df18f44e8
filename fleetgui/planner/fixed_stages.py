"""Plan over an export's fixed stages: which device runs which consecutive whole stages.

An export fixes its stage boundaries, so a deployment can only hand out whole stages: the
coordinator runs the first stage(s), then each device it uses runs the next consecutive stages,
in the order the devices are given (coordinator first, then ring order); a device may be left
out. :func:`plan_fixed_stages` scores every such grouping with :func:`cost.evaluate` and returns
the best as a :class:`Plan` whose layer ranges are unions of whole stages: exactly what the fleet
deployer deploys (:func:`stage_groups` maps the plan back to stage indices). The export's stages
are given as the :class:`~fleetgui.shard.Shard` of each, in order.

With ``S`` stages and ``W`` workers there are ``C(W + S - 1, S - 1)`` groupings (e.g. 15 for 3
stages on 4 workers, 6435 for 8 stages on 8): up to ``max_candidates`` of them are all scored,
which is exact for both objectives. Beyond that a dynamic programme over (stages placed, last
device) finds the best grouping for the latency objective, which is additive (see
:mod:`fleetgui.planner.cost`): exact for latency, the latency-best grouping for throughput.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence

from fleetgui.errors import FleetguiError
from fleetgui.planner import cost
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import GB, LeftOut, Plan, PlanConfig
from fleetgui.planner.profiles import DeviceProfile
from fleetgui.planner.solver import NoPlanFitsError
from fleetgui.shard import Shard

log = logging.getLogger(__name__)

MAX_CANDIDATES = 20_000  # groupings scored one by one; more: dynamic programme (see module doc)
Grouping = tuple[tuple[int, int], ...]  # (device position, end stage, exclusive) per ring member


class PlanMismatchError(FleetguiError):
    """A plan's layer ranges do not line up with an export's stages."""


def _ranges(stages: Sequence[Shard]) -> str:
    return ", ".join(f"{s.start_layer}:{s.end_layer}" for s in stages)


def check_stages(stages: Sequence[Shard], n_layers: int) -> None:
    """Raise ``ValueError`` unless ``stages`` cover ``[0, n_layers)`` in order."""
    if not stages:
        raise ValueError("an export has at least one stage")
    expected = 0
    for stage in stages:
        if stage.start_layer != expected:
            raise ValueError(f"stages must be consecutive layer ranges from 0: {_ranges(stages)}")
        expected = stage.end_layer
    if expected != n_layers:
        raise ValueError(f"the stages {_ranges(stages)} do not cover the model's {n_layers} layers")


def _groupings(n_stages: int, n_devices: int) -> Iterator[Grouping]:
    """Every grouping: the coordinator takes stages ``[0, e)``, then workers in order."""

    def extend(start: int, last: int, groups: Grouping) -> Iterator[Grouping]:
        if start == n_stages:
            yield groups
            return
        for position in range(last + 1, n_devices):
            for end in range(start + 1, n_stages + 1):
                yield from extend(end, position, (*groups, (position, end)))

    for end in range(1, n_stages + 1):
        yield from extend(end, 0, ((0, end),))


class _Search:
    """The groupings of one export's stages over one list of devices."""

    def __init__(
        self,
        devices: Sequence[DeviceProfile],
        model: ModelProfile,
        stages: Sequence[Shard],
        config: PlanConfig,
    ) -> None:
        self.devices, self.model, self.stages, self.config = devices, model, stages, config

    def layers(self, first: int, end: int) -> int:
        """Layers of stages ``[first, end)``."""
        return self.stages[end - 1].end_layer - self.stages[first].start_layer

    def evaluate(self, groups: Grouping, solver: str, left_out: Sequence[LeftOut] = ()) -> Plan:
        ring: list[tuple[DeviceProfile, int]] = []
        start = 0
        for position, end in groups:
            ring.append((self.devices[position], self.layers(start, end)))
            start = end
        return cost.evaluate(ring, self.model, self.config, left_out=left_out, solver=solver)

    def fits(self, position: int, first: int, end: int) -> bool:
        memory = cost.stage_memory_bytes(
            self.layers(first, end),
            self.model,
            self.config,
            first=position == 0,
            last=end == len(self.stages),
        )
        return memory <= cost.capacity_bytes(self.devices[position], self.config)

    def all(self) -> tuple[Grouping | None, dict[int, Plan]]:
        """Score every grouping: the best, and the best with each device in it."""
        best: tuple[tuple[float, float, int, tuple[int, ...]], Grouping] | None = None
        with_device: dict[int, Plan] = {}
        for groups in _groupings(len(self.stages), len(self.devices)):
            plan = self.evaluate(groups, "")
            if not plan.fits:
                continue
            positions = tuple(p for p, _ in groups)
            key = (plan.score, plan.predicted_ms_per_token, len(groups), positions)
            if best is None or key < best[0]:
                best = key, groups
            for position in positions:
                known = with_device.get(position)
                if known is None or plan.score < known.score:
                    with_device[position] = plan
        return (best[1] if best else None), with_device

    def latency_dp(self, force: int | None = None) -> Grouping | None:
        """The grouping with the least time per token (using device ``force`` if given)."""
        n, count = len(self.stages), len(self.devices)

        def group_ms(position: int, first: int, end: int) -> float:
            device = self.devices[position]
            ms = self.layers(first, end) * device.ms_per_layer
            ms += cost.ring_link_ms(device, self.model, position == 0)
            return ms + (cost.lm_head_ms(device, self.model) if end == n else 0.0)

        best: dict[tuple[int, int], tuple[float, Grouping]] = {}
        for end in range(1, n + 1):
            if self.fits(0, 0, end):
                best[(end, 0)] = group_ms(0, 0, end), ((0, end),)
        for start in range(1, n):
            for last in range(count):
                state = best.get((start, last))
                if state is None:
                    continue
                for position in range(last + 1, count):
                    if force is not None and last < force < position:
                        continue  # it would skip the device that must take part
                    for end in range(start + 1, n + 1):
                        if not self.fits(position, start, end):
                            continue
                        ms = state[0] + group_ms(position, start, end)
                        known = best.get((end, position))
                        if known is None or ms < known[0]:
                            best[(end, position)] = ms, (*state[1], (position, end))
        finals = [
            best[(n, last)]
            for last in range(count)
            if (n, last) in best and (force is None or last >= force)
        ]
        return min(finals, key=lambda state: state[0])[1] if finals else None


def plan_fixed_stages(
    devices: Sequence[DeviceProfile],
    model: ModelProfile,
    stages: Sequence[Shard],
    config: PlanConfig | None = None,
    *,
    max_candidates: int = MAX_CANDIDATES,
) -> Plan:
    """The best placement of the export's ``stages`` on ``devices`` (coordinator first, then
    ring order; see module doc). Raises :class:`NoPlanFitsError` when no grouping fits."""
    config = config or PlanConfig()
    if not devices:
        raise ValueError("a fleet needs at least one device (the coordinator)")
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ValueError(f"device names must be unique: {names}")
    check_stages(stages, model.n_layers)
    search = _Search(devices, model, stages, config)
    candidates = math.comb(len(devices) - 1 + len(stages) - 1, len(stages) - 1)
    with_device: dict[int, Plan | None] = {}
    if candidates <= max_candidates:
        best, scored = search.all()
        with_device.update(scored)
        solver = "fixed-stages"
    else:
        best = search.latency_dp()
        solver = "fixed-stages-dp"
    if best is None:
        raise NoPlanFitsError(_no_fit_message(search))
    used = {position for position, _ in best}
    if solver == "fixed-stages-dp":
        for position in range(len(devices)):
            if position not in used:
                forced = search.latency_dp(force=position)
                with_device[position] = search.evaluate(forced, solver) if forced else None
    without = search.evaluate(best, solver)
    left_out = sorted(
        (
            LeftOut(devices[p].name, _reason(search, p, without, with_device.get(p)))
            for p in range(len(devices))
            if p not in used
        ),
        key=lambda x: x.device,
    )
    plan = search.evaluate(best, solver, left_out)
    log.info(
        "placed the %d stages of %s on %d of %d devices (%s, %d groupings): %s; %.2f ms/token%s",
        len(stages),
        model.model_id,
        len(plan.stages),
        len(devices),
        solver,
        candidates,
        ", ".join(plan_rows(plan)),
        plan.predicted_ms_per_token,
        "".join(f"; {x.device} left out: {x.reason}" for x in plan.left_out),
    )
    return plan


def _reason(search: _Search, position: int, best: Plan, with_it: Plan | None) -> str:
    """Why the device at ``position`` is not in ``best``."""
    if with_it is None:
        return _no_room(search, position)
    if search.config.objective == "throughput":
        unit, without_it, with_value = (
            "tokens/s",
            best.predicted_tokens_per_s,
            with_it.predicted_tokens_per_s,
        )
        faster = without_it > with_value * (1 + 1e-9)
    else:
        unit, without_it, with_value = (
            "ms/token",
            best.predicted_ms_per_token,
            with_it.predicted_ms_per_token,
        )
        faster = with_value > without_it * (1 + 1e-9)
    digits = 1 if unit == "tokens/s" else 2
    if faster:
        return (
            f"leaving it out is faster: {without_it:.{digits}f} {unit} without it, "
            f"{with_value:.{digits}f} with it"
        )
    return (
        f"not needed: the export's {len(search.stages)} stage(s) run as fast without it "
        f"({without_it:.{digits}f} {unit})"
    )


def _no_room(search: _Search, position: int) -> str:
    """Why no grouping with the device at ``position`` fits."""
    config, model, stages = search.config, search.model, search.stages
    last = len(stages)
    if last == 1:
        return "the export has a single stage, which the coordinator runs"
    if any(search.fits(position, i, i + 1) for i in range(1, last)):
        return f"no grouping of the export's {last} stages with it fits in memory"
    usable = cost.capacity_bytes(search.devices[position], config) / GB
    smallest = min(
        cost.stage_memory_bytes(
            stages[i].n_stage_layers, model, config, first=False, last=i == last - 1
        )
        for i in range(1, last)
    )
    return (
        f"not enough memory: {max(0.0, usable):.2f} GB usable after "
        f"{config.headroom_bytes / GB:.1f} GB headroom, the smallest stage it could run "
        f"needs {smallest / GB:.2f} GB with its KV cache and the runtime"
    )


def _no_fit_message(search: _Search) -> str:
    """Which stage does not fit where, and what would."""
    config, model, stages, devices = search.config, search.model, search.stages, search.devices
    fix = (
        "export in more, smaller stages (fleetgui export --stages N or --layers), with smaller "
        "weights (--weights int4) or for a shorter context, free memory, or add a PC"
    )
    coordinator = devices[0]
    if not search.fits(0, 0, 1):
        need = cost.stage_memory_bytes(
            search.layers(0, 1), model, config, first=True, last=len(stages) == 1
        )
        usable = cost.capacity_bytes(coordinator, config)
        first = stages[0]
        return (
            f"the coordinator {coordinator.name} cannot hold the export's first stage (layers "
            f"{first.start_layer}-{first.end_layer - 1}): it needs {need / GB:.2f} GB with the "
            f"embedding, its KV cache and the runtime, and {coordinator.name} has "
            f"{max(0, usable) / GB:.2f} GB after {config.headroom_bytes / GB:.1f} GB headroom: "
            f"{fix}"
        )
    largest = max(range(len(stages)), key=lambda i: stages[i].n_stage_layers)
    start, end = stages[largest].start_layer, stages[largest].end_layer
    need = cost.stage_memory_bytes(
        end - start, model, config, first=largest == 0, last=largest == len(stages) - 1
    )
    most = max(cost.capacity_bytes(d, config) for d in devices)
    return (
        f"the export's {len(stages)} stage(s) do not fit on the {len(devices)} PC(s): the "
        f"largest (layers {start}-{end - 1}) needs {need / GB:.2f} GB with its KV cache for "
        f"{model.context_length} tokens x {model.streams} stream(s), the most any PC has is "
        f"{max(0, most) / GB:.2f} GB after {config.headroom_bytes / GB:.1f} GB headroom, and "
        f"whole stages do not pack into what they have: {fix}"
    )


def plan_rows(plan: Plan) -> list[str]:
    """``"device start:end"`` per device of ``plan``, in ring order."""
    return [f"{s.device} {s.shard.start_layer}:{s.shard.end_layer}" for s in plan.stages]


def stage_groups(plan: Plan, stages: Sequence[Shard]) -> list[tuple[str, tuple[int, ...]]]:
    """Each device of ``plan`` (in ring order) with the indices of the export's stages that make
    up its layer range. Raises :class:`PlanMismatchError` when a range is not whole stages."""
    groups: list[tuple[str, tuple[int, ...]]] = []
    index = 0
    for row in plan.stages:
        first = index
        while index < len(stages) and stages[index].end_layer <= row.shard.end_layer:
            index += 1
        members = tuple(range(first, index))
        if (
            not members
            or stages[first].start_layer != row.shard.start_layer
            or stages[index - 1].end_layer != row.shard.end_layer
        ):
            raise PlanMismatchError(
                f"the plan gives {row.device} layers {row.shard.start_layer}-"
                f"{row.shard.end_layer - 1}, which are not whole stages of the export "
                f"({', '.join(f'{s.start_layer}-{s.end_layer - 1}' for s in stages)}): preview "
                "the plan again"
            )
        groups.append((row.device, members))
    if index != len(stages):
        raise PlanMismatchError(
            f"the plan covers {index} of the export's {len(stages)} stages: preview the plan again"
        )
    return groups
