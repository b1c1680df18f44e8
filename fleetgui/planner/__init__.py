"""Device and model profiles and the layer-to-device assignment solver (pure functions).

Plain frozen dataclasses in, a :class:`Plan` out (or, for several users at once, a
:class:`Layout` of independent pipelines and whole copies: :func:`plan_layout`); no sockets or
Qt. The time model is described in :mod:`fleetgui.planner.cost`, the exact solver in
:mod:`fleetgui.planner.milp`. Measuring a PC (:mod:`fleetgui.planner.device_bench`) imports
OpenVINO and torch and is not imported here.
"""

from fleetgui.planner.baselines import brute_force, compute_proportional, memory_proportional
from fleetgui.planner.fixed_stages import PlanMismatchError, plan_fixed_stages, stage_groups
from fleetgui.planner.layout import Alternative, Layout, LayoutKind
from fleetgui.planner.layouts import candidate_layouts, plan_layout
from fleetgui.planner.model_profile import ModelProfile, ModelProfileError, load_model_profile
from fleetgui.planner.plan import LeftOut, Plan, PlanConfig, StageAssignment
from fleetgui.planner.profiles import (
    ComputeProfile,
    DeviceProfile,
    DevicesFileError,
    MachineProfile,
    load_devices,
    parse_devices,
    save_devices,
)
from fleetgui.planner.solver import NoPlanFitsError, solve, try_solve

__all__ = [
    "Alternative",
    "ComputeProfile",
    "DeviceProfile",
    "DevicesFileError",
    "Layout",
    "LayoutKind",
    "LeftOut",
    "MachineProfile",
    "ModelProfile",
    "ModelProfileError",
    "NoPlanFitsError",
    "Plan",
    "PlanConfig",
    "PlanMismatchError",
    "StageAssignment",
    "brute_force",
    "candidate_layouts",
    "compute_proportional",
    "load_devices",
    "load_model_profile",
    "memory_proportional",
    "parse_devices",
    "plan_fixed_stages",
    "plan_layout",
    "save_devices",
    "solve",
    "stage_groups",
    "try_solve",
]
