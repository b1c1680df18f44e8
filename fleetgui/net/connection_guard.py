"""Bounds on what connections that have not authenticated can make a worker hold.

libzmq buffers a connection's frames before the CURVE handshake decides who it is, up to
``MAXMSGSIZE`` a frame (:attr:`~fleetgui.net.protocol.Limits.max_frame_bytes`), and accepts
any number of connections. Like sshd's ``MaxStartups`` and ``PerSourceMaxStartups``, this guard
caps the connections that may still be handshaking, per source address and in all, so a
stranger can make a worker hold at most ``max_total * max_frame_bytes``; a connection over the
cap is shut down at once. libzmq reports accepted connections with their file descriptor on the
socket's monitor; the guard shuts one down on the descriptor (``shutdown``, never ``close``:
the descriptor stays libzmq's, which sees the connection end and cleans it up).

A connection younger than the handshake limit (``HANDSHAKE_IVL``, after which libzmq drops a
connection that has not finished) counts as handshaking: the monitor's handshake events do not
say which connection finished, and a coordinator opens only a few connections at a time.

It also closes the pairing window's leftovers: while a pairing code is active any key passes the
handshake, so that an unknown coordinator can pair. When the window closes, connections accepted
during it from a source whose key is still not authorized (a stranger's) are shut down; a
paired coordinator's key is authorized by then, so its connections stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from fleetgui.net.trust import Authorizer

logger = logging.getLogger(__name__)

MAX_HANDSHAKES_PER_SOURCE = 8  # a coordinator and a ring neighbour open a few at most
MAX_HANDSHAKES = 32  # with 1 MiB frames: at most 32 MiB held for strangers
_WINDOW_POLL_S = 0.5  # how soon after the pairing window closes its strangers are cut off
_LOG_INTERVAL_S = 60.0
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


@dataclass(slots=True)
class _Connection:
    source: str  # the peer's IP address
    accepted_at: float
    during_window: bool  # accepted while a pairing code was active


def source_address(address: str) -> str:
    """An IP address as both the socket and ZAP report it (IPv4-mapped IPv6 as IPv4)."""
    return address.removeprefix("::ffff:")


def peer_of_descriptor(fd: int, *, shut_down: bool = False) -> str | None:
    """The peer address of the TCP connection on libzmq's descriptor ``fd``, which is shut
    down if asked (libzmq keeps the descriptor); None if ``fd`` is no longer connected."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        peer = source_address(str(sock.getpeername()[0]))
        if shut_down:
            sock.shutdown(socket.SHUT_RDWR)
        return peer
    except OSError:
        return None
    finally:
        sock.detach()  # the descriptor is libzmq's: never close it here


class ConnectionGuard:
    """Watches one listening ROUTER socket (see module doc). Call :meth:`admitted_by_window`
    from the ZAP handler for each key let in only because a pairing code was active."""

    def __init__(
        self,
        sock: zmq.asyncio.Socket,
        authorizer: Authorizer,
        *,
        name: str = "worker",
        handshake_s: float = 10.0,
        max_per_source: int = MAX_HANDSHAKES_PER_SOURCE,
        max_total: int = MAX_HANDSHAKES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.authorizer = name, authorizer
        self.handshake_s, self.max_per_source, self.max_total = (
            handshake_s,
            max_per_source,
            max_total,
        )
        self._clock = clock
        self._connections: dict[int, _Connection] = {}
        self._window_keys: dict[str, set[str]] = {}  # source -> keys let in by the window
        self._window_was_open = False
        self._monitor = sock.get_monitor_socket(_EVENTS)
        self._socket = sock
        self._task: asyncio.Task[None] | None = None
        self._last_logged: dict[str, float] = {}
        self.refused = 0  # connections shut down for being over the cap
        self.closed_after_pairing = 0  # strangers' connections shut down with the window

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        """Stop watching (before the socket closes)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        with contextlib.suppress(zmq.ZMQError):
            self._socket.disable_monitor()
        self._monitor.close(linger=0)

    def admitted_by_window(self, source: str, key: str) -> None:
        """ZAP let ``key`` from ``source`` in only because a pairing code is active."""
        keys = self._window_keys.setdefault(source_address(source), set())
        if len(keys) < 64:  # a stranger making up keys: one is enough to mark the source
            keys.add(key)

    async def _run(self) -> None:
        while True:
            if await self._monitor.poll(_WINDOW_POLL_S * 1000):
                event = parse_monitor_message(await self._monitor.recv_multipart())
                self.on_event(int(event["event"]), int(event["value"]))
            self.check_window()

    def on_event(self, event: int, fd: int) -> None:
        """One monitor event: a connection accepted (``fd``) or gone."""
        if event != zmq.EVENT_ACCEPTED:
            self._connections.pop(fd, None)
            return
        source = peer_of_descriptor(fd)
        if source is None:  # already gone
            return
        now = self._clock()
        young = [c for c in self._connections.values() if now - c.accepted_at < self.handshake_s]
        from_source = sum(1 for c in young if c.source == source)
        if from_source >= self.max_per_source or len(young) >= self.max_total:
            peer_of_descriptor(fd, shut_down=True)
            self.refused += 1
            self._log_refusal(source, from_source, len(young))
            return
        window = self.authorizer.pairing_open
        self._window_was_open = self._window_was_open or window
        self._connections[fd] = _Connection(source, now, window)

    def check_window(self) -> None:
        """When the pairing window has closed, shut down the connections it let strangers
        make (sources with a key that is still not authorized)."""
        if self.authorizer.pairing_open:
            self._window_was_open = True
            return
        if not self._window_was_open:
            return
        self._window_was_open = False
        strangers = {
            source
            for source, keys in self._window_keys.items()
            if any(not self.authorizer.is_authorized(key) for key in keys)
        }
        self._window_keys.clear()
        for fd, connection in list(self._connections.items()):
            if connection.during_window and connection.source in strangers:
                if peer_of_descriptor(fd, shut_down=True) is not None:
                    self.closed_after_pairing += 1
                del self._connections[fd]
            else:
                connection.during_window = False
        if strangers:
            logger.warning(
                "%s: pairing closed; cut off unpaired connections from %s",
                self.name,
                ", ".join(sorted(strangers)),
            )

    def _log_refusal(self, source: str, from_source: int, total: int) -> None:
        now = self._clock()
        if now - self._last_logged.get(source, -_LOG_INTERVAL_S) < _LOG_INTERVAL_S:
            return
        if len(self._last_logged) > 10_000:
            self._last_logged.clear()
        self._last_logged[source] = now
        logger.warning(
            "%s: refused a connection from %s: %d from there and %d in all are still "
            "handshaking (limits %d and %d)",
            self.name,
            source,
            from_source,
            total,
            self.max_per_source,
            self.max_total,
        )
