"""``fleetgui demo``: the demo model pair on a local two-worker fleet, with the app or a chat."""

from __future__ import annotations

import argparse
import logging

NAME = "demo"
HELP = "run the demo: a local fleet serving the demo model, in the app or the terminal"
DESCRIPTION = (
    "Build or reuse the demo model pair, export it in 2 stages, start 2 local worker agents, "
    "deploy over the real protocol and open the app with the chat ready."
)
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--headless", action="store_true", help="chat in the terminal, no app")
    parser.add_argument("--prompt", metavar="TEXT", help="answer once and exit (with --headless)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument("--size", choices=("small", "tiny"), default="small")


def run(args: argparse.Namespace) -> int:
    from fleetgui.errors import NotAvailableError

    raise NotAvailableError(
        "the demo is not available in this version yet; 'fleetgui --help' lists what is"
    )
