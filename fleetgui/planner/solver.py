"""Choose the devices, their ring order and each one's layer range: :func:`solve`.

Fleets of up to ``PlanConfig.exact_limit`` devices are solved exactly (:mod:`.milp`), larger ones
heuristically (:mod:`.heuristic`). The time and memory model is described in :mod:`.cost`.
Every device left out gets a reason: it cannot hold one layer, or adding it to the plan (layers
re-balanced over the members) is predicted to be slower.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from fleetgui.errors import FleetguiError
from fleetgui.planner.heuristic import solve_heuristic, with_member
from fleetgui.planner.milp import solve_milp
from fleetgui.planner.model_profile import WEIGHT_FORMATS, ModelProfile
from fleetgui.planner.plan import GB, LeftOut, Plan, PlanConfig
from fleetgui.planner.problem import Choice, Problem, build_problem
from fleetgui.planner.profiles import DeviceProfile

log = logging.getLogger(__name__)

_MIN_CONTEXT = 512  # shortest context suggested when only a shorter context would fit


class NoPlanFitsError(FleetguiError):
    """The model does not fit in the fleet's memory; the message says by how much and what would."""


def _search(problem: Problem, force: int | None = None) -> tuple[Choice | None, str]:
    if len(problem.devices) <= problem.config.exact_limit:
        return solve_milp(problem, force=force), "milp"
    return solve_heuristic(problem, force=force), "heuristic"


def _fits(devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig) -> bool:
    choice, _ = _search(build_problem(devices, model, config))
    return choice is not None


def _reason(problem: Problem, device: int, best: Choice) -> str:
    """Why ``device`` is not in ``best`` (the best plan with it added, re-balanced, is worse)."""
    model, config = problem.model, problem.config
    target = problem.devices[device]
    if problem.max_layers(device, False) < 1:
        usable = (target.memory_bytes - config.headroom_bytes) / GB
        one = (model.layer_memory_bytes + config.runtime_bytes) / GB
        return (
            f"not enough memory: {usable:.2f} GB usable after {config.headroom_bytes / GB:.1f} GB "
            f"headroom, one layer with its KV cache and the runtime needs {one:.2f} GB"
        )
    joined = with_member(problem, best, device)
    if joined is None:
        return "adding it to this plan does not fit in memory"
    if config.objective == "throughput":
        with_it = 1000.0 / problem.score(joined)[0]
        without = 1000.0 / problem.score(best)[0]
        return f"leaving it out is faster: {without:.1f} tokens/s without it, {with_it:.1f} with it"
    return (
        f"leaving it out is faster: {problem.token_ms(best):.2f} ms/token without it, "
        f"{problem.token_ms(joined):.2f} with it"
    )


def _solve(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> tuple[Plan | None, float]:
    """The best plan (None if nothing fits) and the seconds the search took."""
    started = time.perf_counter()
    problem = build_problem(devices, model, config)
    choice, solver = _search(problem)
    if choice is None:
        return None, time.perf_counter() - started
    unused = [d for d in range(len(problem.devices)) if choice.counts[d] == 0]
    left_out = sorted(
        (LeftOut(problem.devices[d].name, _reason(problem, d, choice)) for d in unused),
        key=lambda x: x.device,
    )
    plan = problem.plan(choice, left_out, solver if len(choice.members) > 1 else "single")
    return plan, time.perf_counter() - started


def try_solve(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig | None = None
) -> Plan | None:
    """:func:`solve`, but None when nothing fits: cheap enough to call for many candidate groups
    (it does not search for the weight format or context that would fit)."""
    plan, _ = _solve(devices, model, config or PlanConfig())
    return plan


def solve(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig | None = None
) -> Plan:
    """The best plan for ``devices`` (coordinator first) under ``config``'s objective.

    Raises :class:`NoPlanFitsError` when no assignment fits in memory.
    """
    config = config or PlanConfig()
    plan, solved = _solve(devices, model, config)
    if plan is None:
        raise NoPlanFitsError(no_fit_message(devices, model, config))
    log.info(
        "planned %s on %d of %d devices (%s, %.3f s): %.2f ms/token, %.1f tokens/s",
        model.model_id,
        len(plan.stages),
        len(devices),
        plan.solver,
        solved,
        plan.predicted_ms_per_token,
        plan.predicted_tokens_per_s,
    )
    return plan


def _shortfall(devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig) -> str:
    """What is missing: on the coordinator, in total, or only in how whole layers pack."""
    have = sum(
        max(0, d.memory_bytes - config.headroom_bytes - config.runtime_bytes) for d in devices
    )
    need = model.total_bytes
    coordinator = devices[0]
    usable = coordinator.memory_bytes - config.headroom_bytes
    stage0 = config.runtime_bytes + model.embedding_bytes + model.layer_memory_bytes
    if usable < stage0:
        return (
            f"the coordinator {coordinator.name} cannot hold stage 0: it has "
            f"{max(0, usable) / GB:.2f} GB after {config.headroom_bytes / GB:.1f} GB headroom and "
            f"stage 0 needs at least {stage0 / GB:.2f} GB (runtime, embedding and one layer): "
            f"needs {(stage0 - usable) / GB:.1f} GB more on {coordinator.name}"
        )
    weights = model.n_layers * model.layer_weight_bytes + model.embedding_bytes
    weights += model.lm_head_bytes
    text = (
        f"the model does not fit: it needs {need / GB:.1f} GB ({weights / GB:.1f} GB of "
        f"{model.weight_format} weights, {model.n_layers * model.layer_kv_bytes / GB:.1f} GB of "
        f"KV cache for {model.context_length} tokens x {model.streams} stream(s)) and the "
        f"{len(devices)} device(s) offer {have / GB:.1f} GB after {config.headroom_bytes / GB:.1f}"
        f" GB headroom and {config.runtime_bytes / GB:.2f} GB runtime each"
    )
    if need > have:
        return f"{text}: needs {(need - have) / GB:.1f} GB more"
    return (
        f"{text}; the memory adds up but does not split into whole layers of "
        f"{model.layer_memory_bytes / GB:.2f} GB (with their KV cache)"
    )


def no_fit_message(
    devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
) -> str:
    """How much memory is missing and which weight format, context or model size would fit."""
    head = _shortfall(devices, model, config)
    smaller = WEIGHT_FORMATS[WEIGHT_FORMATS.index(model.weight_format) + 1 :]
    for fmt in smaller:
        if _fits(devices, model.with_weight_format(fmt), config):
            return f"{head}; {fmt} weights would fit (export with --weights {fmt})"
    context = model.context_length // 2
    while context >= _MIN_CONTEXT:
        shorter = model.with_workload(context_length=context, streams=model.streams)
        if _fits(devices, shorter, config):
            return f"{head}; a context of {context} tokens would fit"
        context //= 2
    if head.startswith("the coordinator"):
        return (
            f"{head}; lower --headroom-gb, free memory on {devices[0].name} or make another PC "
            "the coordinator"
        )
    smallest = model.with_weight_format(WEIGHT_FORMATS[-1])
    have = sum(
        max(0, d.memory_bytes - config.headroom_bytes - config.runtime_bytes) for d in devices
    )
    billions = have / max(1, smallest.total_bytes) * _parameters(model) / 1e9
    return (
        f"{head}; even {smallest.weight_format} weights do not fit: use a model of at most "
        f"about {billions:.1f}B parameters, add PCs, free memory or lower --headroom-gb"
    )


def _parameters(model: ModelProfile) -> int:
    return (
        model.n_layers * model.layer_parameters
        + model.embedding_parameters
        + model.lm_head_parameters
    )
