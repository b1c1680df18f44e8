"""``fleetgui worker``: the headless agent that runs stages on a fleet PC."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "worker"
HELP = "run the headless worker agent on this PC"
DESCRIPTION = (
    "Advertise this PC on the LAN, accept shard deployments from paired coordinators and serve "
    "stage compute. Never imports Qt."
)
DEFAULT_PORT = 5555


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen", default=f"0.0.0.0:{DEFAULT_PORT}", metavar="HOST:PORT", help="listen address"
    )
    parser.add_argument("--name", metavar="NAME", help="name shown to coordinators")
    parser.add_argument("--cache", type=Path, metavar="DIR", help="shard cache folder")
    parser.add_argument("--pair", action="store_true", help="show a one-time pairing code")
    parser.add_argument(
        "--authorized-keys", type=Path, metavar="FILE", help="coordinator public keys to trust"
    )


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("worker is not available in this version yet")
