"""``fleetgui plan``: which layers go on which device."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgui.errors import FleetguiError

if TYPE_CHECKING:
    from fleetgui.fleet.profiling.measured import MeasuredDevices
    from fleetgui.planner import DeviceProfile

log = logging.getLogger(__name__)

NAME = "plan"
HELP = "plan which PC runs which layers"
DESCRIPTION = (
    "Choose the devices, their ring order and each one's layer range to minimise time per token "
    "(latency) or maximise aggregate tokens/s (throughput) within each device's memory. "
    "DEVICES.json is a list of device profiles, the coordinator first: name, memory_bytes, "
    "ms_per_layer, disk_read_bytes_per_s, rtt_ms and bandwidth_bytes_per_s (to the coordinator). "
    "Or --workers: this PC and those paired workers, each with its free memory and, for an "
    "export, its layer time measured on one of its stages. A HuggingFace model folder is planned "
    "at int4 weights, an export folder at its own format. With --users N it chooses how the fleet"
    " serves N users at once: one pipeline, several pipelines over disjoint groups of PCs, a "
    "whole copy per PC that can hold one, or a mix, whichever gives the most tokens/s in all "
    "(every user above --floor where some layout can), and lists the alternatives with their "
    "figures."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        metavar="SOURCE",
        type=Path,
        help="an export folder, a HuggingFace model folder, a .gguf file or a hub id",
    )
    fleet = parser.add_mutually_exclusive_group(required=True)
    fleet.add_argument("--devices", type=Path, metavar="DEVICES.json", help="device profiles")
    fleet.add_argument(
        "--workers",
        metavar="HOST:PORT,...",
        help="plan for this PC and these paired workers, measured now (an export's layer "
        "times are timed on each; other models get estimates)",
    )
    parser.add_argument(
        "--identity", type=Path, metavar="DIR", help="with --workers: coordinator key pair"
    )
    parser.add_argument(
        "--objective",
        choices=("latency", "throughput"),
        default=None,
        help="minimise one user's time per token, or maximise tokens/s of all streams "
        "(default: latency; not with --users, which maximises tokens/s in all)",
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=None,
        metavar="S",
        help="sequences decoded at once through one pipeline (default 1; not with --users)",
    )
    parser.add_argument(
        "--users",
        type=int,
        default=None,
        metavar="N",
        help="plan the layout for N users at once: pipelines, whole copies or a mix",
    )
    parser.add_argument(
        "--floor",
        type=float,
        default=None,
        metavar="TOK_S",
        help="with --users: no user below TOK_S tokens/s where some layout can do that",
    )
    parser.add_argument(
        "--headroom-gb",
        type=float,
        default=2.0,
        metavar="G",
        help="memory left free on every PC (default 2.0)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _measured_fleet(args: argparse.Namespace) -> list[DeviceProfile]:
    """This PC and the ``--workers``, as :func:`~fleetgui.fleet.profiling.fleet_profiles.
    measured_fleet` measures them; the log says which layer times are estimates."""
    from fleetgui.fleet.pairing.worker_addresses import parse_worker_list, resolve_workers
    from fleetgui.fleet.profiling.fleet_profiles import measured_fleet
    from fleetgui.net.keys import coordinator_identity, load_identity
    from fleetgui.runtime.ov_stage import StageConfig

    addresses = parse_worker_list(args.workers)
    identity = load_identity(args.identity) if args.identity else coordinator_identity()

    async def measure() -> MeasuredDevices:
        endpoints = await resolve_workers(addresses)  # keys pinned or checked first
        return await measured_fleet(args.model, endpoints, identity, StageConfig())

    measured = asyncio.run(measure())
    if measured.estimated:
        log.warning("%s", measured)
    else:
        log.info("%s", measured)
    return list(measured.profiles)


class PlanArgumentError(FleetguiError):
    """A ``fleetgui plan`` option has an impossible value."""


def _check(args: argparse.Namespace) -> None:
    if args.identity is not None and args.workers is None:
        raise PlanArgumentError("--identity goes with --workers: it is the key they trust")
    if args.streams is not None and args.streams < 1:
        raise PlanArgumentError(f"--streams must be at least 1, got {args.streams}")
    if not args.headroom_gb >= 0:
        raise PlanArgumentError(f"--headroom-gb must be zero or more, got {args.headroom_gb}")
    if args.users is None:
        if args.floor is not None:
            raise PlanArgumentError("--floor needs --users: it is the least tokens/s per user")
        return
    if args.users < 1:
        raise PlanArgumentError(f"--users must be at least 1, got {args.users}")
    if args.floor is not None and not args.floor > 0:
        raise PlanArgumentError(f"--floor must be more than 0 tokens/s, got {args.floor}")
    # each group of a layout is planned for its own users, for tokens/s in all
    for option, value in (("--streams", args.streams), ("--objective", args.objective)):
        if value is not None:
            raise PlanArgumentError(
                f"{option} does not go with --users (each group is planned "
                "for the users it serves, for the most tokens/s in all)"
            )


def run(args: argparse.Namespace) -> int:
    from fleetgui.planner import PlanConfig, load_devices, load_model_profile, solve
    from fleetgui.planner.layouts import plan_layout

    _check(args)
    devices = load_devices(args.devices) if args.devices else _measured_fleet(args)
    model = load_model_profile(args.model, streams=args.streams or 1)
    config = PlanConfig(
        objective=args.objective or "latency", headroom_bytes=int(args.headroom_gb * 1e9)
    )
    log.info("planning %s on %d device(s)", model.describe(), len(devices))
    if args.users is not None:
        layout = plan_layout(devices, model, config, users=args.users, floor_tok_s=args.floor)
        print(json.dumps(layout.to_json_dict(), indent=2) if args.json else layout)
        return 0
    plan = solve(devices, model, config)
    if args.json:
        print(json.dumps(plan.to_json_dict(), indent=2))
    else:
        print(plan)
    return 0
