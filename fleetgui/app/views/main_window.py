"""The main window: one tab per view, and the status bar.

It wires the core objects to the widgets: the deployment tab through a
:class:`~fleetgui.app.views.deploy_presenter.DeployPresenter`, the chat tab through a
:class:`~fleetgui.app.views.chat_presenter.ChatPresenter`, the fleet, mode and dashboard (its
benchmark too) here.
What a request does to several core objects at once is :class:`~fleetgui.app.core.AppCore`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QLabel, QMainWindow, QTabWidget, QVBoxLayout, QWidget

from fleetgui import __version__
from fleetgui.app.chat.conversation import ASSISTANT
from fleetgui.app.core import AppCore
from fleetgui.app.dashboard.bench_record import bench_settings
from fleetgui.app.deploy.replicas import replica_text
from fleetgui.app.errors import user_message
from fleetgui.app.fleet.topology import kv_text
from fleetgui.app.fleet.topology_feed import DeploymentLayout, TopologyFeed
from fleetgui.app.inference import PipelineState
from fleetgui.app.mode import ModeSettings
from fleetgui.app.tasks import spawn
from fleetgui.app.theme import ThemeWatcher
from fleetgui.app.views.chat_presenter import ChatPresenter
from fleetgui.app.views.chat_view import ChatView
from fleetgui.app.views.dashboard_view import DashboardView
from fleetgui.app.views.deploy_presenter import DeployPresenter
from fleetgui.app.views.deploy_view import DeploymentView
from fleetgui.app.views.fleet_view import FleetView
from fleetgui.app.views.message_bar import MessageBar
from fleetgui.fleet.profiling.this_pc import coordinator_name

log = logging.getLogger(__name__)

FLEET_REFRESH_MS = 5000  # "last seen" texts are refreshed this often
BENCH_HOLD_NOTE = (
    "The dashboard's benchmark is running on the deployed model: messages you send now are "
    "answered when it ends (Cancel it on the Dashboard to end it sooner)."
)


class MainWindow(QMainWindow):
    closed = Signal()  # its close event was accepted (the close button, or close())

    def __init__(self, core: AppCore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self.setWindowTitle(f"fleetgui {__version__}")
        self.messages = MessageBar()
        self.fleet_view = FleetView(core.fleet)
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
        self._fleet_timer = QTimer(self)
        self._fleet_timer.setInterval(FLEET_REFRESH_MS)
        self._connect_signals()
        self._connect_live_views()
        core.inference.chat_format_changed.connect(self.chat.set_format_note)  # e.g. no template
        self._fleet_timer.start()
        self._show_initial_state()
        self.resize(1280, 800)

    # -- wiring -------------------------------------------------------------------------------

    def _connect_signals(self) -> None:
        core = self.core
        # fleet: its view follows the table model by itself
        core.fleet.worker_lost.connect(
            lambda name, reason: self.messages.show_error(f"worker {name} lost: {reason}")
        )
        self._fleet_timer.timeout.connect(self._refresh_fleet)
        self.fleet_view.add_requested.connect(self._add_worker)
        self.fleet_view.pair_requested.connect(self._pair_worker)
        self.fleet_view.forget_requested.connect(self._forget_worker)
        # deployment, and the model library in its tab
        self.deploy_presenter = DeployPresenter(core, self.deploy_view, self.messages, self)
        self._chat_when_deployed = False  # the model given at start: the chat opens when ready
        core.deployment.deployed.connect(self._on_deployed)
        core.deployment.failed.connect(self._not_deployed)
        core.deployment.cancelled.connect(self._not_deployed)
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
        self._connect_bench()
        # chat
        self.chat_presenter = ChatPresenter(core.chats, self.chat, self.messages, self)
        # theme: light or dark, following the system while the window is open
        self.theme = ThemeWatcher(self)
        self.theme.changed.connect(self._apply_theme)

    def _connect_bench(self) -> None:
        """The dashboard's "Benchmark this fleet", and the chat's note while it runs."""
        bench, panel = self.core.bench, self.dashboard.bench
        panel.start_requested.connect(self._start_bench)
        panel.cancel_requested.connect(bench.cancel)
        bench.availability_changed.connect(panel.set_available)
        bench.running_changed.connect(panel.set_running)
        bench.running_changed.connect(self._show_bench_in_chat)
        bench.progress.connect(panel.show_step)
        bench.finished.connect(panel.show_report)
        bench.stopped.connect(panel.show_stopped)
        bench.failed.connect(panel.show_stopped)
        bench.failed.connect(self.messages.show_error)
        panel.set_available(bench.why_not())

    def _start_bench(self, tokens: int, repeats: int, ks: str) -> None:
        try:
            settings = bench_settings(tokens, repeats, ks)
        except ValueError as exc:
            self.messages.show_error(str(exc))
            return
        self.core.bench.start(settings)

    def _show_bench_in_chat(self, running: bool) -> None:
        self.chat.set_hold_note(BENCH_HOLD_NOTE if running else "")

    def _show_initial_state(self) -> None:
        core = self.core
        self.mode_panel.set_mode(core.inference.mode)
        self._show_mode(core.inference.mode)
        self._show_pipeline_state(core.inference.state)
        self.chat.set_format_note(core.inference.chat_format_note)
        if core.inference.pipeline is None:  # first run: where to start is in the library
            self.tabs.setCurrentWidget(self.deploy_view)
        self.deploy_presenter.show_initial_state()
        self.chat_presenter.show_initial_state()

    def show_chat_when_deployed(self) -> None:
        """Open the chat once the deployment about to start is ready: the model given at start
        (``fleetgui gui EXPORT``, the demo), which the README says the chat is ready with."""
        self._chat_when_deployed = True

    # -- slots --------------------------------------------------------------------------------

    def _on_deployed(self, _description: str) -> None:
        if self._chat_when_deployed:
            self._chat_when_deployed = False
            self.tabs.setCurrentWidget(self.chat)

    def _not_deployed(self, _why: str) -> None:
        self._chat_when_deployed = False  # the deployment tab says why; stay there

    def _refresh_fleet(self) -> None:
        self.core.fleet.refresh()  # "last seen" texts and colours

    def _add_worker(self, address: str) -> None:
        spawn(self._fleet_action(self.core.fleet_actions.add_worker(address)), "add worker")

    def _pair_worker(self, name: str, code: str) -> None:
        spawn(self._fleet_action(self.core.fleet_actions.pair(name, code)), "pair worker")

    def _forget_worker(self, name: str) -> None:
        spawn(self._fleet_action(self.core.fleet_actions.forget_worker(name)), "forget worker")

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
        layout = DeploymentLayout(lambda: core.inference.llm)
        self.topology = TopologyFeed(core.fleet, layout, self)
        core.inference.metric.connect(self.topology.record)
        core.inference.state_changed.connect(self.topology.refresh)
        self.topology.updated.connect(self._show_topology)
        core.chats.reply_finished.connect(self._show_reused)
        self.topology.update_now()

    def _show_topology(self) -> None:
        topology = self.topology.topology()
        self.fleet_view.show_topology(topology)
        self.dashboard.show_kv(kv_text(topology, coordinator_name()))

    def _show_reused(self, conversation_id: str, _reason: str) -> None:
        """A reply ended: the dashboard says what it reused, the fleet view what is kept now."""
        try:
            messages = self.core.chats.get(conversation_id).messages
        except KeyError:  # deleted as it ended
            messages = []
        last = messages[-1] if messages else None
        if last is not None and last.role == ASSISTANT:
            self.dashboard.show_kv(reused=last.cached_tokens)
        self.topology.refresh()

    def _name_stream(self, request: int, stream: int) -> None:
        # a slot of the window (not of the core): the connection ends with the window
        self.core.name_stream(request, stream)

    def _show_replicas(self, *_: object) -> None:
        self.dashboard.show_replicas(replica_text(self.core.inference.pipeline))

    def _set_mode(self, mode: ModeSettings) -> None:
        notice = self.core.set_mode(mode)
        if notice:
            self.messages.show_info(notice)

    def _show_mode(self, mode: ModeSettings) -> None:
        self.mode_state.setText(f"Mode: {mode}")

    def _show_pipeline_state(self, state: PipelineState) -> None:
        ready = state is PipelineState.READY
        text = f"ready: {self.core.inference.description}" if ready else state.value
        self.pipeline_state.setText(f"Model: {text}")
        if state is PipelineState.NO_MODEL:
            self.deploy_view.on_unloaded()
        # first run, or the model unloaded: the library says where to start
        self.deploy_view.library.set_first_run(state is PipelineState.NO_MODEL)

    def _serve_api(self, on: bool) -> None:
        spawn(self.core.api.start() if on else self.core.api.stop(), "switch the API")

    def _apply_theme(self, _colors: object = None) -> None:
        self.dashboard.apply_theme()
        self.fleet_view.picture.apply_theme()
        self.chat.refresh_transcript()
        self._refresh_fleet()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        self.core.chats.stop_all()
        self.deploy_presenter.close()
        super().closeEvent(event)
        if event.isAccepted():
            self.closed.emit()
