"""A trainer's output folder and what its build record shares with the other trainer's.

A build happens in a hidden sibling of its folder (:func:`staging_dir`), renamed into place
when complete, so a folder holds a complete build or an earlier one; a later run reuses a build
only when its files still match the hashes it recorded (:func:`mismatched_file`).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.fsutil import sha256_file

log = logging.getLogger(__name__)

_PARTIAL_MARK = ".partial-"


def _remove_stale_builds(out_dir: Path) -> None:
    """Delete the partial folders of earlier builds of ``out_dir`` whose process is gone."""
    import psutil

    for path in out_dir.parent.glob(f".{out_dir.name}{_PARTIAL_MARK}*"):
        pid = path.name.rsplit(_PARTIAL_MARK, 1)[-1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            log.info("removing leftovers of an interrupted build: %s", path)
            shutil.rmtree(path, ignore_errors=True)


def check_replaceable(
    out_dir: Path, marker: str, what: str, error: type[FleetguiError] = FleetguiError
) -> None:
    """Refuse to replace a folder that is not a (possibly incomplete) build of ``what``, whose
    builds hold ``marker``; raises ``error`` naming the fix."""
    if out_dir.is_file():
        raise error(f"{out_dir} is a file, not a folder for {what}; choose a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / marker).is_file():
        raise error(
            f"{out_dir} exists and does not hold {what} ({marker} is missing); "
            "choose another output folder or delete it"
        )


@contextmanager
def staging_dir(out_dir: Path) -> Iterator[Path]:
    """A fresh hidden sibling of ``out_dir``, deleted if the body raises."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}{_PARTIAL_MARK}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def mismatched_file(root: Path, files: Mapping[str, str]) -> Path | None:
    """The first of ``files`` (relative path: recorded sha256) under ``root`` that is missing
    or no longer matches its hash; None when all match."""
    for name, digest in files.items():
        path = root / name
        if not path.is_file() or sha256_file(path) != digest:
            return path
    return None


@contextmanager
def no_hf_progress_bars() -> Iterator[None]:
    """transformers' own progress bars off for the body (``save_pretrained`` would draw one
    over the build's progress), restored after."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def loss_summary(losses: list[float]) -> dict[str, Any]:
    """First and final loss (mean of the last 10 steps) and a curve of about 50 points."""
    every = max(1, len(losses) // 50)
    tail = losses[-10:]
    return {
        "first_loss": round(losses[0], 4),
        "final_loss": round(sum(tail) / len(tail), 4),
        "loss_every": every,
        "loss_curve": [round(x, 4) for x in losses[::every]],
    }


def software_versions(*, tokenizers: bool = False) -> dict[str, str]:
    """The versions a build's weights depend on (with ``tokenizers``: its tokenizer too)."""
    import torch
    import transformers

    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    if tokenizers:
        import tokenizers as tokenizers_module

        versions["tokenizers"] = tokenizers_module.__version__
    return versions
