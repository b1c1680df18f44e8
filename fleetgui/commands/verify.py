"""``fleetgui verify``: compare an export's stage chain with the reference model."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)

NAME = "verify"
HELP = "check an export against its HuggingFace model"
DESCRIPTION = (
    "Run the chain of stages on a few prompts (prefill and 32 decode steps) against HF "
    "transformers in fp32 and the monolithic export; print the largest logit difference, "
    "whether the greedy tokens match, the top-1 agreement and mean KL divergence with HF fp32, "
    "and store those measures in the export's manifest."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("export_dir", metavar="DIR", type=Path, help="export folder")
    parser.add_argument(
        "--reference",
        required=True,
        type=Path,
        metavar="SOURCE",
        help="the model exported: HF folder, .gguf file or hub id",
    )
    parser.add_argument("--prompts", type=Path, metavar="FILE", help="one prompt per line")
    parser.add_argument(
        "--monolithic", type=Path, metavar="MONO_DIR", help="monolithic export to compare with"
    )
    parser.add_argument("--decode-steps", type=int, default=32, metavar="N")


def run(args: argparse.Namespace) -> int:
    from fleetgui.errors import FleetguiError
    from fleetgui.export.verify import record_quality, verify_export

    prompts = None
    if args.prompts is not None:
        try:
            prompts = [p for p in args.prompts.read_text(encoding="utf-8").splitlines() if p]
        except OSError as exc:
            raise FleetguiError(f"cannot read prompts file {args.prompts}: {exc}") from exc
    report = verify_export(
        args.export_dir,
        args.reference,
        prompts=prompts,
        decode_steps=args.decode_steps,
        monolithic_dir=args.monolithic,
    )
    for line in report.lines():
        print(line)
    try:
        record_quality(args.export_dir, report.quality)  # also a failed one: the app shows it
    except OSError as exc:  # e.g. a read-only export: the verdict above still stands
        log.warning("could not store the measures in %s's manifest: %s", args.export_dir, exc)
    return 0 if report.passed else 1
