"""What the user chose to deploy: a fleetgui export, a HuggingFace model folder, or something to
open first (a GGUF file, a folder of them, a hub id). No Qt here."""

from __future__ import annotations

import asyncio
import enum
import logging
from pathlib import Path

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import ManifestError, read_manifest
from fleetgui.export.quality import weights_label

log = logging.getLogger(__name__)


class ModelKind(enum.StrEnum):
    EXPORT = "fleetgui export"
    HUGGINGFACE = "HuggingFace model"


class ModelChoiceError(FleetguiError):
    """The chosen folder is neither an export nor a HuggingFace model."""


def needs_opening(source: Path) -> bool:
    """Whether ``source`` must be opened before it can be used: a GGUF file, a folder holding
    GGUF files and no model, or a hub id (not an existing path)."""
    from fleetgui.export.gguf_source import is_gguf_file
    from fleetgui.export.sources import looks_like_hub_id

    if source.is_file():
        return is_gguf_file(source)  # also an Ollama blob, named by its hash
    if source.is_dir():
        has_model = (source / "manifest.json").is_file() or (source / "config.json").is_file()
        return not has_model and any(source.glob("*.gguf"))
    return looks_like_hub_id(str(source))


async def open_model(source: str, gguf_cache: Path) -> Path:
    """The folder ``source`` (see :func:`needs_opening`) opens as, made off the GUI thread: a
    GGUF file's view folder in ``gguf_cache`` (made once), or the hub snapshot."""
    from fleetgui.export.sources import resolve_model

    return await asyncio.to_thread(resolve_model, source, gguf_cache=gguf_cache)


def model_kind(folder: Path) -> ModelKind:
    if (folder / "manifest.json").is_file():
        return ModelKind.EXPORT
    if (folder / "config.json").is_file():
        return ModelKind.HUGGINGFACE
    raise ModelChoiceError(
        f"{folder} is neither a fleetgui export (manifest.json) nor a HuggingFace model folder "
        "(config.json): choose the folder that holds one of them, a .gguf file or a hub id"
    )


def weights_text(folder: Path, kind: ModelKind) -> str:
    """An export's weight format and verified quality ("int8 · top-1 99.2 %"); "" for a
    HuggingFace model, or an export whose manifest cannot be read."""
    if kind is not ModelKind.EXPORT:
        return ""
    try:
        manifest = read_manifest(folder)
    except ManifestError:
        return ""  # deploying it says what is wrong
    return weights_label(manifest.weight_format, manifest.quality)


def export_shape(folder: Path, kind: ModelKind) -> tuple[str, int] | None:
    """An export's weight format and stage count, which the Export row shows instead of the
    settings for the next export (an int8 export under "int4" read as a contradiction); None
    for a model that is not an export, or an unreadable manifest."""
    if kind is not ModelKind.EXPORT:
        return None
    try:
        manifest = read_manifest(folder)
    except ManifestError:
        return None
    return manifest.weight_format, len(manifest.stages)
