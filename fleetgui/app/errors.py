"""Errors as the app shows them: one plain sentence that says what to do."""

from __future__ import annotations

import logging

from fleetgui.errors import FleetguiError
from fleetgui.paths import log_dir

log = logging.getLogger(__name__)


def user_message(exc: BaseException) -> str:
    """The message to show for ``exc``. fleetgui's own errors already name the fix; anything
    else is unexpected, so the full traceback goes to the log and the message says where."""
    if isinstance(exc, FleetguiError | ValueError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename or exc} does not exist: choose another folder"
    if isinstance(exc, MemoryError):
        return "this PC ran out of memory: close other programs or choose a smaller model"
    log.error("unexpected error", exc_info=exc)
    return (
        f"unexpected error ({type(exc).__name__}: {exc}); the details are in the log in "
        f"{log_dir()}; please report it"
    )
