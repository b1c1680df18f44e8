"""A worker PC's whole service: the agent, its info probe and its LAN advertisement.

``run_worker`` is what ``fleetgui worker`` runs: it binds the encrypted protocol on the listen
port and the info probe on the next port, advertises the worker over DNS-SD (unless disabled or
impossible on this network), reports readiness, and serves until stopped (SIGINT/SIGTERM), then
closes every socket so the ports are free again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetgui import paths
from fleetgui.addresses import zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.net.discovery import ZeroconfAdvertiser
from fleetgui.net.info_probe import InfoProbeServer
from fleetgui.net.keys import AUTHORIZED_KEYS, KeyPair, fingerprint
from fleetgui.net.sysinfo import collect_worker_info
from fleetgui.net.trust import Authorizer
from fleetgui.net.worker_info import INFO_PORT_OFFSET, WorkerInfo
from fleetgui.worker.agent import WorkerAgent, WorkerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceConfig:
    """What ``fleetgui worker`` was asked for."""

    host: str  # listen address; 0.0.0.0 for every interface
    port: int  # protocol port (0: pick two free consecutive ports); the info probe is port + 1
    worker: WorkerConfig
    authorized_keys: Path  # coordinator keys this worker trusts
    pair: bool = False  # show a one-time pairing code
    advertise: bool = True  # DNS-SD on the LAN
    ready_json: bool = False  # print one JSON line when ready (for scripts)
    exit_with: int | None = None  # stop when this process (the one that started us) is gone


#: Where the kernel picks a connection's local port (Linux's file; IANA's range elsewhere).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def _both_free(host: str, port: int) -> bool:
    with socket.socket() as first, socket.socket() as second:
        try:
            first.bind((host, port))
            second.bind((host, port + INFO_PORT_OFFSET))
        except OSError:
            return False
    return True


def free_port_pair(host: str = "127.0.0.1", attempts: int = 50) -> int:
    """A port ``p`` such that ``p`` and ``p + 1`` were both free a moment ago, chosen below the
    kernel's ephemeral range: a worker restarted on its port (after a crash, or a test's kill)
    must find it free, and inside that range any connection's local end may hold it."""
    top = _ephemeral_start() - 1 - INFO_PORT_OFFSET
    for _ in range(attempts):
        port = random.randint(max(1024, top - 12_000), top)
        if _both_free(host, port):
            return port
    for _ in range(attempts):  # a crowded low range: any free pair will do
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        if _both_free(host, port):
            return int(port)
    raise FleetguiError(f"no two consecutive free ports on {host}: give --listen HOST:PORT")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[v6]:PORT``, or a bare ``PORT``) of ``--listen``."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "0.0.0.0", text
    host = host.strip("[]") or "0.0.0.0"
    if not port.isdigit() or not 0 <= int(port) <= 65534:
        raise FleetguiError(
            f"--listen {text!r}: give HOST:PORT with a port from 1 to 65534 (0 picks a free one)"
        )
    return host, int(port)


def _announce_host(host: str) -> str:
    """The address coordinators should use when the worker listens on every interface."""
    if host not in ("0.0.0.0", "::", ""):
        return host
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent; this picks the LAN interface
        return str(probe.getsockname()[0])
    return "127.0.0.1"


async def run_worker(
    config: ServiceConfig,
    identity: KeyPair,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[WorkerInfo], None] | None = None,
) -> None:
    """Serve until ``stop`` is set or SIGINT/SIGTERM arrives."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    port = config.port or free_port_pair(config.host if config.host != "0.0.0.0" else "127.0.0.1")
    authorizer = Authorizer(config.authorized_keys)
    host = _announce_host(config.host)
    agent: WorkerAgent | None = None

    def info() -> WorkerInfo:
        return collect_worker_info(
            config.worker.name,
            host,
            port,
            identity.public,
            config.worker.cache_dir,
            busy=agent is not None and agent.busy,
        )

    agent = WorkerAgent(
        config.worker, identity, authorizer, info=lambda: json.loads(info().to_json())
    )
    probe = InfoProbeServer(info, config.host, port)
    advertiser = None
    serving: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None
    try:
        await agent.bind(zmq_endpoint(config.host, port))
        await probe.start()
        if config.advertise:
            advertiser = await _advertise(info())
        if config.pair:
            code = authorizer.open_pairing()
            print(
                f"pairing code for {config.worker.name}: {code.code} (valid 5 minutes, "
                "enter it in the coordinator's fleet view)",
                flush=True,
            )
        ready = info()
        _report_ready(ready, identity, config)
        if on_ready is not None:
            on_ready(ready)
        if config.exit_with is not None:
            watcher = loop.create_task(_watch_parent(config.exit_with, stop))
        serving = loop.create_task(agent.serve())
        stopping = loop.create_task(stop.wait())
        done, _ = await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if serving in done:
            serving.result()  # re-raise what ended the agent
    finally:
        if watcher is not None:
            watcher.cancel()
        if serving is not None:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving
        if advertiser is not None:
            await advertiser.stop()
        await probe.close()
        await agent.close()
        log.info("worker %s stopped", config.worker.name)


async def _watch_parent(pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once process ``pid`` has exited (a local fleet dies with its starter)."""
    import psutil

    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        await asyncio.sleep(1.0)
    log.warning("process %d that started this worker is gone; stopping", pid)
    stop.set()


async def _advertise(info: WorkerInfo) -> ZeroconfAdvertiser | None:
    advertiser = ZeroconfAdvertiser()
    try:
        await asyncio.wait_for(advertiser.start(info), timeout=10)
    except Exception as exc:  # no multicast here: the worker still serves by address
        log.warning("cannot advertise on the LAN (%s); add this worker by address instead", exc)
        with contextlib.suppress(Exception):
            await advertiser.stop()
        return None
    return advertiser


def _report_ready(info: WorkerInfo, identity: KeyPair, config: ServiceConfig) -> None:
    if config.ready_json:
        record = {"event": "ready", **json.loads(info.to_json())}
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()
        return
    print(
        f"fleetgui worker {info.name!r} ready on {info.address} "
        f"(info probe on port {info.port + INFO_PORT_OFFSET}), key {fingerprint(identity.public)}",
        flush=True,
    )
    print(f"trusted coordinator keys: {config.authorized_keys}", flush=True)


def default_authorized_keys() -> Path:
    return paths.config_dir() / AUTHORIZED_KEYS
