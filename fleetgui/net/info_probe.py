"""The unauthenticated info probe on a worker's port + 1, and the client that reads it.

The server is a plain (NULL mechanism) ZeroMQ ROUTER that answers every request with the
worker's current :class:`WorkerInfo` as JSON, from a callable so ``busy`` and free memory are
fresh. It holds nothing secret (the public key is what a coordinator pins on first use), answers
REQ and DEALER clients alike, and survives garbage: libzmq drops a connection whose frames exceed
``MAXMSGSIZE`` or that does not speak ZMTP, and a message that is not a probe is ignored.

:func:`probe` tells *why* a worker is not seen, as a :class:`WorkerStatusReason` on a
:class:`WorkerProbeError`. ZeroMQ's ``connect`` never fails (it retries quietly), so the probe
first opens a plain TCP connection: refused means the port is closed; no connection or no bytes
means the PC does not answer; bytes that are not a ZMTP greeting mean another program owns the
port. Only then does it ask over ZeroMQ, and check the reply's protocol version.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import zmq
import zmq.asyncio

from fleetgui import __version__
from fleetgui.addresses import format_address, zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.net.protocol import PROTOCOL_VERSION
from fleetgui.net.worker_info import INFO_PORT_OFFSET, WorkerInfo, WorkerInfoError

logger = logging.getLogger(__name__)

PROBE_REQUEST = b"fleetgui-info?"  # what probe() sends; the server answers any short request
MAX_REQUEST_BYTES = 1024  # the server drops connections that send bigger frames
MAX_REPLY_BYTES = 64 * 1024  # the client drops replies bigger than this
DEFAULT_PROBE_TIMEOUT_S = 3.0
_ZMTP_SIGNATURE_BYTES = 10  # ZMTP 3 greeting: 0xFF, 8 padding bytes, 0x7F; libzmq sends it at once
_LOG_INTERVAL_S = 60.0


class WorkerStatusReason(enum.StrEnum):
    """Why a known worker is not usable; ``label`` and ``hint`` are for the user."""

    NOT_ANSWERING = "not_answering"
    PORT_CLOSED = "port_closed"
    WRONG_VERSION = "wrong_version"
    NOT_PAIRED = "not_paired"  # set by the coordinator when the CURVE handshake is refused
    NOT_FLEETGUI = "not_fleetgui"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def hint(self) -> str:
        return _HINTS[self]


_LABELS = {
    WorkerStatusReason.NOT_ANSWERING: "not answering",
    WorkerStatusReason.PORT_CLOSED: "port closed",
    WorkerStatusReason.WRONG_VERSION: "another protocol version",
    WorkerStatusReason.NOT_PAIRED: "not paired",
    WorkerStatusReason.NOT_FLEETGUI: "not a fleetgui worker",
}
_HINTS = {
    WorkerStatusReason.NOT_ANSWERING: (
        "check that the PC is on and on this network, that `fleetgui worker` runs there, and "
        "that its firewall lets the worker's two ports through"
    ),
    WorkerStatusReason.PORT_CLOSED: (
        "start `fleetgui worker` on that PC, or use the port it prints (`--listen HOST:PORT`)"
    ),
    WorkerStatusReason.WRONG_VERSION: "install the same fleetgui version on every PC",
    WorkerStatusReason.NOT_PAIRED: (
        "pair this PC with the worker: run `fleetgui worker --pair` there and enter its code"
    ),
    WorkerStatusReason.NOT_FLEETGUI: (
        "another program uses that port: check the address, or move the worker with --listen"
    ),
}


class WorkerProbeError(FleetguiError):
    """A worker could not be seen; ``reason`` says why, the message also says what to do."""

    def __init__(self, reason: WorkerStatusReason, address: str, detail: str) -> None:
        super().__init__(f"worker {address}: {reason.label}: {detail}; {reason.hint}")
        self.reason = reason
        self.address = address
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ProbeStatus:
    """What probing a known worker found: its last record, and why it is not usable."""

    address: str  # host:port of the encrypted protocol
    info: WorkerInfo | None = None  # the last record it answered with, if any
    reason: WorkerStatusReason | None = None  # None: seen and usable
    detail: str = ""  # what exactly failed, for the user

    @property
    def seen(self) -> bool:
        return self.reason is None and self.info is not None

    def __str__(self) -> str:
        name = self.info.name if self.info is not None else self.address
        if self.reason is None:
            return f"{name} ({self.address}): ready" if self.info else f"{self.address}: unknown"
        return f"{name} ({self.address}): {self.reason.label}"


class InfoProbeServer:
    """Answers info probes on ``host:port + 1`` while the worker's event loop runs.

    ``port`` is the worker's protocol port. ``get_info`` is called for every probe (keep it
    cheap: :func:`fleetgui.net.sysinfo.collect_worker_info` is). Use ``async with`` or
    :meth:`start` / :meth:`close`.
    """

    def __init__(
        self,
        get_info: Callable[[], WorkerInfo],
        host: str,
        port: int,
        *,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self._get_info = get_info
        self.host = host
        self.port = port + INFO_PORT_OFFSET  # the port this server listens on
        self._context = context or zmq.asyncio.Context.instance()
        self._socket: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self.answered = 0  # probes answered
        self.ignored = 0  # messages that were not probes
        self._last_log = 0.0

    async def start(self) -> None:
        sock = self._context.socket(zmq.ROUTER)
        sock.linger = 0
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        sock.setsockopt(zmq.RCVHWM, 100)
        sock.setsockopt(zmq.SNDHWM, 100)
        sock.ipv6 = ":" in self.host
        try:
            sock.bind(zmq_endpoint(self.host, self.port))
        except zmq.ZMQError as exc:
            sock.close()
            raise FleetguiError(
                f"cannot listen for info probes on {format_address(self.host, self.port)}: {exc}; "
                f"stop the program using that port or start the worker with another --listen port"
            ) from exc
        self._socket = sock
        self._task = asyncio.create_task(self._serve(sock), name="info-probe")
        logger.info("answering info probes on %s", format_address(self.host, self.port))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def __aenter__(self) -> InfoProbeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            reply = self._reply(frames)
            if reply is not None:
                # ROUTER never blocks: a reply to a peer that left or is full is dropped
                await sock.send_multipart(reply)

    def _reply(self, frames: list[bytes]) -> list[bytes] | None:
        # [identity, payload] from a DEALER, [identity, b"", payload] from a REQ
        envelope = frames[:2] if len(frames) == 3 and frames[1] == b"" else frames[:1]
        if len(frames) - len(envelope) != 1:
            self.ignored += 1
            self._log_ignored(f"{len(frames) - 1} frames")
            return None
        try:
            text = self._get_info().to_json()
        except Exception:
            logger.exception("cannot describe this worker for an info probe")
            return None
        if frames[-1] != PROBE_REQUEST:
            self._log_ignored(f"request {frames[-1][:32]!r}, answered anyway")
        self.answered += 1
        return [*envelope, text.encode()]

    def _log_ignored(self, what: str) -> None:
        now = time.monotonic()
        if now - self._last_log >= _LOG_INTERVAL_S:
            self._last_log = now
            logger.info("info probe: odd message (%s); further ones logged at debug", what)
        else:
            logger.debug("info probe: odd message (%s)", what)


async def _check_tcp(host: str, port: int, address: str, deadline: float) -> None:
    """Raise the right :class:`WorkerProbeError` unless ``host:port`` speaks ZMTP."""
    # Named by the address the user gave (``address``): the port probed is its info port,
    # one above, and a message naming only that one reads as a typo of ours.
    where = f"{address} (info port {port})"
    loop = asyncio.get_running_loop()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), max(0.0, deadline - loop.time())
        )
    except ConnectionRefusedError as exc:
        raise WorkerProbeError(
            WorkerStatusReason.PORT_CLOSED,
            address,
            f"{address} refused the connection (its info port {port} is closed): "
            "no fleetgui worker runs there",
        ) from exc
    except TimeoutError as exc:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_ANSWERING, address, f"{where} did not accept a connection"
        ) from exc
    except socket.gaierror as exc:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_ANSWERING, address, f"unknown host {host!r} ({exc})"
        ) from exc
    except OSError as exc:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_ANSWERING, address, f"cannot reach {where} ({exc})"
        ) from exc
    try:
        greeting = await asyncio.wait_for(
            reader.read(_ZMTP_SIGNATURE_BYTES), max(0.0, deadline - loop.time())
        )
    except TimeoutError as exc:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_ANSWERING,
            address,
            f"{where} accepts connections but never says anything",
        ) from exc
    except OSError as exc:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_ANSWERING, address, f"{where} dropped the connection"
        ) from exc
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await asyncio.wait_for(writer.wait_closed(), 1.0)
    if not greeting:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_ANSWERING,
            address,
            f"{where} closed the connection without a word",
        )
    if greeting[0] != 0xFF:  # every ZMTP peer starts with 0xFF; HTTP, SSH... do not
        raise WorkerProbeError(
            WorkerStatusReason.NOT_FLEETGUI,
            address,
            f"{where} is not a ZeroMQ service (it said {greeting!r})",
        )


def _parse_reply(frames: list[bytes], host: str, port: int) -> WorkerInfo:
    address = format_address(host, port)
    if len(frames) != 1:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_FLEETGUI, address, f"its reply had {len(frames)} parts, not 1"
        )
    try:
        data: Any = json.loads(frames[0])
    except ValueError as exc:
        raise WorkerProbeError(
            WorkerStatusReason.NOT_FLEETGUI, address, f"its reply is not JSON ({frames[0][:40]!r})"
        ) from exc
    theirs = data.get("protocol") if isinstance(data, dict) else None
    if isinstance(theirs, int) and theirs != PROTOCOL_VERSION:
        version = str(data.get("version", "?"))[:40]
        raise WorkerProbeError(
            WorkerStatusReason.WRONG_VERSION,
            address,
            f"it runs fleetgui {version} (protocol {theirs}), this PC runs "
            f"fleetgui {__version__} (protocol {PROTOCOL_VERSION})",
        )
    try:
        info = WorkerInfo.from_dict(data)
    except WorkerInfoError as exc:
        raise WorkerProbeError(WorkerStatusReason.NOT_FLEETGUI, address, str(exc)) from exc
    return replace(info, host=host, port=port)  # where we reached it, not what it calls itself


async def probe(
    host: str,
    port: int,
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
    *,
    context: zmq.asyncio.Context | None = None,
) -> WorkerInfo:
    """Ask the worker whose protocol port is ``host:port`` for its :class:`WorkerInfo`.

    The answer's ``host`` and ``port`` are the ones given (the address that reached it). Takes
    at most about ``timeout_s``. Raises :class:`WorkerProbeError`; its ``reason`` says why.
    """
    address = format_address(host, port)
    info_port = port + INFO_PORT_OFFSET
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    await _check_tcp(host, info_port, address, deadline)
    sock = (context or zmq.asyncio.Context.instance()).socket(zmq.DEALER)
    try:
        sock.linger = 0
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_REPLY_BYTES)
        sock.ipv6 = ":" in host
        sock.connect(zmq_endpoint(host, info_port))
        await sock.send(PROBE_REQUEST, zmq.NOBLOCK)  # queued on the pipe connect() made
        remaining_ms = max(0, int((deadline - loop.time()) * 1000))
        if not await sock.poll(remaining_ms):
            raise WorkerProbeError(
                WorkerStatusReason.NOT_ANSWERING,
                address,
                f"port {info_port} is open but nothing answered within {timeout_s:g} s "
                f"(the worker may be hung, or that is not a fleetgui worker)",
            )
        frames = await sock.recv_multipart(zmq.NOBLOCK)
    finally:
        sock.close()
    return _parse_reply(frames, host, port)


async def probe_status(
    host: str,
    port: int,
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
    *,
    last: WorkerInfo | None = None,
    context: zmq.asyncio.Context | None = None,
) -> ProbeStatus:
    """:func:`probe` as a :class:`ProbeStatus` (never raises a probe failure); ``last`` is the
    record to keep showing when the worker is not seen."""
    address = format_address(host, port)
    try:
        return ProbeStatus(address, await probe(host, port, timeout_s, context=context))
    except WorkerProbeError as exc:
        return ProbeStatus(address, last, exc.reason, exc.detail)
