"""Reference strategies the planner is measured against, scored with the same model (:mod:`.cost`).

* :func:`memory_proportional`: exo's ring strategy, every device gets layers in proportion to its
  memory.
* :func:`compute_proportional`: layers in proportion to speed (1 / ms_per_layer).
* :func:`brute_force`: every subset, every order and every contiguous split; exponential, for
  checking the solver on small fleets.

The proportional splits use every device, coordinator first and the others in the given order,
with exo's rounding (cumulative shares rounded to whole layers); a device whose share rounds to
no layer drops out. They do not check memory: a plan that overflows lists the devices in
``Plan.overcommitted``.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator, Sequence

from fleetgui.planner import cost
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import Plan, PlanConfig
from fleetgui.planner.profiles import DeviceProfile

log = logging.getLogger(__name__)


def proportional_counts(weights: Sequence[float], n_layers: int) -> list[int]:
    """Layers per weight with exo's rounding; the first entry always gets at least one."""
    total = sum(weights)
    bounds = [0]
    running = 0.0
    for weight in weights:
        running += weight
        bounds.append(min(n_layers, round(running / total * n_layers)))
    bounds[-1] = n_layers
    counts = [b - a for a, b in itertools.pairwise(bounds)]
    if counts[0] == 0:  # the coordinator must hold stage 0: take a layer from the next device
        donor = next(i for i, n in enumerate(counts) if n > 0)
        counts[donor] -= 1
        counts[0] = 1
    return counts


def _proportional(
    devices: Sequence[DeviceProfile],
    model: ModelProfile,
    config: PlanConfig,
    weights: Sequence[float],
    name: str,
) -> Plan:
    counts = proportional_counts(weights, model.n_layers)
    ring = [(d, n) for d, n in zip(devices, counts, strict=True) if n > 0]
    return cost.evaluate(ring, model, config, solver=name)


def memory_proportional(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> Plan:
    """exo's strategy: layers proportional to each device's memory."""
    weights = [float(d.memory_bytes) for d in devices]
    return _proportional(devices, model, config, weights, "memory-proportional")


def compute_proportional(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> Plan:
    """Layers proportional to each device's speed, 1 / ms_per_layer."""
    weights = [1.0 / d.ms_per_layer for d in devices]
    return _proportional(devices, model, config, weights, "compute-proportional")


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write ``total`` as ``parts`` positive integers, in order."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        yield tuple(b - a for a, b in zip((0, *cuts), (*cuts, total), strict=True))


def brute_force(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> Plan | None:
    """The best plan that fits, by enumeration, or None; ties keep the first found."""
    coordinator, workers = devices[0], list(devices[1:])
    best: Plan | None = None
    best_key = (math.inf, math.inf)
    for size in range(len(workers) + 1):
        for subset in itertools.combinations(workers, size):
            for order in itertools.permutations(subset):
                ring_devices = (coordinator, *order)
                if len(ring_devices) > model.n_layers:
                    continue
                for counts in _compositions(model.n_layers, len(ring_devices)):
                    plan = cost.evaluate(
                        list(zip(ring_devices, counts, strict=True)),
                        model,
                        config,
                        solver="brute-force",
                    )
                    key = (plan.score, plan.predicted_ms_per_token)
                    if plan.fits and key < best_key:
                        best, best_key = plan, key
    return best
