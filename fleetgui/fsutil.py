"""File helpers shared by export and deployment: hashing and atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

_CHUNK = 4 * 1024 * 1024


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; use the usual mode
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_dir(new: Path, target: Path) -> None:
    """Move the finished folder ``new`` to ``target``, replacing what was there.

    The old folder is first renamed aside, so at every moment ``target`` is either the complete
    old folder, absent, or the complete new one; never a mix.
    """
    new, target = Path(new), Path(target)
    backup = target.with_name(f".{target.name}.old")
    if backup.exists():
        shutil.rmtree(backup)
    if target.exists():
        os.replace(target, backup)
    os.replace(new, target)
    if backup.exists():
        shutil.rmtree(backup, ignore_errors=True)


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (same disk, no extra space) or copy it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def read_cache_entries(path: Path, version: int) -> dict[str, Any]:
    """The ``entries`` of a JSON cache file ``{"version": V, "entries": {...}}``; empty when the
    file is missing, unreadable or of another version (a cache is rebuilt, never an error)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != version:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def inside_path(path: str) -> PurePosixPath:
    """``path`` (forward slashes, as manifests write it) if it stays inside the folder it is
    relative to, else ValueError: no absolute path, drive, backslash or ``..``."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path or ":" in path:
        raise ValueError(f"file path {path!r} leaves the folder it belongs to")
    return pure
