"""Reusing stages an earlier export built: from the previous, complete export in the output
folder, or from an interrupted run's partial folder, where each finished stage leaves a marker
(``<key>.done.json``). A stage is reused only when its build key matches and its files still
check out by size and hash."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from fleetgui.export.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    ManifestStage,
    check_files,
    read_manifest,
)
from fleetgui.export.model_source import ModelSource
from fleetgui.fsutil import atomic_write_text, link_or_copy

DONE_SUFFIX = ".done.json"


def previous_stages(out_dir: Path) -> dict[str, ManifestStage]:
    """Stages of an existing, complete export in ``out_dir`` by key (to reuse their files)."""
    if not (out_dir / MANIFEST_NAME).is_file():
        return {}
    try:
        return {stage.key: stage for stage in read_manifest(out_dir).stages if stage.key}
    except ManifestError:
        return {}


def up_to_date(
    out_dir: Path, keys: list[str], source: ModelSource, verify: bool
) -> Manifest | None:
    """The existing export in ``out_dir`` if it was built from the same model with exactly these
    stages and every file it lists is there at its size; else None. (A verified export only
    counts when verification is asked for again: verify runs before the folder is published.)"""
    if verify or not (out_dir / MANIFEST_NAME).is_file():
        return None
    try:
        manifest = read_manifest(out_dir)
    except ManifestError:
        return None
    if manifest.model_hash != source.identity_hash or [s.key for s in manifest.stages] != keys:
        return None
    if manifest.tokenizer_hash != source.tokenizer_hash:
        return None  # the tokenizer or chat template changed: rebuild the tokenizer folder
    files = [f for s in manifest.stages for f in s.files] + list(manifest.tokenizer_files)
    for entry in files:
        path = out_dir / entry.path
        if not path.is_file() or path.stat().st_size != entry.size:
            return None
    return manifest


def done_marker(partial: Path, key: str) -> Path:
    return partial / f"{key[:24]}{DONE_SUFFIX}"


def reusable_stage(
    key: str, index: int, partial: Path, previous: dict[str, ManifestStage], out: Path
) -> ManifestStage | None:
    """A stage built with ``key`` by an earlier run whose files still check out, now in
    ``partial``; None when it must be built."""
    marker = done_marker(partial, key)
    if marker.is_file():
        try:
            entry = ManifestStage.from_dict(json.loads(marker.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError):
            entry = None
        if entry is not None and not check_files(partial, entry.files):
            return replace(entry, index=index)
    old = previous.get(key)
    if old is not None and not check_files(out, old.files):
        for file in old.files:
            link_or_copy(out / file.path, partial / file.path)
        entry = replace(old, index=index)
        atomic_write_text(marker, json.dumps(entry.to_dict()))
        return entry
    return None
