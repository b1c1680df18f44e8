"""fleetgui's own exports: folders with a ``manifest.json`` directly in the exports folder
(the shard cache, where the app, ``fleetgui export`` and the demo put them)."""

from __future__ import annotations

import logging
from pathlib import Path

from fleetgui.export.manifest import MANIFEST_NAME, ManifestError, read_manifest
from fleetgui.library.entry import Candidate, Format, ModelFacts, Source
from fleetgui.library.parameters import estimate_parameters

log = logging.getLogger(__name__)


def find_exports(root: Path) -> list[Candidate]:
    """The export folders in ``root`` (hidden ones, e.g. an export's ``.NAME.partial``, are
    unfinished and left out)."""
    if not root.is_dir():
        return []
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        log.warning("cannot read the exports folder %s: %s", root, exc)
        return []
    return [
        Candidate(p.name, Source.EXPORT, Format.EXPORT, p)
        for p in folders
        if (p / MANIFEST_NAME).is_file()
    ]


def export_facts(folder: Path) -> tuple[ModelFacts, str | None]:
    """An export's facts from its manifest, and the identity of the model it was made from
    (None when the manifest cannot be read: the facts say why)."""
    try:
        manifest = read_manifest(folder)
    except ManifestError as exc:
        return ModelFacts(problem=str(exc)), None
    quantization = manifest.weight_format
    if manifest.quality is not None:
        from fleetgui.export.quality import weights_label

        quantization = weights_label(manifest.weight_format, manifest.quality)
    facts = ModelFacts(
        architecture=manifest.architecture,
        n_parameters=estimate_parameters(manifest.config),
        quantization=quantization,
        n_layers=manifest.n_layers,
        hidden_size=manifest.hidden_size,
    )
    return facts, manifest.model_hash


def export_weights(folder: Path) -> str | None:
    """The weight format of the export in ``folder`` (None if unreadable)."""
    try:
        return read_manifest(folder).weight_format
    except ManifestError:
        return None
