"""``fleetgui export``: a HuggingFace model folder to verified per-stage OpenVINO shards."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)

NAME = "export"
HELP = "split a model (HF folder, GGUF file, hub id) into per-stage OpenVINO shards"
DESCRIPTION = (
    "Split a decoder model (a HuggingFace folder, a GGUF file or a hub id) by layer into "
    "stateful OpenVINO IR stages, compress the weights, write DIR/manifest.json and verify the "
    "chain against the model."
)
WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model_dir",
        metavar="SOURCE",
        type=Path,
        help="a HuggingFace model folder, a .gguf file (or a folder holding one), or a hub id "
        "(org/name: from the HF cache, downloaded unless HF_HUB_OFFLINE=1)",
    )
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
    parser.add_argument(
        "--max-chunk-layers",
        type=int,
        metavar="N",
        help="convert at most N layers at a time, so a big stage fits in memory (default: from "
        "this PC's free memory)",
    )


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from fleetgui.commands.console import stdout_to_stderr
    from fleetgui.export.exporter import ExportProgress, ExportRequest, export_model
    from fleetgui.export.quality import ExportQuality
    from fleetgui.export.sources import resolve_model
    from fleetgui.export.verify import VerificationError, verify_export

    source = resolve_model(args.model_dir)  # a bad source fails here, before any progress bar
    request = ExportRequest(
        model_dir=source,
        out_dir=args.out,
        stages=args.stages,
        layers=args.layers,
        weights=args.weights,
        monolithic=args.monolithic,
        max_chunk_layers=args.max_chunk_layers,
    )
    # on a terminal only (elsewhere the log lines say each step), log lines printed above it
    bar = tqdm(total=1, unit="step", file=sys.stderr, dynamic_ncols=True, leave=True, disable=None)

    def on_progress(progress: ExportProgress) -> None:
        bar.total = progress.total
        bar.n = progress.step
        bar.set_description_str(progress.message[:60])
        bar.refresh()

    def verify(folder: Path) -> ExportQuality:
        report = verify_export(folder, source)
        for line in report.lines(args.out):  # ``folder`` is the build folder, moved there next
            bar.write(line, file=sys.stderr)
        if not report.passed:
            raise VerificationError(
                f"the export does not reproduce {args.model_dir} (see above); the stages built "
                "are kept and reused when you run the export again"
            )
        return report.quality

    # stdout holds the result line alone: NNCF's progress bars (rich) and native code write to
    # stdout, so they are sent to stderr meanwhile
    try:
        with stdout_to_stderr(), logging_redirect_tqdm():
            manifest = export_model(
                request, progress=on_progress, verify=None if args.no_verify else verify
            )
    finally:
        bar.close()
    sizes = sum(f.size for stage in manifest.stages for f in stage.files)
    print(
        f"exported {manifest.model_name} ({manifest.architecture}, {manifest.n_layers} layers) "
        f"to {args.out}: {len(manifest.stages)} stage(s), {manifest.weight_format} weights, "
        f"{sizes / 1e6:.1f} MB"
    )
    return 0
