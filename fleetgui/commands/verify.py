"""``fleetgui verify``: compare an export's stage chain with the reference model."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "verify"
HELP = "check an export against its HuggingFace model"
DESCRIPTION = (
    "Run the chain of stages on a few prompts (prefill and 32 decode steps) against HF "
    "transformers in fp32 and the monolithic export; print the largest logit difference and "
    "whether the greedy tokens match."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("export_dir", metavar="DIR", type=Path, help="export folder")
    parser.add_argument(
        "--reference", required=True, type=Path, metavar="MODEL_DIR", help="HF model folder"
    )
    parser.add_argument("--prompts", type=Path, metavar="FILE", help="one prompt per line")


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("verify is not available in this version yet")
