"""``fleetgui generate``: run prompts through an export's pipeline of stages."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetgui.errors import NotAvailableError

NAME = "generate"
HELP = "generate text with a pipeline of stages (PP, PP+SD, PP+SD+MB)"
DESCRIPTION = (
    "Generate text from one or more prompts through the stages of an export, in-process or on "
    "fleet workers, with pipeline parallelism, speculative decoding and interleaved streams."
)
MODES = ("pp", "pp+sd", "pp+sd+mb")
PRECISIONS = ("f32", "bf16", "f16", "auto")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("export_dir", metavar="EXPORT_DIR", type=Path, help="export folder")
    parser.add_argument(
        "--prompt", action="append", required=True, metavar="TEXT", help="a prompt (repeatable)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    parser.add_argument("--mode", choices=MODES, default="pp")
    parser.add_argument("--k", default="auto", metavar="K|auto", help="draft tokens per step")
    parser.add_argument("--draft", type=Path, metavar="DRAFT_EXPORT_DIR", help="draft model")
    parser.add_argument("--streams", type=int, default=1, metavar="S")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P")
    parser.add_argument("--top-k", type=int, default=0, metavar="K", help="0 = no top-k cut")
    parser.add_argument("--seed", type=int, default=None, metavar="S")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument("--workers", metavar="HOST:PORT,...", help="run stages 1.. on workers")
    parser.add_argument("--identity", type=Path, metavar="DIR", help="coordinator key pair")
    parser.add_argument("--json", action="store_true", help="print JSON objects, one a line")


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError("generate is not available in this version yet")
