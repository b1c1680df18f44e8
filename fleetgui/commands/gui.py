"""``fleetgui gui``: the desktop app."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "gui"
HELP = "open the desktop app"
DESCRIPTION = "Open the fleetgui desktop app: fleet, deployment, dashboard and chat."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--screenshot", type=Path, metavar="DIR", help="render each main view to DIR/*.png, exit"
    )


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("the app is not available in this version yet")
