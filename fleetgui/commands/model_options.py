"""Flags shared by the commands that open a model (``generate``, ``serve``, ``gui``, ``demo``):
the context and whether answers' KV stays on the stages."""

from __future__ import annotations

import argparse


def add_context_arguments(parser: argparse.ArgumentParser) -> None:
    """``--context N`` and ``--no-kv-reuse``, for the commands that open a model."""
    parser.add_argument(
        "--context",
        type=positive_int,
        metavar="N",
        help="the most tokens a prompt and its answer may hold, up to the model's own limit "
        "(default: the model's, at most 4096)",
    )
    parser.add_argument(
        "--no-kv-reuse",
        dest="kv_reuse",
        action="store_false",
        help="prefill every prompt whole: no answer's KV stays on the stages for a request that "
        "continues it",
    )


def positive_int(text: str) -> int:
    """A whole number of at least 1 (an argparse type)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)
