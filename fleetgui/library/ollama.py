"""Models in Ollama's store: ``manifests/HOST/NAMESPACE/MODEL/TAG`` are JSON manifests whose
layer of media type :data:`MODEL_MEDIA_TYPE` names the GGUF file, ``blobs/sha256-HEX``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from fleetgui.library.entry import Candidate, Format, Source

log = logging.getLogger(__name__)

MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name ``ollama list`` shows: ``llama3.2:1b``, ``user/model:tag`` or
    ``hf.co/org/repo:tag``."""
    if host != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace != DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def model_blob(store: Path, manifest: Path) -> Path | None:
    """The GGUF blob ``manifest`` names, or None when it names none (or is unreadable)."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layers = data.get("layers", [])
        digest = next(
            str(layer["digest"]) for layer in layers if layer.get("mediaType") == MODEL_MEDIA_TYPE
        )
    except (OSError, ValueError, AttributeError, KeyError, TypeError, StopIteration) as exc:
        log.warning("Ollama manifest %s names no model layer (%s)", manifest, exc)
        return None
    return store / "blobs" / digest.replace(":", "-")


def find_ollama(store: Path) -> list[Candidate]:
    """The models in Ollama's store folder ``store`` (none if it does not exist). A manifest
    whose blob is gone is still listed: its entry says the file is missing."""
    manifests = store / "manifests"
    if not manifests.is_dir():
        return []
    found: list[Candidate] = []
    for manifest in sorted(manifests.glob("*/*/*/*")):
        if not manifest.is_file() or manifest.name.startswith("."):
            continue
        blob = model_blob(store, manifest)
        if blob is None:
            continue
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        found.append(
            Candidate(ollama_name(host, namespace, model, tag), Source.OLLAMA, Format.GGUF, blob)
        )
    return found
