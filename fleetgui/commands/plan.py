"""``fleetgui plan``: which layers go on which device."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

NAME = "plan"
HELP = "plan which PC runs which layers"
DESCRIPTION = (
    "Choose the devices, their ring order and each one's layer range to minimise time per "
    "token (latency) or maximise aggregate tokens/s (throughput) within each device's memory. "
    "DEVICES.json is a list of device profiles, the coordinator first: name, memory_bytes, "
    "ms_per_layer, disk_read_bytes_per_s, rtt_ms and bandwidth_bytes_per_s (to the "
    "coordinator). A HuggingFace model folder is planned at int4 weights, an export folder at "
    "its own format."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        metavar="SOURCE",
        type=Path,
        help="an export folder, a HuggingFace model folder, a .gguf file or a hub id",
    )
    parser.add_argument(
        "--devices", required=True, type=Path, metavar="DEVICES.json", help="device profiles"
    )
    parser.add_argument(
        "--objective",
        choices=("latency", "throughput"),
        default="latency",
        help="minimise one user's time per token, or maximise tokens/s of all streams "
        "(default: latency)",
    )
    parser.add_argument(
        "--streams", type=int, default=1, metavar="S", help="sequences decoded at once (default 1)"
    )
    parser.add_argument(
        "--headroom-gb",
        type=float,
        default=2.0,
        metavar="G",
        help="memory left free on every PC (default 2.0)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


class PlanArgumentError(FleetguiError):
    """A ``fleetgui plan`` option has an impossible value."""


def run(args: argparse.Namespace) -> int:
    from fleetgui.planner import PlanConfig, load_devices, load_model_profile, solve

    if args.streams < 1:
        raise PlanArgumentError(f"--streams must be at least 1, got {args.streams}")
    if not args.headroom_gb >= 0:
        raise PlanArgumentError(f"--headroom-gb must be zero or more, got {args.headroom_gb}")
    devices = load_devices(args.devices)
    model = load_model_profile(args.model, streams=args.streams)
    config = PlanConfig(objective=args.objective, headroom_bytes=int(args.headroom_gb * 1e9))
    log.info("planning %s on %d device(s)", model.describe(), len(devices))
    plan = solve(devices, model, config)
    if args.json:
        print(json.dumps(plan.to_json_dict(), indent=2))
    else:
        print(plan)
    return 0
