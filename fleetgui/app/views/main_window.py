"""The main window: one tab per view; all wiring between core objects and widgets happens in
``_connect_signals``."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QLabel, QMainWindow, QTabWidget, QVBoxLayout, QWidget

from fleetgui import __version__
from fleetgui.app.conversation import SamplingSettings
from fleetgui.app.copies import replica_text
from fleetgui.app.core import AppCore
from fleetgui.app.errors import user_message
from fleetgui.app.mode import ModeSettings
from fleetgui.app.model_library import use_entry
from fleetgui.app.settings import WEIGHTS
from fleetgui.app.tasks import spawn
from fleetgui.app.theme import ThemeWatcher
from fleetgui.app.topology_feed import DeploymentLayout, TopologyFeed
from fleetgui.app.views.chat_view import ChatView
from fleetgui.app.views.dashboard_view import DashboardView
from fleetgui.app.views.deploy_view import DeploymentView
from fleetgui.app.views.fleet_view import FleetView
from fleetgui.app.views.message_bar import MessageBar
from fleetgui.library import ModelEntry

log = logging.getLogger(__name__)

FLEET_REFRESH_MS = 5000  # "last seen" texts are refreshed this often
#: The model library is rescanned this often while the window is open (files that did not
#: change are not read again, so a rescan is cheap), and whenever asked.
LIBRARY_REFRESH_MS = 60_000


class MainWindow(QMainWindow):
    def __init__(self, core: AppCore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self.setWindowTitle(f"fleetgui {__version__}")
        self.messages = MessageBar()
        self.fleet_view = FleetView()
        self.deploy_view = DeploymentView()
        self.mode_panel = self.deploy_view.mode_panel
        self.dashboard = DashboardView()
        self.chat = ChatView()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.fleet_view, "Fleet")
        self.tabs.addTab(self.deploy_view, "Model && deployment")
        self.tabs.addTab(self.dashboard, "Dashboard")
        self.tabs.addTab(self.chat, "Chat")
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.messages)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.pipeline_state = QLabel()
        self.mode_state = QLabel()
        self.statusBar().addWidget(self.pipeline_state, 1)
        self.statusBar().addPermanentWidget(self.mode_state)
        self.current_conversation: str | None = None
        self._fleet_timer = QTimer(self)
        self._fleet_timer.setInterval(FLEET_REFRESH_MS)
        self._library_timer = QTimer(self)
        self._library_timer.setInterval(LIBRARY_REFRESH_MS)
        self._connect_signals()
        self._connect_live_views()
        core.inference.chat_format_changed.connect(self.chat.set_format_note)  # e.g. no template
        self._fleet_timer.start()
        self._library_timer.start()
        self._show_initial_state()
        self.resize(1280, 800)

    # -- wiring -------------------------------------------------------------------------------

    def _connect_signals(self) -> None:
        core = self.core
        # fleet
        fleet = core.fleet
        for signal in (fleet.worker_added, fleet.worker_changed, fleet.worker_removed):
            signal.connect(self._refresh_fleet)
        core.fleet.worker_lost.connect(
            lambda name, reason: self.messages.show_error(f"worker {name} lost: {reason}")
        )
        self._fleet_timer.timeout.connect(self._refresh_fleet)
        self.fleet_view.add_requested.connect(self._add_worker)
        self.fleet_view.pair_requested.connect(self._pair_worker)
        # deployment
        deployment, view = core.deployment, self.deploy_view
        view.choose_requested.connect(self._choose_model)
        view.export_requested.connect(self._export)
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
        ):
            signal.connect(slot)
        deployment.model_changed.connect(lambda folder, _: core.settings.update(model_dir=folder))
        view.weights.currentTextChanged.connect(self._set_export_weights)
        self._connect_library()
        deployment.failed.connect(self.messages.show_error)
        deployment.cancelled.connect(self.messages.show_info)
        # mode
        self.mode_panel.mode_changed.connect(self._set_mode)
        self.mode_panel.invalid.connect(self.messages.show_error)
        core.inference.mode_changed.connect(self._show_mode)
        core.inference.mode_changed.connect(self.mode_panel.set_mode)  # also when set by code
        core.inference.state_changed.connect(self._show_pipeline_state)
        # metrics
        core.inference.metric.connect(core.feed.record)
        # A method of this window, not a lambda: Qt drops the connection when the window is
        # destroyed, so a feed that outlives it never draws into deleted charts.
        core.feed.updated.connect(self._show_series)
        core.feed.paused_changed.connect(self.dashboard.set_paused)
        # a reply starting, streaming or ending changes which copy serves how many streams
        inference = core.inference
        for changed in (
            inference.started,
            inference.delta,
            inference.finished,
            inference.stopped,
            inference.failed,
            inference.state_changed,
        ):
            changed.connect(self._show_replicas)
        self.dashboard.pause_toggled.connect(core.feed.set_paused)
        self.dashboard.csv_requested.connect(lambda path: core.feed.export_csv(Path(path)))
        self.dashboard.clear_requested.connect(core.feed.clear)
        # the OpenAI-compatible API beside the chat
        self.dashboard.api.serve_toggled.connect(self._serve_api)
        core.api.state_changed.connect(self.dashboard.api.show_state)
        core.api.rate_changed.connect(self.dashboard.api.show_rate)
        # chat
        session, chat = core.session, self.chat
        chat.new_requested.connect(self._new_conversation)
        chat.delete_requested.connect(session.delete)
        chat.selected.connect(self.select_conversation)
        chat.send_requested.connect(self._send)
        chat.stop_requested.connect(session.stop)
        chat.regenerate_requested.connect(session.regenerate)
        chat.sampling_changed.connect(self._set_sampling)
        session.conversations_changed.connect(self._refresh_conversations)
        session.messages_changed.connect(self._on_messages_changed)
        session.reply_delta.connect(chat.append_delta)
        session.busy_changed.connect(self._on_busy)
        session.reply_failed.connect(lambda _, message: self.messages.show_error(message))
        # theme: light or dark, following the system while the window is open
        self.theme = ThemeWatcher(self)
        self.theme.changed.connect(self._apply_theme)

    def _connect_library(self) -> None:
        """The model library, in the deployment tab."""
        library, view = self.core.library, self.deploy_view.library
        library.entries_changed.connect(view.set_entries)
        library.scanning_changed.connect(view.set_scanning)
        library.failed.connect(self.messages.show_error)
        view.refresh_requested.connect(library.refresh)
        view.add_folder_requested.connect(library.add_folder)
        view.remove_folder_requested.connect(library.remove_folder)
        view.use_requested.connect(self._use_model)
        self.core.deployment.export_finished.connect(self._refresh_library)  # lists the export
        self._library_timer.timeout.connect(self._refresh_library)

    def _show_initial_state(self) -> None:
        core = self.core
        self._refresh_fleet()
        self.mode_panel.set_mode(core.inference.mode)
        self._show_mode(core.inference.mode)
        self._show_pipeline_state(core.inference.state)
        self.chat.set_format_note(core.inference.chat_format_note)
        self.deploy_view.weights.setCurrentText(core.deployment.export_weights)
        if core.inference.pipeline is None:  # first run: where to start is in the library
            self.tabs.setCurrentWidget(self.deploy_view)
        QTimer.singleShot(0, self, self._refresh_library)  # once the window is up; off-thread
        saved = core.settings.values.model_dir
        if saved and Path(saved).is_dir():
            core.deployment.choose_model(Path(saved))
        conversations = core.session.conversations()
        self.current_conversation = conversations[-1].id if conversations else None
        self._refresh_conversations()
        if self.current_conversation is not None:
            self.select_conversation(self.current_conversation)

    # -- slots --------------------------------------------------------------------------------

    def _refresh_fleet(self) -> None:
        self.fleet_view.set_rows(self.core.fleet.rows())

    def _add_worker(self, address: str) -> None:
        spawn(self._fleet_action(self.core.fleet_actions.add_worker(address)), "add worker")

    def _pair_worker(self, name: str, code: str) -> None:
        spawn(self._fleet_action(self.core.fleet_actions.pair(name, code)), "pair worker")

    async def _fleet_action(self, action: Coroutine[Any, Any, None]) -> None:
        try:
            await action
        except Exception as exc:
            self.messages.show_error(user_message(exc))

    def _show_series(self) -> None:
        self.dashboard.show_series(self.core.feed.store)

    def _connect_live_views(self) -> None:
        """The dashboard's names of chat streams, and the fleet picture: who runs which layers
        (read from the deployment), how busy each PC is, failovers."""
        core = self.core
        core.inference.stream_opened.connect(self._name_stream)
        layout = DeploymentLayout(core.deployment.deployer, lambda: core.inference.pipeline)
        self.topology = TopologyFeed(core.fleet, layout, self)
        core.inference.metric.connect(self.topology.record)
        core.inference.state_changed.connect(self.topology.refresh)
        self.topology.updated.connect(self._show_topology)
        self.topology.update_now()

    def _show_topology(self) -> None:
        self.fleet_view.show_topology(self.topology.topology())

    def _name_stream(self, request: int, stream: int) -> None:
        """A chat reply's stream is charted under its conversation's title."""
        session = self.core.session
        conversation = session.conversation_of(request)
        if conversation is not None:
            self.core.feed.name_stream(stream, conversation, session.get(conversation).title)

    def _show_replicas(self, *_: object) -> None:
        self.dashboard.show_replicas(replica_text(self.core.inference.pipeline))

    def _choose_model(self, folder: str) -> None:
        if folder.strip():
            self.core.deployment.choose_model(Path(folder.strip()).expanduser())

    def _refresh_library(self, *_: object) -> None:
        self.core.library.refresh()

    def _use_model(self, entry: ModelEntry) -> None:
        """Use on the fleet: export if needed and preview the plan (the deployment tab shows
        the progress bar, Cancel and then the plan)."""
        use_entry(self.core.deployment, entry, self.core.inference.mode)

    def _set_export_weights(self, weights: str) -> None:
        if weights in WEIGHTS:
            self.core.deployment.export_weights = weights
            self.core.settings.update(export_weights=weights)

    def _export(self, weights: str, stages: int) -> None:
        deployment = self.core.deployment
        deployment.export_weights, deployment.export_stages = weights, stages
        self.core.settings.update(export_weights=weights, export_stages=stages)
        deployment.export()

    def _set_mode(self, mode: ModeSettings) -> None:
        self.core.settings.set_mode(mode)
        self.core.inference.set_mode(mode)
        inference = self.core.inference
        if mode.mode.speculative and inference.pipeline is not None and not inference.has_draft:
            self.messages.show_info(
                f"{mode.mode.label} needs a draft: choose a draft model or n-gram under "
                "Mode and press Deploy again"
            )

    def _show_mode(self, mode: ModeSettings) -> None:
        self.mode_state.setText(f"Mode: {mode}")

    def _show_pipeline_state(self, state: str) -> None:
        self.pipeline_state.setText(f"Model: {state}")
        if state == "no model":
            self.deploy_view.on_unloaded()
        # first run, or the model unloaded: the library says where to start
        self.deploy_view.library.set_first_run(state == "no model")

    def _serve_api(self, on: bool) -> None:
        spawn(self.core.api.start() if on else self.core.api.stop(), "switch the API")

    def _new_conversation(self) -> None:
        self.current_conversation = self.core.session.new_conversation()
        self._refresh_conversations()
        self.select_conversation(self.current_conversation)
        self.chat.input.setFocus()

    def select_conversation(self, conversation_id: str) -> None:
        session = self.core.session
        self.current_conversation = conversation_id
        self.chat.show_conversation(
            session.get(conversation_id), session.reply_in_progress(conversation_id)
        )

    def _refresh_conversations(self) -> None:
        session = self.core.session
        items = [(c.id, c.title) for c in session.conversations()]
        if self.current_conversation not in {i for i, _ in items}:
            self.current_conversation = items[-1][0] if items else None
        self.chat.set_conversations(items, self.current_conversation)
        if self.current_conversation is None:
            self.chat.show_conversation(None, None, session.next_sampling)
        elif self.chat.current_id != self.current_conversation:
            self.select_conversation(self.current_conversation)

    def _send(self, conversation_id: str, text: str) -> None:
        if not conversation_id:  # none selected: the message starts a new conversation
            self._new_conversation()
            conversation_id = self.current_conversation or ""
        if self.core.session.send(conversation_id, text):
            self.chat.clear_input()

    def _set_sampling(self, conversation_id: str, sampling: SamplingSettings) -> None:
        session = self.core.session
        try:
            if conversation_id:
                session.set_sampling(conversation_id, sampling)
            else:
                session.set_next_sampling(sampling)
        except ValueError as exc:
            self.messages.show_error(str(exc))

    def _on_messages_changed(self, conversation_id: str) -> None:
        if conversation_id == self.current_conversation:
            self.select_conversation(conversation_id)

    def _on_busy(self, conversation_id: str, busy: bool) -> None:
        if conversation_id == self.current_conversation:
            self.select_conversation(conversation_id)

    def _apply_theme(self, _colors: object = None) -> None:
        self.dashboard.apply_theme()
        self.fleet_view.picture.apply_theme()
        self.chat.refresh_transcript()
        self._refresh_fleet()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        self.core.session.stop_all()
        self._library_timer.stop()
        self.core.library.close()
        super().closeEvent(event)
