"""Re-planning a running fleet (LinguaLinked's runtime load balancing): watch each device's
measured stage speed, and when it drifts or a device is lost, ask the planner whether another
placement of the export's stages is worth a reload.

The speed monitor works on the stage timings every request brings back (``compute_ms`` per
stage: the worker's time inside its inference calls, not waiting or transfer). Only decode-sized
passes count (one token, or a speculative ``K + 1`` verification; prefill chunks are left out).
The first few passes of each (stage, positions) pair after a deployment (after two warm-up passes,
which are slower) set its baseline; a
device's drift ratio is the median of its recent passes divided by their baselines, so it
compares the device with itself during use and does not depend on how the planner's 1-layer
micro-benchmark relates to a many-layer stage. A ratio beyond the threshold (20 % by default)
becomes a :class:`~fleetgui.fleet.replanning.replan.SpeedDrift` with the device's profile scaled
by it.

:class:`LiveReplanner` holds the plan's inputs (device profiles, model profile, the export's
stage boundaries) and turns both kinds of event into a new
:class:`~fleetgui.fleet.placement.assignment.Assignment`, or None to keep the current one, with
the profiles after the event and the "is another layout worth a reload" of
:mod:`~fleetgui.fleet.replanning.replan`. It has no sockets: a session's
:class:`~fleetgui.fleet.replanning.watcher.ReplanWatcher` feeds it and applies what it returns.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from fleetgui.fleet.placement.assignment import Assignment, assignment_from_plan
from fleetgui.fleet.replanning.replan import (
    DEFAULT_DRIFT,
    DEFAULT_MIN_GAIN,
    DeviceLost,
    SpeedDrift,
    improve,
    updated_devices,
)
from fleetgui.planner import cost
from fleetgui.planner.fixed_stages import plan_fixed_stages
from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import Plan, PlanConfig
from fleetgui.planner.profiles import DeviceProfile
from fleetgui.shard import Shard

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanContext:
    """What the deployed plan was made from: device profiles (coordinator first), the model's
    profile, the export's stages (the shard of each) and the planner's settings."""

    devices: tuple[DeviceProfile, ...]
    model: ModelProfile
    stages: tuple[Shard, ...]
    config: PlanConfig = field(default_factory=PlanConfig)

    @property
    def coordinator(self) -> str:
        return self.devices[0].name


@dataclass(frozen=True)
class ReplanConfig:
    """When the running fleet re-plans."""

    drift_threshold: float = DEFAULT_DRIFT  # a device's speed changed by more than this fraction
    min_gain: float = DEFAULT_MIN_GAIN  # ... and another layout is at least this much better
    warmup_passes: int = 2  # passes of a (stage, positions) pair not counted after a load
    baseline_passes: int = 6  # the passes after those that set its baseline
    window: int = 12  # recent passes per device the drift ratio is the median of
    max_positions: int = 17  # larger passes are prefill chunks: not watched
    cooldown_s: float = 5.0  # after a re-plan, wait before judging speeds again


class SpeedMonitor:
    """Each device's decode speed relative to its own baseline (see module doc)."""

    def __init__(self, config: ReplanConfig) -> None:
        self.config = config
        self._first: dict[tuple[str, int, int], list[float]] = {}
        self._baseline: dict[tuple[str, int, int], float] = {}
        self._recent: dict[str, deque[float]] = {}

    def reset(self, device: str | None = None) -> None:
        """Forget ``device``'s baselines (every device's by default, after the layout changed)."""
        for table in (self._first, self._baseline):
            for key in [k for k in table if device is None or k[0] == device]:
                del table[key]
        for name in [n for n in self._recent if device is None or n == device]:
            del self._recent[name]

    def add(self, device: str, stage: int, positions: int, ms: float) -> None:
        """One pass of ``stage`` over ``positions`` positions on ``device`` took ``ms``."""
        if positions > self.config.max_positions or ms <= 0:
            return
        key = (device, stage, positions)
        baseline = self._baseline.get(key)
        if baseline is None:
            first = self._first.setdefault(key, [])
            first.append(ms)
            warm = first[self.config.warmup_passes :]  # the first passes after a load are slow
            if len(warm) >= self.config.baseline_passes:
                self._baseline[key] = statistics.median(warm)
                del self._first[key]
            return
        recent = self._recent.setdefault(device, deque(maxlen=self.config.window))
        recent.append(ms / baseline)

    def ratio(self, device: str) -> float | None:
        """The device's current speed over its baseline (2.0: twice as slow), or None until a
        full window of passes was seen."""
        recent = self._recent.get(device)
        if recent is None or len(recent) < self.config.window:
            return None
        return statistics.median(recent)


class LiveReplanner:
    """Decides re-plans for a running fleet (see module doc)."""

    def __init__(self, context: PlanContext, config: ReplanConfig | None = None) -> None:
        self.context = context
        self.config = config or ReplanConfig()
        self.monitor = SpeedMonitor(self.config)
        self._stage_device: dict[int, str] = {}
        self._quiet_until = 0.0
        self.events: list[str] = []  # what happened, for logs, the app and tests

    # -- the layout in force ------------------------------------------------------------------

    def deployed(self, assignment: Assignment) -> None:
        """``assignment`` is now running: watch its stages afresh."""
        owner = {i: self.context.coordinator for i in assignment.local}
        for member in assignment.members:
            owner.update({i: member.name for i in member.indices})
        self._stage_device = owner
        self.monitor.reset()
        self._quiet_until = time.monotonic() + self.config.cooldown_s

    def plan_of(self, assignment: Assignment, devices: Sequence[DeviceProfile]) -> Plan | None:
        """``assignment`` scored as a plan with ``devices``' profiles; None when the
        coordinator runs no stage (the planner always gives it the first) or a device of the
        assignment has no profile."""
        if not assignment.local:
            return None
        by_name = {d.name: d for d in devices}
        parts = [(self.context.coordinator, assignment.local)]
        parts += [(m.name, m.indices) for m in assignment.members]
        if any(name not in by_name for name, _ in parts):
            return None
        stages = self.context.stages
        ring = [
            (by_name[name], sum(stages[i].n_stage_layers for i in indices))
            for name, indices in parts
        ]
        return cost.evaluate(ring, self.context.model, self.context.config, solver="deployed")

    # -- events -------------------------------------------------------------------------------

    def observe(self, stage: int, positions: int, ms: float) -> SpeedDrift | None:
        """Feed one stage timing; a :class:`SpeedDrift` when its device crossed the threshold."""
        device = self._stage_device.get(stage)
        if device is None:
            return None
        self.monitor.add(device, stage, positions, ms)
        ratio = self.monitor.ratio(device)
        if ratio is None or abs(ratio - 1.0) <= self.config.drift_threshold:
            return None
        if time.monotonic() < self._quiet_until:
            return None
        profile = next((d for d in self.context.devices if d.name == device), None)
        if profile is None:
            return None
        return SpeedDrift(device, profile.ms_per_layer * ratio)

    def _fixed_solver(
        self, devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
    ) -> Plan:
        return plan_fixed_stages(devices, model, self.context.stages, config)

    def on_drift(
        self, drift: SpeedDrift, assignment: Assignment, usable: Sequence[str]
    ) -> Assignment | None:
        """Record the device's new speed; a better assignment, or None to keep ``assignment``."""
        devices = updated_devices(self.context.devices, drift)
        old = next(d for d in self.context.devices if d.name == drift.device).ms_per_layer
        self.context = replace(self.context, devices=tuple(devices))
        self.events.append(f"{drift.device}: {old:.2f} -> {drift.ms_per_layer:.2f} ms per layer")
        self.monitor.reset(drift.device)  # its baseline is taken afresh at the new speed
        self._quiet_until = time.monotonic() + self.config.cooldown_s
        return self._better(assignment, usable, f"{drift.device} changed speed")

    def on_lost(
        self, device: str, assignment: Assignment, usable: Sequence[str]
    ) -> Assignment | None:
        """``device`` is gone and ``assignment`` is what the failover left running: a better
        assignment over the remaining devices, or None to keep it."""
        if all(d.name != device for d in self.context.devices):
            return None
        devices = tuple(updated_devices(self.context.devices, DeviceLost(device)))
        self.context = replace(self.context, devices=devices)
        self.events.append(f"{device}: lost")
        return self._better(assignment, usable, f"{device} was lost")

    def _better(self, assignment: Assignment, usable: Sequence[str], why: str) -> Assignment | None:
        devices = [self.context.devices[0]]
        devices += [d for d in self.context.devices[1:] if d.name in usable]
        current = self.plan_of(assignment, devices)
        if current is None:
            log.info("%s: the deployed layout cannot be scored; not re-planning", why)
            return None
        new = improve(
            current,
            devices,
            self.context.model,
            config=self.context.config,
            min_gain=self.config.min_gain,
            solver=self._fixed_solver,
        )
        if new is None:
            self.events.append(f"{why}: keeping the layout ({current.score:.1f} ms)")
            return None
        self.events.append(
            f"{why}: re-planned, {current.score:.1f} -> {new.score:.1f} ms per token"
        )
        return assignment_from_plan(
            new, self.context.stages, list(usable), coordinator=self.context.coordinator
        )
