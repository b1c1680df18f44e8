"""A worker's place in the current ring: the epoch, the coordinator that set it up (results go
there) and the next worker (activations go there).

A RING is checked field by field before anything changes, so a malformed one leaves the ring as
it was; the next worker's port is tried at once, so a coordinator hears of an unreachable one
now rather than when its handshake times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import zmq

from fleetgui.addresses import format_address, parse_zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.net.keys import KeyPair, is_key
from fleetgui.net.protocol import ErrorCode, RefusedError
from fleetgui.net.secure_socket import ConnectError, SecureClient
from fleetgui.net.trust import Authorizer

log = logging.getLogger(__name__)

MAX_RING_PEERS = 64


class RingMembership:
    """Where this worker sits in the ring (see module doc)."""

    def __init__(self, identity: KeyPair, authorizer: Authorizer, connect_timeout_s: float) -> None:
        self.identity = identity
        self.authorizer = authorizer
        self.connect_timeout_s = connect_timeout_s
        self.epoch = 0
        self.coordinator: bytes | None = None  # routing id of the coordinator of the ring
        self.next: SecureClient | None = None

    async def join(self, meta: Mapping[str, Any], coordinator: bytes) -> str:
        """Take the place a RING's ``meta`` describes; the next worker's name, or "the
        coordinator". Raises :class:`RefusedError` naming a bad field or an unreachable next
        worker, with the ring unchanged."""
        epoch, nxt, peers = meta.get("epoch"), meta.get("next"), meta.get("peers", [])
        if not isinstance(epoch, int) or not isinstance(peers, list) or len(peers) > MAX_RING_PEERS:
            raise RefusedError(ErrorCode.BAD_FIELD, "RING needs 'epoch' and 'peers'")
        try:
            target = _next_worker(nxt)
            bad_peer = next((p for p in peers if not isinstance(p, str) or not is_key(p)), None)
            if bad_peer is not None:
                raise ValueError(f"peer {str(bad_peer)[:60]!r} is not a CURVE public key")
        except ValueError as exc:
            raise RefusedError(ErrorCode.BAD_FIELD, f"RING: {exc}") from None
        self.epoch = epoch  # from now on, FORWARDs of older epochs are dropped
        self.coordinator = coordinator
        self.authorizer.set_ring_peers(peers)
        client: SecureClient | None = None
        if target is not None:
            name, endpoint, public_key = target
            try:
                await _probe_next_worker(endpoint, self.connect_timeout_s)
                client = SecureClient(self.identity, public_key, name=name)
                await client.connect(endpoint, self.connect_timeout_s)
            except (ConnectError, OSError, zmq.ZMQError) as exc:
                if client is not None:
                    client.close()
                text = f"cannot reach the next worker {name!r} at {endpoint}: {exc}"
                raise RefusedError(ErrorCode.BAD_FIELD, text) from None
        self._set_next(client)
        return target[0] if target else "the coordinator"

    def leave(self) -> None:
        """No next worker, no ring peers (the stages were unloaded)."""
        self._set_next(None)
        self.authorizer.set_ring_peers(())

    def close(self) -> None:
        self._set_next(None)

    def _set_next(self, client: SecureClient | None) -> None:
        if self.next is not None:
            self.next.close()
        self.next = client


def _next_worker(nxt: Any) -> tuple[str, str, str] | None:
    """The next worker a RING names, as (name, endpoint, public key), or None (results go to
    the coordinator); ValueError naming the field that a worker could never connect with."""
    if nxt is None:
        return None
    if not isinstance(nxt, dict):
        raise ValueError("'next' must be an object or null")
    endpoint, public_key = nxt.get("endpoint"), nxt.get("public_key")
    try:
        parse_zmq_endpoint(endpoint if isinstance(endpoint, str) else "")
    except FleetguiError:
        raise ValueError(
            f"the next worker's endpoint {str(endpoint)[:100]!r} is not tcp://host:port"
        ) from None
    assert isinstance(endpoint, str)
    if not isinstance(public_key, str) or not is_key(public_key):
        raise ValueError(
            f"the next worker's public key {str(public_key)[:60]!r} is not a CURVE public key "
            "(40 Z85 characters, as `fleetgui worker` prints it)"
        )
    return str(nxt.get("name", "next"))[:100], endpoint, public_key


async def _probe_next_worker(endpoint: str, timeout_s: float) -> None:
    """Raise ConnectError at once when the next worker's port cannot be reached (refused, no
    route, an unknown host), or after ``timeout_s`` when its host does not answer: ZMQ retries
    such a connect quietly, and the coordinator was told only when the handshake timed out."""
    host, port = parse_zmq_endpoint(endpoint)  # checked by _next_worker
    where = format_address(host, port)
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        raise ConnectError(
            f"{where} did not answer in {timeout_s:g} s: is that PC on, and is the port "
            "open in its firewall?"
        ) from None
    except ConnectionRefusedError:
        raise ConnectError(
            f"nothing listens at {where} (connection refused): is `fleetgui worker` "
            "running there, on that port?"
        ) from None
    except OSError as exc:  # no route to the host, a name that does not resolve
        raise ConnectError(f"cannot reach {where}: {exc.strerror or exc}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
