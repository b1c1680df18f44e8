"""The app with the fleet plugged in: a :class:`FleetController` watches the workers, a
:class:`FleetDeployer` deploys on them, and the planner preview sees them."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject

from fleetgui.app.core import AppCore, build_core
from fleetgui.app.deployer import DeviceSource
from fleetgui.app.fleet_actions import FleetActions
from fleetgui.app.fleet_controller import FleetController, FleetControllerConfig
from fleetgui.app.fleet_deployer import FleetDeployer
from fleetgui.app.fleet_model import FleetModel
from fleetgui.fleet.coordinator import CoordinatorConfig
from fleetgui.fleet.keys import KeyPair
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

    async def start(self) -> None:
        await self.controller.start()

    async def close(self) -> None:
        await self.deployer.close()
        await self.controller.stop()


class ControllerDevices(DeviceSource):
    """This PC and the usable workers, for the plan preview."""

    def __init__(self, controller: FleetController) -> None:
        self.controller = controller

    def device_profiles(self) -> list[DeviceProfile]:
        return self.controller.device_profiles()


def build_fleet_core(
    identity: KeyPair,
    *,
    controller_config: FleetControllerConfig | None = None,
    coordinator_config: CoordinatorConfig | None = None,
    settings_path: Path | None = None,
    history_dir: Path | None = None,
    parent: QObject | None = None,
) -> tuple[AppCore, FleetController]:
    """The app's core objects deploying on the fleet; the controller starts with the app's loop
    (``AppCore.fleet_actions.start()``)."""
    fleet = FleetModel(parent)
    controller = FleetController(fleet, identity, controller_config, parent)
    deployer = FleetDeployer(controller, coordinator_config)
    core = build_core(
        settings_path=settings_path,
        history_dir=history_dir,
        deployer=deployer,
        devices=ControllerDevices(controller),
        fleet_actions=ControllerActions(controller, deployer),
        fleet=fleet,
        parent=parent,
    )
    return core, controller
