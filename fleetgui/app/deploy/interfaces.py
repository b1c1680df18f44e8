"""The deployment interfaces the fleet implements, and what they pass around.

A :class:`Deployer` turns an export (and a plan) into a running ``LLMPipeline``: on this PC
(:class:`fleetgui.app.deploy.local.LocalDeployer`) or across the fleet (push each worker's
shards with progress, load, link the ring). A :class:`DeviceSource` gives the planner preview the
profiles of the PCs that could take part, the coordinator first: estimated at once
(``device_profiles``), or with layer times measured for the chosen model (``measured_profiles``,
:class:`MeasuredDevices` says which are still estimates and why).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgui.errors import FleetguiError
from fleetgui.fleet.profiling.measured import MeasuredDevices, MeasureProgress
from fleetgui.planner import DeviceProfile, Plan, PlanConfig
from fleetgui.runtime.draft_source import DraftSource

if TYPE_CHECKING:
    from fleetgui.llm_pipeline import LLMPipeline
    from fleetgui.runtime.loader import LocalPipelineConfig

log = logging.getLogger(__name__)


class DeployCancelledError(FleetguiError):
    """The user cancelled a deployment or export; nothing half-done was left behind."""


@dataclass(frozen=True)
class DeployRequest:
    """What to deploy."""

    export_dir: Path  # a fleetgui export (manifest.json)
    # a one-stage draft export for PP+SD, run on the coordinator, or "ngram" (no draft model)
    draft_dir: DraftSource | None = None
    plan: Plan | None = None  # which device runs which layers; None: everything on this PC
    devices: tuple[DeviceProfile, ...] = ()  # what ``plan`` was made from (for re-planning)
    plan_config: PlanConfig | None = None
    # workers per independent replica instead of ``plan`` (one worker: a whole copy)
    groups: tuple[tuple[str, ...], ...] = ()
    context: int | None = None  # tokens a prompt and its answer may hold (None: the model's)
    kv_reuse: bool = True  # finished answers' KV stays on the stages for the next turn
    kv_budget: int | None = None  # bytes of idle conversations' KV per PC (None: automatic)

    def local_config(self, config: LocalPipelineConfig) -> LocalPipelineConfig:
        """``config`` with this request's context and KV settings."""
        from fleetgui.runtime.loader import with_context

        return with_context(
            config, context=self.context, kv_reuse=self.kv_reuse, kv_budget=self.kv_budget
        )


@dataclass(frozen=True)
class DeployStep:
    """One step of a deployment on one PC, for a progress bar per worker (a fleet's
    :class:`fleetgui.fleet.ring.shard_push.DeployProgress`, bytes sent, is shown as one of
    these)."""

    worker: str  # device name, as in the plan
    step: str  # e.g. "sending stage_1.bin", "compiling", "ready"
    done: int  # units done (bytes, files or steps)
    total: int  # units in all (0: unknown)

    @property
    def fraction(self) -> float:
        return 1.0 if self.total <= 0 else min(1.0, self.done / self.total)

    def __str__(self) -> str:
        return f"{self.worker}: {self.step} ({self.fraction:.0%})"


ProgressCallback = Callable[[DeployStep], None]


class Deployer(ABC):
    """Deploys an export and returns the pipeline that serves it (closing it ends the
    deployment).

    ``deploy`` runs as an asyncio task in the GUI's loop and must not block it (load and copy in
    executors or other processes). Cancelling the task must leave nothing half-done: partial
    files are never loaded, workers release what they loaded, and ``DeployCancelledError`` (or
    ``CancelledError``) propagates. ``progress`` is called in the loop's thread.
    """

    name: str = "deployer"  # shown in the app: "this PC", "fleet"

    @abstractmethod
    async def deploy(self, request: DeployRequest, progress: ProgressCallback) -> LLMPipeline: ...


class DeviceSource(ABC):
    """The PCs the planner preview may use, coordinator first."""

    @abstractmethod
    def device_profiles(self) -> list[DeviceProfile]:
        """At once, without measuring: layer times are estimates."""

    async def measured_profiles(
        self, model_dir: Path, progress: MeasureProgress | None = None
    ) -> MeasuredDevices:
        """The profiles with layer times measured for ``model_dir`` where this source can
        (off the GUI thread); this default measures nothing."""
        profiles = tuple(self.device_profiles())
        return MeasuredDevices(profiles, {p.name: "not measured" for p in profiles})
