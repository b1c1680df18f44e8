"""What a user may name as a model: a HuggingFace folder, a GGUF file, a folder holding one GGUF
file, or a HuggingFace hub id (``org/name``, from the local HF cache or downloaded).

:func:`resolve_model` turns any of them into a folder the exporter reads: the HF folder itself,
the hub snapshot's folder, or a GGUF file's view folder (:mod:`fleetgui.export.gguf_source`).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from fleetgui.export.model_source import ModelSourceError

log = logging.getLogger(__name__)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
#: What a hub download fetches: a model's config, weights and tokenizer, not its other files.
HUB_PATTERNS = (
    "*.json",
    "*.safetensors",
    "*.jinja",
    "tokenizer.model",
    "*.txt",
)


class ModelNotFoundError(ModelSourceError):
    """The model named cannot be found: no such file or folder, or a hub id not in the cache."""


def looks_like_hub_id(text: str) -> bool:
    return bool(_HUB_ID.match(text)) and not text.startswith((".", "~"))


def hub_cache_dir() -> Path:
    """The HuggingFace hub cache, as ``huggingface_hub`` finds it (read at call time, so a
    changed ``HF_HOME`` counts)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")


def resolve_hub_id(repo_id: str) -> Path:
    """The local folder of hub model ``repo_id``: its snapshot in the HF cache, downloaded first
    unless ``HF_HUB_OFFLINE`` is set. Raises ``ModelNotFoundError`` saying how to get it."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as exc:
        raise ModelNotFoundError(
            f"{repo_id} looks like a hub id, and resolving one needs huggingface_hub: "
            "pip install 'fleetgui[export]'"
        ) from exc
    cache = hub_cache_dir()
    offline = hub_offline()
    try:
        folder = snapshot_download(
            repo_id,
            cache_dir=cache,
            local_files_only=offline,
            allow_patterns=list(HUB_PATTERNS),
        )
    except LocalEntryNotFoundError as exc:
        if offline:
            raise ModelNotFoundError(
                f"{repo_id} is not in the HuggingFace cache ({cache}) and HF_HUB_OFFLINE is set: "
                f"fetch it on a PC with internet ('hf download {repo_id}') and copy its "
                f"models--{repo_id.replace('/', '--')} folder into {cache}, or unset "
                "HF_HUB_OFFLINE"
            ) from exc
        raise ModelNotFoundError(
            f"{repo_id} is not in the HuggingFace cache ({cache}) and could not be downloaded "
            f"({exc}); check the network or the name"
        ) from exc
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise ModelNotFoundError(f"cannot fetch {repo_id} from the HuggingFace hub: {exc}") from exc
    log.info("hub model %s: %s", repo_id, folder)
    return Path(str(folder))


def _gguf_in(folder: Path) -> Path | None:
    files = sorted(folder.glob("*.gguf"))
    if not files:
        return None
    if len(files) > 1:
        raise ModelNotFoundError(
            f"{folder} holds {len(files)} GGUF files ({', '.join(f.name for f in files[:6])}); "
            "name the one to use"
        )
    return files[0]


def resolve_model(source: str | Path, *, gguf_cache: Path | None = None) -> Path:
    """The folder the exporter reads for ``source`` (see the module docstring)."""
    text = str(source)
    path = Path(text).expanduser()
    if path.is_file():
        from fleetgui.export.gguf_source import is_gguf_file, prepare_gguf

        if not is_gguf_file(path):  # by name or, for an Ollama blob, by its first bytes
            raise ModelNotFoundError(
                f"{path} is a file but not a GGUF file; name a .gguf file, a HuggingFace model "
                "folder or a hub id"
            )

        return prepare_gguf(path, gguf_cache)
    if path.is_dir():
        if (path / "config.json").is_file() or (path / "manifest.json").is_file():
            return path
        gguf = _gguf_in(path)
        if gguf is not None:
            from fleetgui.export.gguf_source import prepare_gguf

            return prepare_gguf(gguf, gguf_cache)
        return path  # not a model folder: open_model_source says what is missing
    if looks_like_hub_id(text):
        folder = resolve_hub_id(text)
        return resolve_model(folder, gguf_cache=gguf_cache)
    raise ModelNotFoundError(
        f"{text} does not exist: name a HuggingFace model folder, a .gguf file or a hub id "
        "(org/name)"
    )
