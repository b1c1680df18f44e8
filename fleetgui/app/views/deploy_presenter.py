"""``DeployPresenter``: the deployment tab's wiring to the
:class:`~fleetgui.app.deploy.controller.DeploymentController` and the model library.

It is not a widget: it connects the deployment view's (and its library's) requests to the
controller, the library and the settings, and shows their progress and results in the view. It
is a child of the main window, so Qt drops its connections when the window goes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, QTimer

from fleetgui.app.core import AppCore
from fleetgui.app.deploy.model_choice import ModelKind, export_shape
from fleetgui.app.deploy.model_library import use_entry
from fleetgui.app.views.deploy_view import DeploymentView
from fleetgui.app.views.message_bar import MessageBar
from fleetgui.library import ModelEntry

log = logging.getLogger(__name__)

#: The model library is rescanned this often while the window is open (files that did not
#: change are not read again, so a rescan is cheap), and whenever asked.
LIBRARY_REFRESH_MS = 60_000


class DeployPresenter(QObject):
    """The deployment view, the model library in it, and what they drive, kept in step."""

    def __init__(
        self, core: AppCore, view: DeploymentView, messages: MessageBar, parent: QObject
    ) -> None:
        super().__init__(parent)
        self.core = core
        self.view = view
        self._library_timer = QTimer(self)
        self._library_timer.setInterval(LIBRARY_REFRESH_MS)
        deployment = core.deployment
        view.choose_requested.connect(self._choose_model)
        view.export_requested.connect(core.export)
        view.preview_requested.connect(lambda: deployment.preview_plan(core.inference.mode))
        view.deploy_requested.connect(lambda: deployment.deploy(core.inference.mode))
        view.cancel_requested.connect(deployment.cancel)
        for signal, slot in (
            (deployment.model_changed, view.on_model_changed),
            (deployment.weights_described, view.on_weights_described),
            (deployment.state_changed, view.on_state),
            (deployment.export_progress, view.on_export_progress),
            (deployment.plan_ready, view.on_plan),
            (deployment.layout_ready, view.on_layout),
            (deployment.measuring, view.on_measuring),
            (deployment.layer_times_ready, view.on_layer_times),
            (deployment.deploy_progress, view.on_deploy_progress),
            (deployment.deployed, view.on_deployed),
            (deployment.context_changed, view.context_panel.show_values),
        ):
            signal.connect(slot)
        deployment.model_changed.connect(lambda folder, _: core.settings.update(model_dir=folder))
        deployment.model_changed.connect(self._show_export_settings)
        view.weights.currentTextChanged.connect(core.set_export_weights)
        view.context_panel.changed.connect(core.set_context)
        self._connect_library(messages)
        deployment.failed.connect(messages.show_error)
        deployment.cancelled.connect(messages.show_info)
        self._library_timer.start()

    def _connect_library(self, messages: MessageBar) -> None:
        """The model library, in the deployment tab."""
        library, view = self.core.library, self.view.library
        library.entries_changed.connect(view.set_entries)
        library.scanning_changed.connect(view.set_scanning)
        library.failed.connect(messages.show_error)
        view.refresh_requested.connect(library.refresh)
        view.add_folder_requested.connect(library.add_folder)
        view.remove_folder_requested.connect(library.remove_folder)
        view.use_requested.connect(self._use_model)
        self.core.deployment.export_finished.connect(self._refresh_library)  # lists the export
        self._library_timer.timeout.connect(self._refresh_library)

    def show_initial_state(self) -> None:
        """The saved export settings and model; the library is scanned once the window is up."""
        core = self.core
        deployment = core.deployment
        self.view.show_export_settings(deployment.export_weights, deployment.export_stages)
        self.view.context_panel.show_values(
            deployment.context or 0, deployment.kv_reuse, (deployment.kv_budget or 0) >> 20
        )
        QTimer.singleShot(0, self, self._refresh_library)  # once the window is up; off-thread
        saved = core.settings.values.model_dir
        if saved and Path(saved).is_dir():
            core.deployment.choose_model(Path(saved))

    def _show_export_settings(self, folder: str, kind: ModelKind) -> None:
        """An export shows its own weights and stages (nothing to export); any other model the
        settings its export will use."""
        shape = export_shape(Path(folder), kind)
        deployment = self.core.deployment
        weights, stages = shape or (deployment.export_weights, deployment.export_stages)
        self.view.show_export_settings(weights, stages, editable=shape is None)

    def close(self) -> None:
        """The window closes: no more rescans, and the library's scan stops."""
        self._library_timer.stop()
        self.core.library.close()

    def _choose_model(self, folder: str) -> None:
        if folder.strip():
            self.core.deployment.choose_model(Path(folder.strip()).expanduser())

    def _refresh_library(self, *_: object) -> None:
        self.core.library.refresh()

    def _use_model(self, entry: ModelEntry) -> None:
        """Use on the fleet: export if needed and preview the plan (the deployment tab shows
        the progress bar, Cancel and then the plan)."""
        use_entry(self.core.deployment, entry, self.core.inference.mode)
