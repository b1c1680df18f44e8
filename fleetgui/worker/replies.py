"""How a worker answers a request: to the peer that sent it, with the request's stream and
request ids, so the sender's dispatcher hands the answer to whoever waits for it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fleetgui.net.protocol import ErrorCode, Message, Op, encode, error_message
from fleetgui.net.secure_socket import Incoming, SecureServer


async def reply(
    server: SecureServer, incoming: Incoming, op: Op, meta: dict[str, Any] | None = None
) -> None:
    """Answer ``incoming`` with ``op`` and ``meta``."""
    message = Message(op, incoming.message.stream_id, incoming.message.request_id, meta=meta or {})
    await server.send(incoming.peer, encode(message))


async def reply_error(
    server: SecureServer, incoming: Incoming, code: ErrorCode, text: str, **meta: Any
) -> None:
    """Answer ``incoming`` with an ERROR: ``code``, ``text`` and any further ``meta``."""
    message = error_message(
        code, text, stream_id=incoming.message.stream_id, request_id=incoming.message.request_id
    )
    if meta:
        message = replace(message, meta={**message.meta, **meta})
    await server.send(incoming.peer, encode(message))
