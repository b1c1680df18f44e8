"""``fleetgui gui``: the desktop app."""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

NAME = "gui"
HELP = "open the desktop app"
DESCRIPTION = (
    "Open the fleetgui desktop app: fleet, deployment, dashboard and chat. With EXPORT_DIR the "
    "export is deployed on this PC at start. With --screenshot DIR the app renders each main "
    "view to DIR/fleet.png, deployment.png, dashboard.png and chat.png (after a real reply when "
    "EXPORT_DIR is given) and exits, without a window on screen."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "export_dir", nargs="?", type=Path, metavar="EXPORT_DIR", help="export to deploy at start"
    )
    parser.add_argument(
        "--draft", type=Path, metavar="DIR", help="draft export for PP+SD (one stage)"
    )
    parser.add_argument(
        "--screenshot", type=Path, metavar="DIR", help="render each main view to DIR/*.png, exit"
    )
    parser.add_argument(
        "--prompt",
        action="append",
        metavar="TEXT",
        help="with --screenshot: the chat message(s) to send (default: a coding question)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        from fleetgui.app.application import interactive, run_in_qt_loop
        from fleetgui.app.core import AppCore, build_core
        from fleetgui.app.screenshot import DEFAULT_PROMPT, ScreenshotRequest, take_screenshots
        from fleetgui.app.views.main_window import MainWindow
    except ImportError as exc:
        from fleetgui.errors import FleetguiError

        raise FleetguiError(
            f"the desktop app needs the 'app' extra ({exc.name} is missing): "
            "pip install 'fleetgui[app]'"
        ) from exc

    if args.screenshot is None:

        async def start(core: AppCore, window: MainWindow) -> int:
            if args.export_dir is not None and core.deployment.choose_model(args.export_dir):
                mode = core.inference.mode
                if args.draft is not None:
                    from dataclasses import replace

                    mode = replace(mode, draft_dir=args.draft)
                    core.inference.set_mode(mode)
                    window.mode_panel.set_mode(mode)
                core.deployment.deploy(mode)
            return await interactive(core, window)

        return run_in_qt_loop(start)

    request = ScreenshotRequest(
        out_dir=args.screenshot,
        export_dir=args.export_dir,
        draft_dir=args.draft,
        prompts=tuple(args.prompt or (DEFAULT_PROMPT,)),
    )
    with tempfile.TemporaryDirectory(prefix="fleetgui-screenshot-") as scratch:

        async def shoot(core: AppCore, window: MainWindow) -> list[Path]:
            return await take_screenshots(core, window, request)

        from fleetgui.app.application import qt_application

        qt_application(offscreen=True)
        core = build_core(
            settings_path=Path(scratch) / "settings.json", history_dir=Path(scratch) / "chats"
        )
        paths = run_in_qt_loop(shoot, offscreen=True, core=core)
    for path in paths:
        print(path)
    return 0
