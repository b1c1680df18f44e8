"""``fleetgui worker``: the headless agent that runs stages on a fleet PC."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

NAME = "worker"
HELP = "run the headless worker agent on this PC"
DESCRIPTION = (
    "Advertise this PC on the LAN, accept shard deployments from paired coordinators and serve "
    "stage compute. Listens on PORT (encrypted) and PORT+1 (info probe). Never imports Qt."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fleetgui.net.worker_info import DEFAULT_PORT

    parser.add_argument(
        "--listen",
        default=f"0.0.0.0:{DEFAULT_PORT}",
        metavar="HOST:PORT",
        help=f"listen address (default 0.0.0.0:{DEFAULT_PORT}; port 0 picks free ports)",
    )
    parser.add_argument("--name", metavar="NAME", help="name shown to coordinators (hostname)")
    parser.add_argument(
        "--cache", type=Path, metavar="DIR", help="shard cache folder (default: in the data folder)"
    )
    parser.add_argument(
        "--pair", action="store_true", help="show a one-time pairing code for a new coordinator"
    )
    parser.add_argument(
        "--authorized-keys",
        type=Path,
        metavar="FILE",
        help="coordinator public keys to trust (default: the config folder's authorized_keys)",
    )
    parser.add_argument(
        "--key", type=Path, metavar="FILE", help="this worker's key file (default: config folder)"
    )
    parser.add_argument("--device", default="CPU", help="OpenVINO device for stages (CPU)")
    parser.add_argument(
        "--threads", type=int, default=0, help="OpenVINO inference threads (0: all cores)"
    )
    parser.add_argument(
        "--precision",
        choices=("auto", "f32", "bf16", "f16"),
        default="auto",
        help="inference precision (auto: the device's default)",
    )
    parser.add_argument(
        "--no-advertise", action="store_true", help="do not announce this worker on the LAN"
    )
    parser.add_argument(
        "--ready-json", action="store_true", help="print one JSON line when ready (for scripts)"
    )
    parser.add_argument(
        "--exit-with", type=int, metavar="PID", help="stop when process PID exits (local fleets)"
    )


def run(args: argparse.Namespace) -> int:
    from fleetgui import paths
    from fleetgui.net.keys import worker_identity
    from fleetgui.net.sysinfo import default_worker_name
    from fleetgui.worker.agent import WorkerConfig
    from fleetgui.worker.service import (
        ServiceConfig,
        default_authorized_keys,
        parse_listen,
        run_worker,
    )

    host, port = parse_listen(args.listen)
    name = args.name or default_worker_name()
    config = ServiceConfig(
        host=host,
        port=port,
        worker=WorkerConfig(
            name=name,
            cache_dir=args.cache or paths.data_dir() / "worker_cache",
            device=args.device,
            threads=args.threads,
            precision=args.precision,
        ),
        authorized_keys=args.authorized_keys or default_authorized_keys(),
        pair=args.pair,
        advertise=not args.no_advertise,
        ready_json=args.ready_json,
        exit_with=args.exit_with,
    )
    identity = worker_identity(args.key)
    asyncio.run(run_worker(config, identity))
    return 0
