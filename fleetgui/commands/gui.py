"""``fleetgui gui``: the desktop app."""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgui.commands.model_options import add_context_arguments
from fleetgui.runtime.draft_source import parse_draft

if TYPE_CHECKING:
    from fleetgui.app.core import AppCore
    from fleetgui.app.fleet.controller import FleetController, FleetControllerConfig
    from fleetgui.app.mode import ModeSettings
    from fleetgui.net.keys import KeyPair

log = logging.getLogger(__name__)

NAME = "gui"
HELP = "open the desktop app"
DESCRIPTION = (
    "Open the fleetgui desktop app: fleet, deployment, dashboard and chat. With EXPORT_DIR the "
    "export is deployed at start as the planner places it: its stages on this PC and the usable "
    "fleet workers (the plan preview shows which), or on this "
    "PC alone when none is usable. --workers adds workers by address at start. With "
    "--screenshot DIR the app renders each main view to DIR/fleet.png, deployment.png, "
    "dashboard.png and chat.png (after a real reply when EXPORT_DIR is given) and exits, "
    "without a window on screen."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "export_dir", nargs="?", type=Path, metavar="EXPORT_DIR", help="export to deploy at start"
    )
    parser.add_argument(
        "--draft",
        type=parse_draft,
        metavar="DIR|ngram",
        help="draft export for PP+SD (one stage), or ngram (no draft model)",
    )
    parser.add_argument(
        "--workers",
        metavar="HOST:PORT,...",
        help="add these workers (their encrypted port) at start; they are remembered",
    )
    parser.add_argument(
        "--identity",
        type=Path,
        metavar="DIR",
        help="coordinator key pair folder (fleetgui keys --out DIR); default: the OS keyring's",
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
    add_context_arguments(parser)
    # no flag: the demo sets it (its --mode and --k); None opens in the saved mode
    parser.set_defaults(start_mode=None, forget_workers=False)  # the demo forgets its workers


def apply_start_mode(core: AppCore, args: argparse.Namespace) -> ModeSettings:
    """Put the app in the mode it opens in (``opening_mode`` of the saved one and the
    arguments; the demo's mode when it started the app) and return it. Not saved: the demo's
    choice must not become the user's setting."""
    from fleetgui.app.mode import opening_mode

    mode = opening_mode(core.inference.mode, args.draft, args.start_mode)
    if mode != core.inference.mode:
        core.inference.set_mode(mode)  # the mode panel and status bar follow its signal
    return mode


def apply_start_context(core: AppCore, args: argparse.Namespace) -> None:
    """``--context``, ``--no-kv-reuse`` and ``--kv-budget`` for this run (not saved, as the
    start mode is not); what is not given stays as saved. The app counts the budget in whole
    MB (rounded up)."""
    context, kv_reuse, budget = args.context, args.kv_reuse, args.kv_budget
    if context is None and kv_reuse and budget is None:
        return
    deployment = core.deployment
    core.set_context(
        context if context is not None else deployment.context or 0,
        kv_reuse,
        -(-budget >> 20) if budget is not None else (deployment.kv_budget or 0) >> 20,
        save=False,
    )


def _identity(args: argparse.Namespace) -> KeyPair:
    from fleetgui.net.keys import coordinator_identity, load_identity

    return load_identity(args.identity) if args.identity else coordinator_identity()


async def _add_workers(core: AppCore, addresses: list[str]) -> list[str]:
    """Add each worker; returns the problems (one line each)."""
    from fleetgui.app.errors import user_message

    problems = []
    for address in addresses:
        try:
            await core.fleet_actions.add_worker(address)
        except Exception as exc:
            problems.append(user_message(exc))
    return problems


def _forget_workers(controller: FleetController, addresses: list[str]) -> None:
    """Forget the workers at ``addresses`` (the demo's own, on ports chosen for one run): left
    in the lists, every demo start would add workers that never answer again."""
    from fleetgui.errors import FleetguiError

    for address in addresses:
        try:
            controller.forget(address)
        except FleetguiError as exc:
            log.warning("%s", exc)


def run(args: argparse.Namespace) -> int:
    if args.screenshot is None:  # --screenshot renders offscreen: no screen needed
        from fleetgui.display_check import require_display

        require_display()
    try:
        from fleetgui.app.application import interactive, qt_application, run_in_qt_loop
        from fleetgui.app.fleet_app import build_fleet_core
        from fleetgui.app.screenshot import DEFAULT_PROMPT, ScreenshotRequest, take_screenshots
        from fleetgui.app.views.main_window import MainWindow
    except ImportError as exc:
        from fleetgui.errors import FleetguiError

        raise FleetguiError(
            f"the desktop app needs the 'app' extra ({exc.name} is missing): "
            "pip install 'fleetgui[app]'"
        ) from exc
    from fleetgui.addresses import format_address
    from fleetgui.fleet.pairing.worker_addresses import parse_worker_list

    addresses = (
        [format_address(h, p) for h, p in parse_worker_list(args.workers)] if args.workers else []
    )
    identity = _identity(args)

    if args.screenshot is None:
        qt_application()
        core, controller = build_fleet_core(identity)

        async def start(core: AppCore, window: MainWindow) -> int:
            for problem in await _add_workers(core, addresses):
                window.messages.show_error(problem)
            mode = apply_start_mode(core, args)
            apply_start_context(core, args)
            if args.export_dir is not None and core.deployment.choose_model(args.export_dir):
                window.show_chat_when_deployed()
                core.deployment.deploy(mode)
            return await interactive(core, window)

        try:
            return run_in_qt_loop(start, core=core)
        finally:
            if args.forget_workers:
                _forget_workers(controller, addresses)

    request = ScreenshotRequest(
        out_dir=args.screenshot,
        export_dir=args.export_dir,
        draft_dir=args.draft,
        mode=args.start_mode,
        prompts=tuple(args.prompt or (DEFAULT_PROMPT,)),
    )
    with tempfile.TemporaryDirectory(prefix="fleetgui-screenshot-") as scratch:
        folder = Path(scratch)

        async def shoot(core: AppCore, window: MainWindow) -> list[Path]:
            for problem in await _add_workers(core, addresses):
                log.warning("%s", problem)
            apply_start_context(core, args)
            return await take_screenshots(core, window, request)

        qt_application(offscreen=True)
        core, _ = build_fleet_core(
            identity,
            controller_config=_screenshot_fleet(folder),
            settings_path=folder / "settings.json",
            history_dir=folder / "chats",
        )
        paths = run_in_qt_loop(shoot, offscreen=True, core=core)
    for path in paths:
        print(path)
    return 0


def _screenshot_fleet(folder: Path) -> FleetControllerConfig:
    """Only the workers given with --workers, remembered in a scratch folder."""
    from fleetgui.app.fleet.controller import FleetControllerConfig

    return FleetControllerConfig(
        zeroconf=False,
        workers_file=folder / "workers.json",
        known_workers_file=folder / "known_workers.json",
    )
