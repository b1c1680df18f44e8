"""``fleetgui export``: a HuggingFace model folder to verified per-stage OpenVINO shards."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "export"
HELP = "split a HuggingFace model into per-stage OpenVINO shards"
DESCRIPTION = (
    "Split a local HuggingFace decoder model by layer into stateful OpenVINO IR stages, "
    "compress the weights, write DIR/manifest.json and verify the chain against the model."
)
WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="MODEL_DIR", type=Path, help="HF model folder")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output folder")
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--stages", type=int, metavar="N", help="split evenly into N stages")
    split.add_argument(
        "--layers", metavar="RANGES", help="exact half-open layer ranges, e.g. 0:10,10:22,22:32"
    )
    parser.add_argument(
        "--weights", choices=WEIGHT_FORMATS, default="int4", help="weight format (default: int4)"
    )
    parser.add_argument(
        "--monolithic",
        action="store_true",
        help="write the unsplit model as a folder openvino_genai.LLMPipeline loads (the baseline)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip verification after export")


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("export is not available in this version yet")
