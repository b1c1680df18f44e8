"""Does a worker trust this coordinator, and pairing with the code a worker shows (the app's
Pair button and ``fleetgui pair`` alike).

Both open a short-lived CURVE connection with the coordinator's identity to the worker's
pinned key. A worker refuses an unknown key in the handshake (``WorkerRefusedKeyError``), except
while it shows a pairing code: then it admits the handshake but answers everything except PAIR
with ``unauthorized``. Either way the coordinator is *not paired*.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from fleetgui.addresses import zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import ErrorCode, Message, Op, RemoteError
from fleetgui.net.secure_socket import ConnectError, SecureClient, WorkerRefusedKeyError
from fleetgui.net.worker_info import WorkerInfo

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 5.0


class NotPairingError(WorkerRefusedKeyError):
    """The worker refused the key because it is not showing a pairing code."""


@dataclass(frozen=True)
class PairingCheck:
    """The answer of :func:`check_paired`."""

    paired: bool
    hello: dict[str, Any] = field(default_factory=dict)  # the worker's HELLO reply (if paired)
    error: str = ""  # why the encrypted connection failed (neither paired nor refused)
    rtt_ms: float | None = None  # the HELLO's round trip on the established encrypted link


def _client(identity: KeyPair, info: WorkerInfo, timeout_s: float) -> SecureClient:
    return SecureClient(identity, info.public_key, name=info.name, timeout_s=timeout_s)


async def check_paired(
    identity: KeyPair, info: WorkerInfo, timeout_s: float = CHECK_TIMEOUT_S
) -> PairingCheck:
    """Connect with ``identity`` and say HELLO: paired, refused, or failed (with why)."""
    client = _client(identity, info, timeout_s)
    try:
        await client.connect(zmq_endpoint(info.host, info.port), timeout_s)
        started = time.perf_counter()
        reply = await client.request(Message(Op.HELLO), timeout_s)
        rtt_ms = (time.perf_counter() - started) * 1000
    except WorkerRefusedKeyError:
        return PairingCheck(False)
    except RemoteError as exc:
        if exc.code == ErrorCode.UNAUTHORIZED:
            return PairingCheck(False)
        return PairingCheck(False, error=str(exc))
    except (ConnectError, FleetguiError, OSError) as exc:
        log.info("pairing check of %s failed: %s", info.name, exc)
        return PairingCheck(False, error=str(exc))
    finally:
        client.close()
    return PairingCheck(True, dict(reply.meta), rtt_ms=rtt_ms)


async def pair_with_code(
    identity: KeyPair,
    info: WorkerInfo,
    code: str,
    comment: str = "",
    timeout_s: float = CHECK_TIMEOUT_S,
) -> None:
    """Present the worker's one-time ``code`` (``comment`` goes beside the key in the worker's
    trusted keys); raises a ``FleetguiError`` that says what to do (``PairingError`` for a
    wrong or expired code, :class:`NotPairingError`)."""
    client = _client(identity, info, timeout_s)
    try:
        try:
            await client.connect(zmq_endpoint(info.host, info.port), timeout_s)
        except WorkerRefusedKeyError as exc:
            raise NotPairingError(
                f"worker {info.name!r} is not pairing: restart it with `fleetgui worker --pair` "
                "and enter the code it shows"
            ) from exc
        await client.pair(code.strip(), comment)
    finally:
        client.close()
    log.info("paired with worker %s", info.name)
