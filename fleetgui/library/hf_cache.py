"""Models in the HuggingFace hub cache: ``models--ORG--NAME/snapshots/COMMIT/``.

Each repository counts once, at the snapshot ``refs/main`` names (else the newest). A snapshot
with ``config.json`` is a HuggingFace model; one without it but with ``.gguf`` files (a GGUF
repository) gives one model per file.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fleetgui.library.entry import Candidate, Format, Source
from fleetgui.library.walk import gguf_files

log = logging.getLogger(__name__)

REPO_PREFIX = "models--"


def repo_id(folder_name: str) -> str:
    """``models--ORG--NAME`` -> ``ORG/NAME`` (the hub forbids ``--`` inside names)."""
    return folder_name[len(REPO_PREFIX) :].replace("--", "/", 1)


def current_snapshot(repo: Path) -> Path | None:
    """The snapshot ``refs/main`` points at, else the newest one; None when there is none."""
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    try:
        if ref.is_file():
            named = snapshots / ref.read_text(encoding="utf-8").strip()
            if named.is_dir():
                return named
        found = [p for p in snapshots.iterdir() if p.is_dir()] if snapshots.is_dir() else []
    except OSError as exc:
        log.warning("cannot read HuggingFace cache folder %s: %s", repo, exc)
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def find_hf_cache(hub: Path) -> list[Candidate]:
    """The models in the hub cache folder ``hub`` (none if it does not exist)."""
    if not hub.is_dir():
        return []
    found: list[Candidate] = []
    for repo in sorted(hub.glob(f"{REPO_PREFIX}*")):
        snapshot = current_snapshot(repo)
        if snapshot is None:
            continue
        name = repo_id(repo.name)
        ggufs = [] if (snapshot / "config.json").exists() else gguf_files(snapshot, max_depth=2)
        for gguf in ggufs:
            label = f"{name}/{gguf.relative_to(snapshot).as_posix()}"
            found.append(Candidate(label, Source.HF_CACHE, Format.GGUF, gguf))
        if not ggufs:  # a model, or a download that stopped before config.json: the entry says so
            found.append(Candidate(name, Source.HF_CACHE, Format.HUGGINGFACE, snapshot))
    return found
