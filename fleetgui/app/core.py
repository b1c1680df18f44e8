"""The app's core objects, built once and handed to the main window (and to tests)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject

from fleetgui.app.api_service import ApiService
from fleetgui.app.chat_session import ChatSession
from fleetgui.app.deployer import Deployer, DeviceSource
from fleetgui.app.deployment import DeploymentController
from fleetgui.app.fleet_actions import FleetActions, NoFleet
from fleetgui.app.fleet_model import FleetModel
from fleetgui.app.history import HistoryStore
from fleetgui.app.inference import InferenceService
from fleetgui.app.local_deployer import LocalDeployer, LocalDeviceSource
from fleetgui.app.local_pc import coordinator_info
from fleetgui.app.metrics_feed import MetricsFeed
from fleetgui.app.model_library import LibraryService, RootsFor
from fleetgui.app.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class AppCore:
    settings: Settings
    inference: InferenceService
    session: ChatSession
    feed: MetricsFeed
    fleet: FleetModel
    deployment: DeploymentController
    fleet_actions: FleetActions
    api: ApiService  # the switch serving the deployed model on the OpenAI-compatible API
    library: LibraryService  # the models found on this PC


def build_core(
    *,
    settings_path: Path | None = None,
    history_dir: Path | None = None,
    deployer: Deployer | None = None,
    devices: DeviceSource | None = None,
    fleet_actions: FleetActions | None = None,
    fleet: FleetModel | None = None,
    library_roots: RootsFor | None = None,
    parent: QObject | None = None,
) -> AppCore:
    """The core objects with the saved settings applied. Without arguments: the platform's
    folders, deployment on this PC, no fleet. ``fleet`` is the worker table the fleet code
    writes into (made here when not given); ``library_roots`` where the model library looks
    (default: this PC's well-known places, :func:`fleetgui.library.default_roots`)."""
    settings = Settings(settings_path, parent)
    inference = InferenceService(parent)
    inference.set_mode(settings.values.mode_settings())
    session = ChatSession(inference, HistoryStore(history_dir), parent)
    feed = MetricsFeed(parent)
    fleet = FleetModel(parent) if fleet is None else fleet
    fleet.set_coordinator(coordinator_info())
    deployment = DeploymentController(
        inference, deployer or LocalDeployer(), devices or LocalDeviceSource(), parent
    )
    values = settings.values
    deployment.export_weights = values.export_weights
    deployment.export_stages = values.export_stages
    deployment.objective = values.objective
    api = ApiService(inference, parent=parent)
    library = LibraryService(settings, library_roots, parent)
    return AppCore(
        settings,
        inference,
        session,
        feed,
        fleet,
        deployment,
        fleet_actions or NoFleet(),
        api,
        library,
    )
