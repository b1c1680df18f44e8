"""``fleetgui demo-model``: build the demo target/draft model pair offline."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "demo-model"
HELP = "build the built-in demo model pair (target and draft) offline"
DESCRIPTION = (
    "Train a small Llama target and a distilled draft on the Python standard library's source, "
    "with a byte-level BPE tokenizer, deterministically and offline."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, metavar="DIR", help="output folder")
    parser.add_argument("--size", choices=("small", "tiny"), default="small")


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("demo-model is not available in this version yet")
