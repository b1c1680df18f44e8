"""Where the library looks for models.

The well-known places are where the tools people run local models with keep them: the
HuggingFace hub cache (``HF_HUB_CACHE``, ``HF_HOME``/hub or ``~/.cache/huggingface/hub``), LM
Studio's models folder (``~/.lmstudio/models``; older versions ``~/.cache/lm-studio/models``)
and Ollama's store (``OLLAMA_MODELS`` or ``~/.ollama/models``). ``FLEETGUI_SCAN_HOME`` puts all
of them under another folder instead, ignoring those variables (tests, a portable install).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SCAN_HOME_ENV = "FLEETGUI_SCAN_HOME"
LMSTUDIO_FOLDERS = (".lmstudio/models", ".cache/lm-studio/models")
OLLAMA_FOLDER = ".ollama/models"
HF_HUB_FOLDER = ".cache/huggingface/hub"


@dataclass(frozen=True)
class LibraryRoots:
    """The folders one scan reads; a missing one is simply empty."""

    hf_hub: Path | None = None
    lmstudio: tuple[Path, ...] = ()
    ollama: Path | None = None
    folders: tuple[Path, ...] = ()  # added by the user
    exports: Path | None = None  # fleetgui's exports (the shard cache)
    gguf_views: Path | None = None  # where opened GGUF files' views are (exports/gguf)

    @property
    def views(self) -> Path | None:
        if self.gguf_views is not None:
            return self.gguf_views
        return self.exports / "gguf" if self.exports is not None else None


def default_roots(folders: Sequence[str | Path] = (), exports: Path | None = None) -> LibraryRoots:
    """This PC's well-known places (see the module doc), ``folders`` the user added, and the
    exports in ``exports`` (default: the shard cache, where the app exports to)."""
    from fleetgui.paths import shards_cache_dir

    scan_home = os.environ.get(SCAN_HOME_ENV)
    if scan_home:
        home = Path(scan_home).expanduser()
        hub = home / HF_HUB_FOLDER
        ollama = home / OLLAMA_FOLDER
    else:
        from fleetgui.export.sources import hub_cache_dir

        home = Path.home()
        hub = hub_cache_dir()
        ollama = Path(os.environ.get("OLLAMA_MODELS") or home / OLLAMA_FOLDER).expanduser()
    return LibraryRoots(
        hf_hub=hub,
        lmstudio=tuple(home / folder for folder in LMSTUDIO_FOLDERS),
        ollama=ollama,
        folders=tuple(Path(f).expanduser() for f in folders),
        exports=exports if exports is not None else shards_cache_dir(),
    )
