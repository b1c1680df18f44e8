"""What the server's log line says of a request beside its method, path and status."""

from __future__ import annotations

import contextvars
import enum
from dataclasses import dataclass


class StreamOutcome(enum.StrEnum):
    """How a request ended when not normally, as its log line says."""

    FAILED_MID_STREAM = "failed mid-stream"  # the generation failed after the answer began
    CLIENT_LEFT = "client left"


@dataclass
class RequestNote:
    """Tokens generated, how a streamed answer ended when not normally, and why a refused
    request was refused."""

    tokens: int = 0
    outcome: StreamOutcome | None = None
    refused: str = ""  # why the request got an error reply, if it did


#: the current request's note (the server's middleware sets a fresh one for each request: it
#: runs the handler in the same task, so the handler sees it)
NOTE: contextvars.ContextVar[RequestNote] = contextvars.ContextVar("fleetgui_api_note")
