"""Re-planning at runtime (LinguaLinked's load balancing): react to a lost device or a device
whose measured speed drifted, with a new plan or None when no change is warranted.

LinguaLinked re-solves its assignment when the runtime monitor reports an imbalance and moves
layers between neighbours. Here the whole plan is re-solved with the updated profiles, and a new
plan is returned only when it is needed (a device of the plan was lost) or worth the reload it
costs (its score beats the current layout, re-scored with the new profiles, by ``min_gain``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleetgui.errors import FleetguiError
from fleetgui.planner import cost
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import Plan, PlanConfig
from fleetgui.planner.profiles import DeviceProfile
from fleetgui.planner.solver import solve

log = logging.getLogger(__name__)

DEFAULT_DRIFT = 0.20  # re-plan when a device's ms_per_layer moves by more than this fraction
DEFAULT_MIN_GAIN = 0.05  # ... and the new plan is at least this much better


class ReplanError(FleetguiError):
    """The fleet cannot continue (e.g. the coordinator itself was lost)."""


@dataclass(frozen=True)
class DeviceLost:
    """A device stopped answering or left the fleet."""

    device: str


@dataclass(frozen=True)
class SpeedDrift:
    """The runtime measured a device's time per layer anew."""

    device: str
    ms_per_layer: float  # the new measurement


Event = DeviceLost | SpeedDrift
Solver = Callable[[Sequence[DeviceProfile], ModelProfile, PlanConfig], Plan]
"""Makes a plan: :func:`~fleetgui.planner.solver.solve` (free layer ranges), or a deployed
export's fixed stages (``functools.partial`` over
:func:`~fleetgui.planner.fixed_stages.plan_fixed_stages`)."""


def updated_devices(devices: Sequence[DeviceProfile], event: Event) -> list[DeviceProfile]:
    """The profiles after ``event``: the lost device removed, or its layer time replaced."""
    names = [d.name for d in devices]
    if event.device not in names:
        raise ValueError(f"unknown device {event.device!r} (fleet: {', '.join(names)})")
    if isinstance(event, DeviceLost):
        return [d for d in devices if d.name != event.device]
    return [
        d.with_ms_per_layer(event.ms_per_layer) if d.name == event.device else d for d in devices
    ]


def rescore(
    plan: Plan, devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> Plan:
    """The same layout as ``plan`` scored with (possibly updated) ``devices``."""
    by_name = {d.name: d for d in devices}
    ring = [(by_name[s.device], s.shard.n_stage_layers) for s in plan.stages]
    return cost.evaluate(ring, model, config, left_out=plan.left_out, solver=plan.solver)


def replan(
    plan: Plan,
    devices: Sequence[DeviceProfile],
    model: ModelProfile,
    event: Event,
    *,
    config: PlanConfig | None = None,
    drift_threshold: float = DEFAULT_DRIFT,
    min_gain: float = DEFAULT_MIN_GAIN,
    solver: Solver = solve,
) -> Plan | None:
    """A new plan after ``event``, or None to keep ``plan``.

    ``devices`` and ``config`` are what ``plan`` was made with (coordinator first; ``config``
    defaults to the plan's objective with default headroom). Raises
    :class:`ReplanError` if the coordinator is lost, and :class:`.NoPlanFitsError` if the
    remaining devices cannot hold the model.
    """
    config = config or PlanConfig(objective=plan.objective)
    if isinstance(event, DeviceLost):
        if devices and event.device == devices[0].name:
            raise ReplanError(
                f"the coordinator {event.device} was lost: the fleet cannot continue without it; "
                "restart the app on a PC that is still up"
            )
        remaining = updated_devices(devices, event)
        if plan.shard_of(event.device) is None:
            log.info("lost %s, which the plan does not use: keeping the plan", event.device)
            return None
        new = solver(remaining, model, config)
        log.info("lost %s: re-planned onto %s", event.device, ", ".join(new.devices))
        return new

    updated = updated_devices(devices, event)  # raises ValueError for an unknown device
    old = {d.name: d for d in devices}[event.device]
    change = abs(event.ms_per_layer - old.ms_per_layer) / old.ms_per_layer
    if change <= drift_threshold:
        log.debug(
            "%s drifted %.0f%%: below the %.0f%% threshold",
            old.name,
            100 * change,
            100 * drift_threshold,
        )
        return None
    log.info(
        "%s drifted %.0f%% (%.2f -> %.2f ms/layer)",
        old.name,
        100 * change,
        old.ms_per_layer,
        event.ms_per_layer,
    )
    return improve(plan, updated, model, config=config, min_gain=min_gain, solver=solver)


def improve(
    plan: Plan,
    devices: Sequence[DeviceProfile],
    model: ModelProfile,
    *,
    config: PlanConfig | None = None,
    min_gain: float = DEFAULT_MIN_GAIN,
    solver: Solver = solve,
) -> Plan | None:
    """A better plan than ``plan`` on ``devices`` (profiles as measured now), or None when the
    best one is the same layout or not at least ``min_gain`` better than ``plan`` re-scored
    with ``devices`` (a reload costs seconds; a marginal gain is not worth it)."""
    config = config or PlanConfig(objective=plan.objective)
    new = solver(devices, model, config)
    current = rescore(plan, devices, model, config)
    if new.same_layout(plan) or new.score > current.score * (1 - min_gain):
        log.info(
            "keeping the plan: %.2f now vs %.2f for the best other layout (%s)",
            current.score,
            new.score,
            ", ".join(f"{s.device} {s.shard.start_layer}:{s.shard.end_layer}" for s in new.stages),
        )
        return None
    log.info("re-planned: score %.2f -> %.2f", current.score, new.score)
    return new
