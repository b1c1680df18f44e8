"""``fleetgui plan``: which layers go on which device."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "plan"
HELP = "plan which PC runs which layers"
DESCRIPTION = (
    "Choose the devices, their ring order and each one's layer range to minimise time per "
    "token (latency) or maximise aggregate tokens/s (throughput) within each device's memory."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="EXPORT_OR_MODEL_DIR", type=Path)
    parser.add_argument(
        "--devices", required=True, type=Path, metavar="DEVICES.json", help="device profiles"
    )
    parser.add_argument("--objective", choices=("latency", "throughput"), default="latency")
    parser.add_argument("--streams", type=int, default=1, metavar="S")
    parser.add_argument("--headroom-gb", type=float, default=2.0, metavar="G")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("plan is not available in this version yet")
