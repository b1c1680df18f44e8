"""Logging for every fleetgui process: stderr plus a rotating file in the platform's log folder."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from fleetgui.paths import log_dir

LEVELS = ("debug", "info", "warning", "error")
# Several processes (the app, serve, workers) append to one log file: each line says which.
_FORMAT = "%(asctime)s %(fleetgui_process)s %(levelname)-7s %(name)s: %(message)s"
_STDERR_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _ProcessTag(logging.Filter):
    """Stamps each record with the writing process's command and pid, e.g. ``worker[4242]``."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag

    def filter(self, record: logging.LogRecord) -> bool:
        record.fleetgui_process = self.tag
        return True


def configure_logging(
    level: str = "info", *, file_name: str = "fleetgui.log", process: str = "fleetgui"
) -> Path | None:
    """Send records at ``level`` and above to stderr and to ``log_dir()/file_name``, each line
    with its time, and in the file with ``process`` (the command) and the pid.

    Returns the log file's path, or None when the log folder cannot be written (then only stderr
    is used and a warning says why). Calling it again replaces the handlers it installed before.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}: choose one of {', '.join(LEVELS)}")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_fleetgui", False)]:
        root.removeHandler(handler)
        handler.close()
    numeric = getattr(logging, level.upper())
    root.setLevel(numeric)

    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter(_STDERR_FORMAT))
    stderr.setLevel(numeric)
    stderr._fleetgui = True  # type: ignore[attr-defined]
    root.addHandler(stderr)

    path = log_dir() / file_name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=5_000_000, backupCount=3, encoding="utf-8"
        )
    except OSError as exc:
        logging.getLogger(__name__).warning("cannot write logs to %s (%s): stderr only", path, exc)
        return None
    file_handler.setFormatter(logging.Formatter(_FORMAT))
    file_handler.addFilter(_ProcessTag(f"{process}[{os.getpid()}]"))
    file_handler.setLevel(numeric)
    file_handler._fleetgui = True  # type: ignore[attr-defined]
    root.addHandler(file_handler)
    return path
