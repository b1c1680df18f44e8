"""Starting the app: high-DPI defaults, the QApplication, qasync's loop, the main window."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from fleetgui.app.core import AppCore, build_core
from fleetgui.app.theme import configure_high_dpi
from fleetgui.app.views.main_window import MainWindow

log = logging.getLogger(__name__)

T = TypeVar("T")
ICON = Path(__file__).resolve().parents[2] / "resources" / "icons" / "fleetgui.svg"


def qt_application(offscreen: bool = False) -> QApplication:
    """The process's QApplication (made once)."""
    if offscreen:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        return existing
    configure_high_dpi()
    app = QApplication(sys.argv[:1])
    app.setApplicationName("fleetgui")
    app.setOrganizationName("fleetgui")
    app.setDesktopFileName("fleetgui")
    if ICON.is_file():
        app.setWindowIcon(QIcon(str(ICON)))
    return app


def install_asyncgen_finalizer(loop: asyncio.AbstractEventLoop) -> None:
    """Close abandoned async generators as tasks on ``loop``, as asyncio's own loops do (qasync
    does not): a generator whose ``finally`` awaits (a pipeline stream releasing its stages)
    would otherwise be closed synchronously by the garbage collector and skip that cleanup."""

    def finalize(generator: Any) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.create_task, generator.aclose())

    sys.set_asyncgen_hooks(finalizer=finalize)


def run_in_qt_loop(
    main: Callable[[AppCore, MainWindow], Coroutine[Any, Any, T]],
    *,
    offscreen: bool = False,
    core: AppCore | None = None,
) -> T:
    """Build the app, run ``main(core, window)`` in Qt's loop through qasync, close cleanly."""
    import qasync

    app = qt_application(offscreen)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    install_asyncgen_finalizer(loop)
    core = core or build_core()
    window = MainWindow(core)

    async def wrapped() -> T:
        try:
            await core.fleet_actions.start()
            return await main(core, window)
        finally:
            await core.api.stop()
            await core.inference.unload()
            await core.fleet_actions.close()

    try:
        return loop.run_until_complete(wrapped())
    finally:
        window.close()
        loop.close()
        asyncio.set_event_loop(None)


async def interactive(core: AppCore, window: MainWindow) -> int:
    """Show the window and wait until it is closed."""
    closed = asyncio.Event()
    app = QApplication.instance()
    if isinstance(app, QApplication):
        app.lastWindowClosed.connect(closed.set)
    window.show()
    await closed.wait()
    return 0
