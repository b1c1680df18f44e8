"""``fleetgui keys``: write a coordinator key pair for scripts and tests."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "keys"
HELP = "write a coordinator key pair (for scripts and tests)"
DESCRIPTION = "Write a coordinator key pair to DIR; workers trust it with --authorized-keys."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, metavar="DIR")


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("keys is not available in this version yet")
