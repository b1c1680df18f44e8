"""The app with the fleet plugged in: a :class:`FleetController` watches the workers, a
:class:`FleetDeployer` deploys on them, and the planner preview sees them."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject

from fleetgui.app.core import AppCore, build_core
from fleetgui.app.deploy.fleet import FleetDeployer
from fleetgui.app.deploy.interfaces import DeviceSource, MeasuredDevices, MeasureProgress
from fleetgui.app.deploy.model_library import RootsFor
from fleetgui.app.fleet.actions import FleetActions
from fleetgui.app.fleet.controller import FleetController, FleetControllerConfig
from fleetgui.app.fleet.worker_table import WorkerTableModel
from fleetgui.fleet.profiling.layer_times import measure_devices
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.net.keys import KeyPair
from fleetgui.planner import DeviceProfile

log = logging.getLogger(__name__)


class ControllerActions(FleetActions):
    """The fleet view's actions, done by a :class:`FleetController`; closing also ends the
    deployment (its workers unload)."""

    def __init__(self, controller: FleetController, deployer: FleetDeployer) -> None:
        self.controller = controller
        self.deployer = deployer

    async def add_worker(self, address: str) -> None:
        await self.controller.add_worker(address)

    async def pair(self, name: str, code: str) -> None:
        await self.controller.pair(name, code)

    async def forget_worker(self, name: str) -> None:
        self.controller.forget(name)

    async def start(self) -> None:
        await self.controller.start()

    async def close(self) -> None:
        await self.deployer.close()
        await self.controller.stop()


class ControllerDevices(DeviceSource):
    """This PC and the usable workers, for the plan preview; layer times measured on each of
    them for an export (:func:`~fleetgui.fleet.profiling.layer_times.measure_devices`)."""

    def __init__(
        self, controller: FleetController, coordinator: CoordinatorConfig | None = None
    ) -> None:
        self.controller = controller
        self.coordinator = coordinator or CoordinatorConfig()

    def device_profiles(self) -> list[DeviceProfile]:
        return self.controller.device_profiles()

    async def measured_profiles(
        self, model_dir: Path, progress: MeasureProgress | None = None
    ) -> MeasuredDevices:
        controller = self.controller
        return await measure_devices(
            controller.device_profiles(),
            controller.usable_endpoints(),
            controller.identity,
            model_dir,
            local_stage=self.coordinator.local.stage,
            timings_file=controller.config.timings_file,
            link_config=self.coordinator.link,
            progress=progress,
        )


def build_fleet_core(
    identity: KeyPair,
    *,
    controller_config: FleetControllerConfig | None = None,
    coordinator_config: CoordinatorConfig | None = None,
    settings_path: Path | None = None,
    history_dir: Path | None = None,
    library_roots: RootsFor | None = None,
    parent: QObject | None = None,
) -> tuple[AppCore, FleetController]:
    """The app's core objects deploying on the fleet; the controller starts with the app's loop
    (``AppCore.fleet_actions.start()``)."""
    fleet = WorkerTableModel(parent)
    controller = FleetController(fleet, identity, controller_config, parent)
    deployer = FleetDeployer(controller, coordinator_config)
    core = build_core(
        settings_path=settings_path,
        history_dir=history_dir,
        deployer=deployer,
        devices=ControllerDevices(controller, coordinator_config),
        fleet_actions=ControllerActions(controller, deployer),
        fleet=fleet,
        library_roots=library_roots,
        parent=parent,
    )
    return core, controller
