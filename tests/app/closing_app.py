"""Run ``fleetgui`` (its real command line, argv as given) and close the main window with
``window.close()``, as its close button does, once the app is in the state named by
``CLOSE_APP_WHEN``: ``shown`` (at once), ``ready`` (the model deployed), ``api`` (the API
switched on too) or ``streaming`` (a chat reply is streaming); all but ``shown`` need an
EXPORT_DIR. ``demo-app TARGET HOST:PORT,... IDENTITY_DIR`` instead runs the app as ``fleetgui
demo`` starts it on its local workers (``fleetgui.commands.demo.gui_arguments``), on workers
already running. The tests check the exit status, the output and what the app left behind."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from fleetgui.app import application
from fleetgui.generation_config import GenerationConfig

WHEN = os.environ.get("CLOSE_APP_WHEN", "shown")
interactive = application.interactive


async def _then_close(core: Any, window: Any) -> None:
    from fleetgui.app.inference import PipelineState

    if WHEN in ("ready", "api", "streaming"):
        while core.inference.state is not PipelineState.READY or core.deployment.state != "idle":
            await asyncio.sleep(0.05)
        print(f"open tab: {window.tabs.tabText(window.tabs.currentIndex())}", file=sys.stderr)
    if WHEN == "api":
        core.api.port = 0  # any free port: the default one may be taken on the test machine
        window.dashboard.api.switch.setChecked(True)
        while not core.api.state.serving and not core.api.state.note:
            await asyncio.sleep(0.05)
        print(f"api: {core.api.state}", file=sys.stderr)
    elif WHEN == "streaming":
        streaming = asyncio.Event()
        core.chats.reply_delta.connect(lambda *_: streaming.set())
        chat = core.chats.new_conversation(GenerationConfig(max_new_tokens=4000))
        core.chats.send(chat, "Tell me a long story.")
        await streaming.wait()
        print("a reply is streaming", file=sys.stderr)
    else:
        await asyncio.sleep(0.5)
    window.close()


async def _closing(core: Any, window: Any) -> int:
    task = asyncio.ensure_future(_then_close(core, window))
    try:
        return await interactive(core, window)
    finally:
        task.cancel()


application.interactive = _closing


def _demo_app(target: str, workers: str, identity: str) -> int:
    from pathlib import Path

    from fleetgui.cli import build_parser
    from fleetgui.commands import demo, gui
    from fleetgui.logging_setup import configure_logging
    from fleetgui.runtime.draft_source import NGRAM

    configure_logging("info", process="demo")
    args = build_parser().parse_args(["demo", "--mode", "pp"])
    return gui.run(demo.gui_arguments(args, Path(target), NGRAM, workers, Path(identity)))


if __name__ == "__main__":
    if sys.argv[1] == "demo-app":
        sys.exit(_demo_app(*sys.argv[2:5]))
    from fleetgui.cli import main

    sys.exit(main(sys.argv[1:]))
