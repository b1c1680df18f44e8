"""Run ``fleetgui`` (its real command line, argv as given) and close the main window with
``window.close()``, as its close button does, once the app is in the state named by
``CLOSE_APP_WHEN``: ``shown`` (at once), ``api`` (the API switched on first) or ``streaming``
(a chat reply is streaming; needs a deployed EXPORT_DIR). Run by ``test_application.py``: the
test checks the exit status and that no traceback was printed."""

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

    if WHEN in ("api", "streaming"):
        while core.inference.state is not PipelineState.READY:
            await asyncio.sleep(0.05)
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

if __name__ == "__main__":
    from fleetgui.cli import main

    sys.exit(main(sys.argv[1:]))
