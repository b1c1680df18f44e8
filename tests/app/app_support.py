"""What the app's tests share that is not a fixture (those are in ``tests/app/conftest.py``):
driving the real window offscreen (a window on this PC, deploying, a new chat, a message sent and
its reply awaited, a coroutine run on qasync's loop) and the app on a fleet of real workers (its
state, a slow coordinator, the fleet view's status, a plan previewed, the in-process reference).
Importing it needs PySide6: import it after ``pytest.importorskip("PySide6")``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextBlock, QTextDocument
from PySide6.QtWidgets import QApplication
from runtime_support import EXACT

from fleetgui.app.core import AppCore, build_core
from fleetgui.app.deploy.fleet import FleetDeployer
from fleetgui.app.deploy.interfaces import DeviceSource, MeasuredDevices, MeasureProgress
from fleetgui.app.deploy.local import LocalDeployer
from fleetgui.app.fleet.controller import FleetController
from fleetgui.app.views.main_window import MainWindow
from fleetgui.generation_config import GenerationConfig
from fleetgui.planner import DeviceProfile, Plan
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.loader import load_local_pipeline

TIMEOUT_MS = 60_000
QtBot = Any  # pytest-qt's fixture
MARKED = 4242  # a user state put on a transcript's blocks to see whether they were rebuilt


def blocks(document: QTextDocument) -> list[QTextBlock]:
    """The document's text blocks, in order."""
    found, block = [], document.begin()
    while block.isValid():
        found.append(block)
        block = block.next()
    return found


# -- the window on this PC ----------------------------------------------------------------------


def make_window(folder: Path) -> tuple[AppCore, MainWindow]:
    """The app deploying on this PC (f32, exact), its settings and chats in ``folder``, shown."""
    core = build_core(
        settings_path=folder / "settings.json",
        history_dir=folder / "chats",
        deployer=LocalDeployer(EXACT),
    )
    window = MainWindow(core)
    window.show()
    return core, window


def deploy(qtbot: QtBot, core: AppCore, window: MainWindow, export_dir: Path) -> None:
    """Choose ``export_dir`` in the deployment view and press Deploy."""
    view = window.deploy_view
    view.folder.setText(str(export_dir))
    view.choose_requested.emit(str(export_dir))
    with qtbot.waitSignal(core.deployment.deployed, timeout=TIMEOUT_MS):
        view.deploy_button.click()
    qtbot.waitUntil(lambda: core.deployment.state.value == "idle", timeout=TIMEOUT_MS)


def new_chat(window: MainWindow, max_new_tokens: int = 24) -> str:
    window.chat.new_requested.emit()
    conversation = window.chat_presenter.current_conversation
    assert conversation is not None
    window.core.chats.set_config(conversation, GenerationConfig(max_new_tokens=max_new_tokens))
    window.chat_presenter.select_conversation(conversation)
    return conversation


def send_and_wait(qtbot: QtBot, window: MainWindow, text: str) -> list[str]:
    """Type ``text`` in the chat and press Ctrl+Enter; returns the streamed reply's pieces."""
    session = window.core.chats
    deltas: list[str] = []

    def collect(_: str, piece: str) -> None:
        deltas.append(piece)

    session.reply_delta.connect(collect)
    chat = window.chat
    window.tabs.setCurrentWidget(chat)
    chat.input.setPlainText(text)
    chat.input.setFocus()
    try:
        with qtbot.waitSignal(session.reply_finished, timeout=TIMEOUT_MS):
            qtbot.keyClick(chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    finally:
        session.reply_delta.disconnect(collect)
    return deltas


def drive(coro: Coroutine[Any, Any, Any], timeout_s: float = 60.0) -> Any:
    """Run ``coro`` on qasync's loop (already running inside Qt) until it is done."""
    task = asyncio.ensure_future(coro)
    deadline = time.monotonic() + timeout_s
    while not task.done():
        if time.monotonic() > deadline:
            task.cancel()
            raise TimeoutError("the coroutine did not finish in time")
        QApplication.processEvents()
        time.sleep(0.005)
    return task.result()


# -- the app on a fleet of real workers ---------------------------------------------------------


@dataclass
class App:
    """The fleet app as the ``app`` fixture made it, with what it answered: ``results`` (each
    reply's) and ``requests`` (each chat's turns and config, as sent)."""

    core: AppCore
    window: MainWindow
    controller: FleetController
    deployer: FleetDeployer
    results: list[GenerationResult]
    requests: list[tuple[list[dict[str, str]], GenerationConfig]]  # a chat's turns, config


class SlowCoordinator(DeviceSource):
    """The fleet's own device profiles, with this PC ``factor`` times slower per layer. Every PC
    in these tests is the same machine, so their measured layer times are about equal and the
    planner would rightly keep a tiny model on this PC: a measured slow coordinator makes it use
    the workers."""

    def __init__(self, inner: DeviceSource, factor: float) -> None:
        self.inner = inner
        self.factor = factor

    def device_profiles(self) -> list[DeviceProfile]:
        here, *workers = self.inner.device_profiles()
        return [replace(here, ms_per_layer=here.ms_per_layer * self.factor), *workers]

    async def measured_profiles(
        self, model_dir: Path, progress: MeasureProgress | None = None
    ) -> MeasuredDevices:
        measured = await self.inner.measured_profiles(model_dir, progress)
        here, *workers = measured.profiles
        slow = replace(here, ms_per_layer=here.ms_per_layer * self.factor)
        return replace(measured, profiles=(slow, *workers))


@contextmanager
def fleet_window(core: AppCore) -> Iterator[MainWindow]:
    """The fleet app's window on ``core``, its fleet started; on exit the chats stop, the model
    is unloaded, the fleet closed and the window with it."""
    window = MainWindow(core)
    window.show()
    drive(core.fleet_actions.start())
    try:
        yield window
    finally:
        core.chats.stop_all()
        drive(core.inference.unload())
        drive(core.fleet_actions.close())
        window.close()


def status_of(window: MainWindow, name: str) -> str:
    """The fleet view's status text of worker ``name`` ("" if it has no row)."""
    table = window.fleet_view.table.model()
    for row in range(table.rowCount()):
        if table.index(row, 0).data() == name:
            status = table.index(row, 1).data()
            return status if status is not None else ""
    return ""


def reference_tokens(
    export_dir: Path, prompt: str, options: GenerationConfig, draft: Path | None = None
) -> list[int]:
    """The same reply generated in this process, every stage here."""

    async def run() -> list[int]:
        pipeline = load_local_pipeline(export_dir, draft_dir=draft, config=EXACT)
        try:
            return list((await pipeline.complete(prompt, options)).token_ids)
        finally:
            await pipeline.close()

    return drive(run())


def show_preview(
    qtbot: QtBot, app: App, export_dir: Path, measuring: list[str] | None = None
) -> Plan:
    """Choose ``export_dir`` and press Preview plan; returns the plan shown (the measuring
    steps reported meanwhile go to ``measuring``)."""
    deployment, view = app.core.deployment, app.window.deploy_view
    view.choose_requested.emit(str(export_dir))
    steps = measuring if measuring is not None else []
    deployment.measuring.connect(steps.append)
    try:
        with qtbot.waitSignal(deployment.plan_ready, timeout=TIMEOUT_MS) as shown:
            view.preview_requested.emit()
    finally:
        deployment.measuring.disconnect(steps.append)
    qtbot.waitUntil(lambda: deployment.state.value == "idle", timeout=TIMEOUT_MS)
    return shown.args[0]
