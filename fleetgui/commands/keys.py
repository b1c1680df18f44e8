"""``fleetgui keys``: write a coordinator key pair for scripts and tests."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "keys"
HELP = "write a coordinator key pair (for scripts and tests)"
DESCRIPTION = (
    "Write a coordinator key pair to DIR (coordinator.key, private, and coordinator.pub); "
    "workers trust it when coordinator.pub's line is in their --authorized-keys file."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to write")
    parser.add_argument(
        "--force", action="store_true", help="replace a key pair that DIR already holds"
    )


def run(args: argparse.Namespace) -> int:
    from fleetgui.net.keys import KeyPair, fingerprint, write_identity

    pair = KeyPair.generate()
    secret_path, public_path = write_identity(args.out, pair, force=args.force)
    print(pair.public)
    print(f"secret key:  {secret_path} (keep it private)")
    print(f"public key:  {public_path} ({fingerprint(pair.public)})")
    print(f"to trust it on a worker, append {public_path} to the worker's authorized_keys file")
    return 0
