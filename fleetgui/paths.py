"""Where fleetgui keeps its configuration, data, logs and shard cache.

Folders follow the platform's conventions through ``platformdirs`` (``%APPDATA%`` and
``%LOCALAPPDATA%`` on Windows, XDG folders on Linux). ``FLEETGUI_HOME`` puts all of them under one
folder instead (portable installs, tests). When fleetgui runs from a source checkout, the shard
cache is the checkout's ``shards_cache/`` folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "fleetgui"
HOME_ENV = "FLEETGUI_HOME"


def _home() -> Path | None:
    value = os.environ.get(HOME_ENV)
    return Path(value).expanduser() if value else None


def config_dir() -> Path:
    """Settings (``settings.json``), authorized keys, pinned worker keys."""
    home = _home()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME, False))


def data_dir() -> Path:
    """Chat history, device profiles and other state that must survive restarts."""
    home = _home()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME, False))


def log_dir() -> Path:
    """Log files (``fleetgui.log``, rotated)."""
    home = _home()
    return home / "logs" if home else Path(platformdirs.user_log_dir(APP_NAME, False))


def checkout_root() -> Path | None:
    """The source checkout fleetgui runs from, or None when installed as a package."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "shards_cache").is_dir():
        return root
    return None


def shards_cache_dir() -> Path:
    """Exports, demo models and deployed shards. The checkout's ``shards_cache/`` when run from
    a source checkout, else the platform's cache folder."""
    home = _home()
    if home:
        return home / "shards_cache"
    root = checkout_root()
    if root is not None:
        return root / "shards_cache"
    return Path(platformdirs.user_cache_dir(APP_NAME, False)) / "shards"
