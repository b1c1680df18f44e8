"""Starting the app: high-DPI defaults, the QApplication, qasync's loop, the main window."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QTimer
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
    # Qt would quit its loop when the last window closes, which stops qasync's loop under the
    # running task: its cleanup (API, model, fleet) would never run and run_until_complete
    # raise. The app ends when ``main`` returns instead (``interactive`` waits for the close).
    quit_on_close = app.quitOnLastWindowClosed()
    app.setQuitOnLastWindowClosed(False)

    async def wrapped() -> T:
        try:
            await core.fleet_actions.start()
            return await main(core, window)
        finally:
            await core.api.stop()
            await core.inference.unload()
            await core.fleet_actions.close()

    task = loop.create_task(wrapped())
    try:
        with _ctrl_c_cancels(task):
            return loop.run_until_complete(task)
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None  # the command ends with one line and status 130
    finally:
        window.close()
        loop.close()
        asyncio.set_event_loop(None)
        app.setQuitOnLastWindowClosed(quit_on_close)


@contextmanager
def _ctrl_c_cancels(task: asyncio.Task[Any]) -> Iterator[None]:
    """Ctrl+C (SIGINT) cancels ``task``, so the app closes through its usual cleanup; a second
    Ctrl+C ends the process at once. Python's default handler would raise KeyboardInterrupt in
    whatever Qt callback runs next (a traceback printed by Qt, the app running on). Python runs
    signal handlers only between bytecodes, so a timer wakes the interpreter while Qt waits."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set on the main thread
        return

    pressed = False

    def on_sigint(_signum: int, _frame: object) -> None:
        # only a flag: the handler can interrupt any code, logging's own writes included
        nonlocal pressed
        pressed = True
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def check() -> None:
        nonlocal pressed
        if pressed:
            pressed = False
            log.info("Ctrl+C: closing the app (Ctrl+C again ends it at once)")
            task.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    wake = QTimer()
    wake.timeout.connect(check)
    wake.start(200)
    try:
        yield
    finally:
        wake.stop()
        signal.signal(signal.SIGINT, previous)


async def interactive(core: AppCore, window: MainWindow) -> int:
    """Show the window and wait until it is closed."""
    closed = asyncio.Event()
    window.closed.connect(closed.set)
    window.show()
    log.debug("app window shown")
    await closed.wait()
    return 0
