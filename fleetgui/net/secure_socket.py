"""CURVE-encrypted fleet sockets: a ROUTER server (the worker) and a DEALER client (the
coordinator), with ZAP authorization by an :class:`~fleetgui.net.trust.Authorizer`.

How a connection is admitted:

1. CURVE handshake. The server's ZAP handler asks ``Authorizer.is_allowed(client_key)``: a key
   in authorized_keys passes; while a pairing code is active any key passes; everything else
   is refused before a single message gets through, and the refusal is logged (rate-limited).
2. Every message carries its sender's key (ZeroMQ's ``User-Id`` property). The server hands a
   message to its caller only if ``Authorizer.is_authorized(key)``. From any other key it
   accepts just PAIR (code checked by the Authorizer: single use, attempt-limited, constant
   time) and answers everything else with an ERROR; a successful PAIR adds the key to
   authorized_keys, after which the same connection is served normally.

ZAP runs on pyzmq's :class:`~zmq.auth.asyncio.AsyncioAuthenticator`: a task on the server's own
event loop, so there is no extra thread and the policy object is only touched from one thread
(it is thread-safe anyway, so a ``ThreadAuthenticator`` would work too). It needs a free event
loop, which the worker needs anyway: inference runs in an executor. Each server owns a ZeroMQ
context, because the ZAP endpoint is per context; ZAP is started before ``bind``, and
``ZAP_ENFORCE_DOMAIN`` makes libzmq refuse rather than admit clients should the handler be
missing (without it, a CURVE server whose context has no ZAP handler accepts every key).

The client watches the socket's monitor events while connecting, so a refused key becomes a
clear :class:`WorkerRefusedKeyError` instead of silence.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.utils.monitor import parse_monitor_message

from fleetgui.errors import FleetguiError
from fleetgui.net.connection_guard import ConnectionGuard
from fleetgui.net.keys import KeyPair, fingerprint
from fleetgui.net.protocol import (
    DEFAULT_LIMITS,
    ErrorCode,
    FrameLike,
    Limits,
    Message,
    Op,
    ProtocolError,
    decode,
    encode,
    error_message,
    raise_if_error,
)
from fleetgui.net.trust import Authorizer, PairingError

logger = logging.getLogger(__name__)

ZAP_DOMAIN = "fleetgui"
DEFAULT_TIMEOUT_S = 10.0
_REFUSAL_LOG_INTERVAL_S = 60.0  # a refused client retries every ~100 ms: log each key once a minute


class ConnectError(FleetguiError):
    """A connection to a worker could not be set up."""


class WorkerRefusedKeyError(ConnectError):
    """The worker's ZAP handler refused this coordinator's key."""


class RequestTimeoutError(FleetguiError):
    """A peer did not answer in time."""


_CURVE_OVERHEAD_BYTES = 64  # a CURVE MESSAGE command wraps a frame: name, nonce, flags, MAC


def _configure(socket: zmq.Socket[Any], limits: Limits) -> None:
    socket.linger = 0
    # libzmq drops bigger frames; it measures them encrypted, so the overhead must fit too
    socket.setsockopt(zmq.MAXMSGSIZE, limits.max_frame_bytes + _CURVE_OVERHEAD_BYTES)
    socket.setsockopt(zmq.HANDSHAKE_IVL, int(DEFAULT_TIMEOUT_S * 1000))


class _ZapPolicy:
    """The ZAP credentials provider: asks the Authorizer, never raises, logs refusals, and
    tells the connection guard which keys only the pairing window let in."""

    def __init__(self, authorizer: Authorizer, name: str, guard: ConnectionGuard) -> None:
        self.authorizer = authorizer
        self.name = name
        self.guard = guard
        self.address = "?"  # set by _Authenticator before each callback
        self._last_logged: dict[str, float] = {}

    def callback(self, domain: str, key: bytes) -> bool:
        public_key = key.decode("ascii", "replace")
        try:
            allowed = self.authorizer.is_allowed(public_key)
            known = self.authorizer.is_authorized(public_key)
            if allowed and not (known or self.authorizer.is_ring_peer(public_key)):
                self.guard.admitted_by_window(self.address, public_key)
        except Exception:  # a raising callback would stop the ZAP task: refuse instead
            logger.exception("authorization check failed; refusing %s", self.address)
            return False
        if not allowed:
            now = time.monotonic()
            recent = now - self._last_logged.get(public_key, -_REFUSAL_LOG_INTERVAL_S)
            level = logging.WARNING if recent >= _REFUSAL_LOG_INTERVAL_S else logging.DEBUG
            if level == logging.WARNING:
                if len(self._last_logged) > 10_000:  # many made-up keys: forget, do not grow
                    self._last_logged.clear()
                self._last_logged[public_key] = now
            logger.log(
                level,
                "%s refused a connection from %s: key %s is not in authorized_keys"
                " and no pairing code is active",
                self.name,
                self.address,
                fingerprint(public_key),
            )
        return allowed


class _Authenticator(AsyncioAuthenticator):
    """AsyncioAuthenticator that tells the policy which address is asking (for the log)."""

    policy: _ZapPolicy

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        if len(msg) > 3:
            self.policy.address = msg[3].decode("utf-8", "replace")
        await super().handle_zap_message(msg)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message from an authorized coordinator, or a FORWARD from a ring peer."""

    peer: bytes  # ROUTER routing id: pass it back to send()
    client_key: str  # the sender's CURVE public key
    message: Message
    from_coordinator: bool = True  # False: the previous worker of the ring (FORWARD only)


class SecureServer:
    """A CURVE ROUTER that only hands over messages from authorized keys (see module doc)."""

    def __init__(
        self,
        identity: KeyPair,
        authorizer: Authorizer,
        *,
        name: str = "worker",
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.name, self.authorizer, self.limits = name, authorizer, limits
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        _configure(self._socket, limits)
        self.guard = ConnectionGuard(
            self._socket, authorizer, name=name, handshake_s=DEFAULT_TIMEOUT_S
        )
        self._auth = _Authenticator(self._context)
        self._auth.policy = _ZapPolicy(authorizer, name, self.guard)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._socket.curve_server = True
        self._socket.curve_publickey = identity.public.encode("ascii")
        self._socket.curve_secretkey = identity.secret.encode("ascii")
        self._socket.zap_domain = ZAP_DOMAIN.encode()
        self._socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler: refuse, not allow

    async def bind(self, endpoint: str) -> str:
        """Start ZAP and bind (``tcp://127.0.0.1:*`` picks a port); returns the endpoint."""
        if self._auth.zap_socket is None:
            self._auth.start()  # before bind: never a moment without authorization
            self._auth.configure_curve_callback(ZAP_DOMAIN, self._auth.policy)
            self.guard.start()
        self._socket.bind(endpoint)
        bound = str(self._socket.getsockopt_string(zmq.LAST_ENDPOINT))
        logger.info("%s listening on %s", self.name, bound)
        return bound

    async def recv(self, timeout_s: float | None = None) -> Incoming:
        """The next message from an authorized key; PAIR requests and refusals are answered
        here. Raises :class:`RequestTimeoutError` after ``timeout_s`` (None: wait forever)."""
        try:
            async with asyncio.timeout(timeout_s):
                incoming = None
                while incoming is None:
                    incoming = await self._receive_one()
                return incoming
        except TimeoutError:
            raise RequestTimeoutError(f"{self.name}: no request within {timeout_s} s") from None

    async def _receive_one(self) -> Incoming | None:
        frames = await self._socket.recv_multipart(copy=False)
        peer = frames[0].bytes
        if len(frames) < 2:
            return None
        key = str(frames[1].get("User-Id"))
        address = str(frames[1].get("Peer-Address"))
        try:
            message = decode([f.buffer for f in frames[1:]], self.limits)
        except ProtocolError as exc:
            logger.warning("%s: bad message from %s (%s): %s", self.name, address, exc.code, exc)
            await self.send(peer, encode(error_message(exc.code, str(exc))))
            return None
        if message.op is Op.PAIR:
            await self._pair(peer, key, address, message)
            return None
        coordinator = self.authorizer.is_authorized(key)
        ring_op = message.op in (Op.FORWARD, Op.FORWARD_BATCH)
        if not coordinator and ring_op and self.authorizer.is_ring_peer(key):
            return Incoming(peer, key, message, from_coordinator=False)
        if not coordinator:
            logger.warning(
                "%s: refused %s from unpaired key %s at %s",
                self.name,
                message.op.name,
                fingerprint(key),
                address,
            )
            text = (
                f"this coordinator's key is not authorized on worker {self.name!r}: pair it "
                "(`fleetgui worker --pair`) or add it to the worker's authorized_keys"
            )
            reply = error_message(ErrorCode.UNAUTHORIZED, text, request_id=message.request_id)
            await self.send(peer, encode(reply))
            return None
        return Incoming(peer, key, message)

    async def _pair(self, peer: bytes, key: str, address: str, message: Message) -> None:
        code, comment = message.meta.get("code"), str(message.meta.get("comment", ""))[:200]
        try:
            if not self.authorizer.is_authorized(key):
                candidate = code if isinstance(code, str) else ""
                self.authorizer.pair(key, candidate, comment, source=address)
        except PairingError as exc:
            logger.warning(
                "%s: pairing refused for %s at %s: %s", self.name, fingerprint(key), address, exc
            )
            reply = error_message(ErrorCode.PAIRING_FAILED, str(exc), request_id=message.request_id)
        else:
            reply = Message(Op.PAIR_OK, request_id=message.request_id, meta={"worker": self.name})
        await self.send(peer, encode(reply))

    async def send(self, peer: bytes, frames: Sequence[FrameLike]) -> bool:
        """Send ``frames`` to ``peer``; False (logged) if it is gone or not reading."""
        try:
            async with asyncio.timeout(DEFAULT_TIMEOUT_S):
                await self._socket.send_multipart([peer, *frames], copy=False)
            return True
        except (zmq.ZMQError, TimeoutError) as exc:
            logger.warning("%s: could not send to a peer that left: %s", self.name, exc)
            return False

    def close(self) -> None:
        """Close the socket, stop ZAP and end the context."""
        self.guard.stop()
        self._socket.close(linger=0)
        self._auth.stop()
        self._context.destroy(linger=0)


_MONITORED = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
)


class SecureClient:
    """A CURVE DEALER to one worker whose public key is known (pinned or configured)."""

    def __init__(
        self,
        identity: KeyPair,
        server_key: str,
        *,
        name: str = "worker",
        limits: Limits = DEFAULT_LIMITS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.name, self.server_key, self.limits, self.timeout_s = (
            name,
            server_key,
            limits,
            timeout_s,
        )
        self.identity = identity
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.DEALER)
        _configure(self._socket, limits)
        self._socket.curve_serverkey = server_key.encode("ascii")
        self._socket.curve_publickey = identity.public.encode("ascii")
        self._socket.curve_secretkey = identity.secret.encode("ascii")
        self._next_id = 1

    async def connect(self, endpoint: str, timeout_s: float | None = None) -> None:
        """Connect and wait for the encrypted handshake; raise a clear error if it fails."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        monitor = self._socket.get_monitor_socket(_MONITORED)
        self._socket.connect(endpoint)
        reached = False
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    event = parse_monitor_message(await monitor.recv_multipart())["event"]
                    reached = reached or event == zmq.EVENT_CONNECTED
                    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                        return
                    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                        raise WorkerRefusedKeyError(
                            f"worker {self.name!r} at {endpoint} refused this coordinator's key "
                            f"({fingerprint(self.identity.public)}): pair it with "
                            f"`fleetgui worker --pair` or add the key to its authorized_keys"
                        )
                    if event != zmq.EVENT_CONNECTED:
                        raise ConnectError(
                            f"the encrypted handshake with worker {self.name!r} at {endpoint} "
                            f"failed: it does not hold the expected key "
                            f"{fingerprint(self.server_key)}, or it is not a fleetgui worker"
                        )
        except TimeoutError:
            where = "answered but never finished the handshake" if reached else "is unreachable"
            raise ConnectError(
                f"worker {self.name!r} at {endpoint} {where} after {timeout_s:g} s: is "
                f"`fleetgui worker` running there, and is its port open in the firewall?"
            ) from None
        finally:
            self._socket.disable_monitor()
            monitor.close(linger=0)

    async def send(self, frames: Sequence[FrameLike]) -> None:
        """Send one message's frames (zero-copy)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._socket.send_multipart(list(frames), copy=False)
        except TimeoutError:
            raise RequestTimeoutError(f"could not send to worker {self.name!r}") from None

    async def recv(self, timeout_s: float | None = None) -> Message:
        """The next message, decoded and checked (ERROR replies are returned as they are)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                frames = await self._socket.recv_multipart(copy=False)
        except TimeoutError:
            raise RequestTimeoutError(
                f"worker {self.name!r} did not answer within {timeout_s:g} s"
            ) from None
        return decode([f.buffer for f in frames], self.limits)

    async def request(self, message: Message, timeout_s: float | None = None) -> Message:
        """Send ``message`` with a fresh request id and return the reply to it; an ERROR reply
        raises :class:`~fleetgui.net.protocol.RemoteError`."""
        request_id, self._next_id = self._next_id, self._next_id + 1
        fields = {f: getattr(message, f) for f in ("op", "stream_id", "flags", "meta", "tensors")}
        await self.send(encode(Message(request_id=request_id, **fields), self.limits))
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            reply = await self.recv(max(0.0, deadline - time.monotonic()))
            if reply.request_id in (request_id, 0):
                return raise_if_error(reply, f"worker {self.name!r}")
            logger.debug("dropping a late reply to request %d", reply.request_id)

    async def pair(self, code: str, comment: str = "") -> None:
        """Present the worker's pairing code so that it trusts this coordinator's key."""
        reply = Message(Op.PAIR, meta={"code": code, "comment": comment})
        try:
            await self.request(reply)
        except FleetguiError as exc:
            if getattr(exc, "code", None) == ErrorCode.PAIRING_FAILED:
                raise PairingError(str(exc)) from exc
            raise

    def close(self) -> None:
        """Close the socket and its context."""
        self._socket.close(linger=0)
        self._context.destroy(linger=0)
