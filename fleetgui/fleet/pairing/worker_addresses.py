"""Workers given by address: ``--workers HOST:PORT,...`` parsed, each worker probed and its key
pinned (:func:`resolve_workers`), and pairing with a worker by address (:func:`pair_worker`).

Each worker's public key comes from its info probe and is pinned on first use (ssh's
known_hosts); a worker that later offers another key is refused with an explanation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from fleetgui.addresses import parse_address, zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.fleet.pairing.code_pairing import pair_with_code
from fleetgui.fleet.pairing.known_workers import KnownWorkers
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.net.info_probe import probe
from fleetgui.net.keys import KeyPair
from fleetgui.net.worker_info import WorkerInfo

log = logging.getLogger(__name__)


def parse_worker_list(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT,HOST:PORT`` as (host, port) pairs, in order, no duplicates."""
    addresses = [parse_address(part.strip()) for part in text.split(",") if part.strip()]
    if not addresses:
        raise FleetguiError("--workers is empty: give HOST:PORT,HOST:PORT")
    if len(set(addresses)) != len(addresses):
        raise FleetguiError(f"--workers lists a worker twice: {text}")
    return addresses


async def resolve_workers(
    addresses: Sequence[tuple[str, int]],
    known: KnownWorkers | None = None,
    *,
    timeout_s: float = 5.0,
) -> list[WorkerEndpoint]:
    """Probe each worker and pin (or check) its key; raise naming any that is not usable."""
    known = known or KnownWorkers()
    infos = await asyncio.gather(*(probe(host, port, timeout_s) for host, port in addresses))
    names = [info.name for info in infos]
    if len(set(names)) != len(names):
        raise FleetguiError(
            f"two workers share a name ({', '.join(names)}): start each with its own --name"
        )
    endpoints = []
    for info in infos:
        if known.check(info.address, info.name, info.public_key):
            log.warning("pinned the key of new worker %s at %s", info.name, info.address)
        endpoints.append(
            WorkerEndpoint(info.name, zmq_endpoint(info.host, info.port), info.public_key)
        )
    return endpoints


async def pair_worker(
    address: str,
    code: str,
    identity: KeyPair,
    comment: str = "",
    *,
    known: KnownWorkers | None = None,
    timeout_s: float = 10.0,
) -> WorkerInfo:
    """Pin the worker's key and present its pairing code, so it trusts ``identity``."""
    host, port = parse_address(address)
    info = await probe(host, port, timeout_s)
    (known or KnownWorkers()).check(info.address, info.name, info.public_key)
    await pair_with_code(identity, info, code, comment, timeout_s)
    log.warning("paired with worker %s at %s", info.name, info.address)
    return info
