"""Network addresses as text: ``host:port`` for people and files, ``tcp://host:port`` for ZeroMQ.

An IPv6 literal is bracketed (``[fe80::1]:5555``) so that its colons cannot be read as the port
separator. Worker code imports this module: it must stay free of Qt and other heavy imports.
"""

from __future__ import annotations

import re

from fleetgui.errors import FleetguiError

# "[v6]:port" or "host:port"; the host part of the second form has no colon, so an unbracketed
# IPv6 literal is refused rather than split at a guessed colon.
_ADDRESS = re.compile(r"\s*(?:\[([^\]]+)\]|([^:\s]+)):(\d{1,5})\s*")
# what zmq_endpoint makes; a peer sends endpoints too (RING), so the host part is strict
_ENDPOINT = re.compile(r"tcp://(?:\[([\w:.%-]+)\]|([^\s:/\[\]]+)):(\d{1,5})")


def _host_part(host: str) -> str:
    """``host``, bracketed if it is an IPv6 literal (the only kind of host with a colon)."""
    return f"[{host}]" if ":" in host else host


def format_address(host: str, port: int) -> str:
    """``host:port``, or ``[v6]:port`` for an IPv6 literal; :func:`parse_address` reads it back."""
    return f"{_host_part(host)}:{port}"


def zmq_endpoint(host: str, port: int) -> str:
    """``tcp://host:port``, with IPv6 literals bracketed (as ZeroMQ requires)."""
    return f"tcp://{format_address(host, port)}"


def parse_address(text: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``; raise FleetguiError if malformed."""
    match = _ADDRESS.fullmatch(text)
    # 65535 is refused too: a worker's info probe listens on its port + 1
    if match is None or not 0 < int(match.group(3)) < 65535:
        raise FleetguiError(f"{text!r} is not HOST:PORT (a worker address, e.g. 192.168.1.20:5555)")
    return match.group(1) or match.group(2), int(match.group(3))


def parse_zmq_endpoint(text: str) -> tuple[str, int]:
    """``"tcp://host:port"`` (as :func:`zmq_endpoint` makes it) -> ``(host, port)``; raise
    FleetguiError if malformed."""
    match = _ENDPOINT.fullmatch(text)
    if match is None or not 0 < int(match.group(3)) < 65536:
        raise FleetguiError(f"{text[:100]!r} is not tcp://host:port")
    return match.group(1) or match.group(2), int(match.group(3))
