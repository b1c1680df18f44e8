"""Walking a folder for models: HuggingFace folders, fleetgui exports and GGUF files."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from fleetgui.library.entry import Candidate, Format, Source

log = logging.getLogger(__name__)

#: A split GGUF's parts: ``NAME-00001-of-00003.gguf``; only the first part is listed.
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
#: Vision projectors that LM Studio and HF repositories keep beside a multimodal model's GGUF:
#: not language models, so not listed.
_PROJECTOR_PREFIX = "mmproj"


def _listed_gguf(name: str) -> bool:
    if not name.lower().endswith(".gguf") or name.lower().startswith(_PROJECTOR_PREFIX):
        return False
    split = _SPLIT_PART.search(name)
    return split is None or int(split.group(1)) == 1


def _walk(root: Path, max_depth: int) -> list[tuple[Path, list[str], list[str]]]:
    """``os.walk`` of ``root`` to ``max_depth`` levels below it, hidden folders skipped, errors
    logged (an unreadable folder is left out, not fatal)."""
    out: list[tuple[Path, list[str], list[str]]] = []
    base = len(root.parts)

    def failed(exc: OSError) -> None:
        log.warning("cannot read %s: %s", exc.filename, exc.strerror)

    for folder, dirs, files in os.walk(root, onerror=failed, followlinks=True):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if len(here.parts) - base >= max_depth:
            dirs[:] = []
        out.append((here, dirs, sorted(files)))
    return out


def gguf_files(root: Path, max_depth: int = 3) -> list[Path]:
    """The GGUF model files under ``root`` (split files by their first part)."""
    if not root.is_dir():
        return []
    return [
        folder / name
        for folder, _, files in _walk(root, max_depth)
        for name in files
        if _listed_gguf(name)
    ]


def find_in_folder(
    root: Path, source: Source, *, max_depth: int = 3, origin: Path | None = None
) -> list[Candidate]:
    """Every model under ``root``: a folder with ``manifest.json`` (an export) or
    ``config.json`` (a HuggingFace model) is one model and is not entered; ``.gguf`` files
    elsewhere are one each. ``root`` itself may be a model folder or a GGUF file."""
    if root.is_file():
        return [Candidate(root.stem, source, Format.GGUF, root, origin)]
    if not root.is_dir():
        return []
    found: list[Candidate] = []
    for folder, dirs, files in _walk(root, max_depth):
        if "manifest.json" in files or "config.json" in files:
            kind = Format.EXPORT if "manifest.json" in files else Format.HUGGINGFACE
            found.append(Candidate(folder.name, source, kind, folder, origin))
            dirs[:] = []  # its own files, not more models
            continue
        found += [
            Candidate(Path(name).stem, source, Format.GGUF, folder / name, origin)
            for name in files
            if _listed_gguf(name)
        ]
    return found
