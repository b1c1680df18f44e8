"""Flags shared by the commands that open a model (``generate``, ``serve``, ``gui``, ``demo``):
the context and whether answers' KV stays on the stages."""

from __future__ import annotations

import argparse
import re


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
        "--kv-budget",
        type=byte_size,
        metavar="SIZE",
        help="memory each PC holding stages may give idle conversations' KV, e.g. 2GB or 512MB "
        "(default: half of its free memory); beyond it the least recently used are dropped",
    )
    parser.add_argument(
        "--no-kv-reuse",
        dest="kv_reuse",
        action="store_false",
        help="prefill every prompt whole: no answer's KV stays on the stages for a request that "
        "continues it",
    )


def add_batching_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-batching``, for the commands that serve several streams."""
    parser.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="one stream a stage pass (stateful stages), streams interleaved across the "
        "stages, as before continuous batching; for comparing",
    )


def positive_int(text: str) -> int:
    """A whole number of at least 1 (an argparse type)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG]?)(?:I?B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def byte_size(text: str) -> int:
    """A memory size: bytes, or a number with K, M or G (binary units; KB and KiB alike), e.g.
    ``2GB`` (an argparse type)."""
    found = _SIZE.fullmatch(text.strip())
    value = float(found.group(1)) if found else 0.0
    if found is None or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a size such as 2GB, 512MB or 1073741824 (bytes), not {text!r}"
        )
    return int(value * _UNITS[found.group(2).upper()])
