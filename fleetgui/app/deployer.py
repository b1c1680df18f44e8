"""The deployment interfaces the fleet implements, and what they pass around.

A :class:`Deployer` turns an export (and a plan) into a running ``Pipeline``: on this PC
(:class:`fleetgui.app.local_deployer.LocalDeployer`) or across the fleet (push each worker's
shards with progress, load, link the ring). A :class:`DeviceSource` gives the planner preview the
profiles of the PCs that could take part, the coordinator first.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetgui.errors import FleetguiError
from fleetgui.planner import DeviceProfile, Plan, PlanConfig
from fleetgui.runtime.pipeline import Pipeline

log = logging.getLogger(__name__)


class DeployCancelledError(FleetguiError):
    """The user cancelled a deployment or export; nothing half-done was left behind."""


@dataclass(frozen=True)
class DeployRequest:
    """What to deploy."""

    export_dir: Path  # a fleetgui export (manifest.json)
    draft_dir: Path | None = None  # a one-stage draft export for PP+SD, run on the coordinator
    plan: Plan | None = None  # which device runs which layers; None: everything on this PC
    devices: tuple[DeviceProfile, ...] = ()  # what ``plan`` was made from (for re-planning)
    plan_config: PlanConfig | None = None


@dataclass(frozen=True)
class DeployProgress:
    """One step of a deployment on one PC, for a progress bar per worker."""

    worker: str  # device name, as in the plan
    step: str  # e.g. "sending stage_1.bin", "compiling", "ready"
    done: int  # units done (bytes, files or steps)
    total: int  # units in all (0: unknown)

    @property
    def fraction(self) -> float:
        return 1.0 if self.total <= 0 else min(1.0, self.done / self.total)

    def __str__(self) -> str:
        return f"{self.worker}: {self.step} ({self.fraction:.0%})"


ProgressCallback = Callable[[DeployProgress], None]


class Deployer(ABC):
    """Deploys an export and returns the pipeline that serves it.

    ``deploy`` runs as an asyncio task in the GUI's loop and must not block it (load and copy in
    executors or other processes). Cancelling the task must leave nothing half-done: partial
    files are never loaded, workers release what they loaded, and ``DeployCancelledError`` (or
    ``CancelledError``) propagates. ``progress`` is called in the loop's thread.
    """

    name: str = "deployer"  # shown in the app: "this PC", "fleet"

    @abstractmethod
    async def deploy(self, request: DeployRequest, progress: ProgressCallback) -> Pipeline: ...


class DeviceSource(ABC):
    """The PCs the planner preview may use, coordinator first."""

    @abstractmethod
    def device_profiles(self) -> list[DeviceProfile]: ...
