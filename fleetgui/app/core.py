"""The app's core objects, built once and handed to the main window (and to tests), and what
the window asks of several of them at once (a mode, export settings), so that no widget holds
that logic."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject

from fleetgui.app.chat.chats import Chats
from fleetgui.app.chat.history import HistoryStore
from fleetgui.app.dashboard.api_service import ApiService
from fleetgui.app.dashboard.fleet_bench import FleetBench
from fleetgui.app.dashboard.metrics_feed import MetricsFeed
from fleetgui.app.deploy.controller import DeploymentController
from fleetgui.app.deploy.interfaces import Deployer, DeviceSource
from fleetgui.app.deploy.local import LocalDeployer, LocalDeviceSource
from fleetgui.app.deploy.model_library import LibraryService, RootsFor
from fleetgui.app.fleet.actions import FleetActions, NoFleet
from fleetgui.app.fleet.worker_table import WorkerTableModel
from fleetgui.app.inference import InferenceService
from fleetgui.app.mode import ModeSettings
from fleetgui.app.settings import WEIGHTS, Settings
from fleetgui.fleet.profiling.this_pc import coordinator_info

log = logging.getLogger(__name__)


@dataclass
class AppCore:
    settings: Settings
    inference: InferenceService
    chats: Chats  # the conversations and their replies
    feed: MetricsFeed
    fleet: WorkerTableModel
    deployment: DeploymentController
    fleet_actions: FleetActions
    api: ApiService  # the switch serving the deployed model on the OpenAI-compatible API
    library: LibraryService  # the models found on this PC
    bench: FleetBench  # the dashboard's "Benchmark this fleet"

    def set_mode(self, mode: ModeSettings) -> str:
        """Decode in ``mode`` from now on (and at the next start); returns what the user must
        still do for it ("" when nothing)."""
        self.settings.set_mode(mode)
        self.inference.set_mode(mode)
        inference = self.inference
        if mode.mode.speculative and inference.pipeline is not None and not inference.has_draft:
            return (
                f"{mode.mode.label} needs a draft: choose a draft model or n-gram under "
                "Mode and press Deploy again"
            )
        return ""

    def set_export_weights(self, weights: str) -> None:
        """Export with ``weights`` from now on (ignored unless it is one of ``WEIGHTS``)."""
        if weights in WEIGHTS:
            self.deployment.export_weights = weights
            self.settings.update(export_weights=weights)

    def set_context(
        self, context: int, kv_reuse: bool, kv_budget_mb: int, *, save: bool = True
    ) -> None:
        """Plan and deploy with this context (0: the model's) and KV settings (budget 0:
        automatic) from the next Preview or Deploy on; kept unless ``save`` is False (a
        command line's one-off choice)."""
        self.deployment.set_context(context, kv_reuse, kv_budget_mb)
        if save:
            self.settings.update(context=context, kv_reuse=kv_reuse, kv_budget_mb=kv_budget_mb)

    def export(self, weights: str, stages: int) -> bool:
        """Export the chosen HuggingFace model with these settings, which are kept."""
        deployment = self.deployment
        deployment.export_weights, deployment.export_stages = weights, stages
        self.settings.update(export_weights=weights, export_stages=stages)
        return deployment.export()

    def name_stream(self, request: int, stream: int) -> None:
        """A chat reply's stream is charted under its conversation's title."""
        conversation = self.chats.conversation_of(request)
        if conversation is not None:
            self.feed.name_stream(stream, conversation, self.chats.get(conversation).title)


def build_core(
    *,
    settings_path: Path | None = None,
    history_dir: Path | None = None,
    deployer: Deployer | None = None,
    devices: DeviceSource | None = None,
    fleet_actions: FleetActions | None = None,
    fleet: WorkerTableModel | None = None,
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
    chats = Chats(inference, HistoryStore(history_dir), parent)
    feed = MetricsFeed(parent)
    fleet = WorkerTableModel(parent) if fleet is None else fleet
    fleet.set_coordinator(coordinator_info())
    deployment = DeploymentController(
        inference, deployer or LocalDeployer(), devices or LocalDeviceSource(), parent
    )
    values = settings.values
    deployment.export_weights = values.export_weights
    deployment.export_stages = values.export_stages
    deployment.objective = values.objective
    deployment.set_context(values.context, values.kv_reuse, values.kv_budget_mb)
    api = ApiService(inference, parent=parent)
    library = LibraryService(settings, library_roots, parent)
    bench = FleetBench(inference, deployment, api, parent=parent)
    return AppCore(
        settings,
        inference,
        chats,
        feed,
        fleet,
        deployment,
        fleet_actions or NoFleet(),
        api,
        library,
        bench,
    )
