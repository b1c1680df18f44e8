"""``fleetgui pair``: pair this coordinator with a worker that shows a pairing code."""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path

NAME = "pair"
HELP = "pair this coordinator with a worker started with --pair"
DESCRIPTION = (
    "Present the one-time code a worker shows (`fleetgui worker --pair`) so that it trusts this "
    "coordinator's key from now on; the worker's key is pinned at the same time."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("address", metavar="HOST:PORT", help="the worker's address")
    parser.add_argument("--code", required=True, help="the pairing code the worker shows")
    parser.add_argument(
        "--identity", type=Path, metavar="DIR", help="coordinator key pair (default: keyring)"
    )


def run(args: argparse.Namespace) -> int:
    from fleetgui.fleet.pairing.worker_addresses import pair_worker
    from fleetgui.net.keys import coordinator_identity, fingerprint, load_identity

    identity = load_identity(args.identity) if args.identity else coordinator_identity()
    info = asyncio.run(pair_worker(args.address, args.code, identity, socket.gethostname()))
    print(
        f"paired with worker {info.name!r} at {info.address} (key {fingerprint(info.public_key)})"
    )
    return 0
