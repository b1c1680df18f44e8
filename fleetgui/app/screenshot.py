"""``fleetgui gui --screenshot DIR``: render each main view to a PNG, with real data.

With an export it deploys it (the deployment view shows the plan it deployed), sends a chat
message, waits for the streamed reply (the dashboard fills in meanwhile) and renders fleet,
deployment, dashboard and chat. Chat history goes to a temporary folder, not the user's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtWidgets import QWidget

from fleetgui.app.core import AppCore
from fleetgui.app.mode import ModeSettings
from fleetgui.app.views.main_window import MainWindow
from fleetgui.errors import FleetguiError
from fleetgui.modes import Mode
from fleetgui.runtime.draft_source import DraftSource

log = logging.getLogger(__name__)

VIEWS = ("fleet", "deployment", "dashboard", "chat")
SIZE = (1280, 800)
DEFAULT_PROMPT = "Write a Python function that adds two numbers."
STEP_TIMEOUT_S = 300.0


class ScreenshotError(FleetguiError):
    """A screenshot could not be made."""


@dataclass(frozen=True)
class ScreenshotRequest:
    out_dir: Path
    export_dir: Path | None = None
    draft_dir: DraftSource | None = None
    mode: ModeSettings | None = None  # None: PP+SD when there is a draft, else PP
    prompts: tuple[str, ...] = (DEFAULT_PROMPT,)
    max_new_tokens: int = 48


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise ScreenshotError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _deploy(core: AppCore, request: ScreenshotRequest) -> None:
    deployment = core.deployment
    errors: list[str] = []
    deployment.failed.connect(errors.append)
    if request.export_dir is None or not deployment.choose_model(request.export_dir):
        return
    mode = request.mode or ModeSettings(
        Mode.PP_SD if request.draft_dir else Mode.PP, "auto", request.draft_dir
    )
    core.inference.set_mode(mode)
    deployment.deploy(mode)
    await deployment.wait()
    if core.inference.pipeline is None:
        raise ScreenshotError(
            f"could not deploy {request.export_dir}: {errors[-1] if errors else 'see the log'}"
        )


async def _chat(core: AppCore, window: MainWindow, request: ScreenshotRequest) -> None:
    session = core.chats
    for prompt in request.prompts:
        conversation = session.new_conversation()
        config = session.get(conversation).config
        session.set_config(conversation, replace(config, max_new_tokens=request.max_new_tokens))
        window.chat_presenter.select_conversation(conversation)
        session.send(conversation, prompt)
        await _until(lambda c=conversation: not session.is_busy(c), "the chat reply")  # type: ignore[misc]
    window.chat_presenter.select_conversation(session.conversations()[0].id)
    window.chat_presenter.refresh_conversations()


async def _render(window: MainWindow, tab: QWidget, path: Path) -> None:
    window.tabs.setCurrentWidget(tab)
    # let Qt lay out and paint through the loop: processEvents() here, inside a task, would run
    # other tasks' wake-ups re-entrantly, which asyncio refuses (and those tasks never resume)
    for _ in range(3):
        await asyncio.sleep(0.02)
    if not window.grab().save(str(path), "PNG"):
        raise ScreenshotError(f"could not write {path}: check that the folder is writable")
    log.info("wrote %s", path)


async def take_screenshots(
    core: AppCore, window: MainWindow, request: ScreenshotRequest
) -> list[Path]:
    """Deploy (if an export is given), chat, and render every view; returns the PNG paths."""
    request.out_dir.mkdir(parents=True, exist_ok=True)
    window.resize(*SIZE)
    window.show()
    await _deploy(core, request)
    if core.inference.pipeline is not None:
        await _chat(core, window, request)
        await asyncio.sleep(0.4)  # let the dashboard's rate-limited update land
        window.dashboard.show_series(core.feed.store)
    tabs = (window.fleet_view, window.deploy_view, window.dashboard, window.chat)
    paths = []
    for name, tab in zip(VIEWS, tabs, strict=True):
        path = request.out_dir / f"{name}.png"
        await _render(window, tab, path)
        paths.append(path)
    return paths
