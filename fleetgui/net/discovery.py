"""Finding workers: zero-config on the LAN (DNS-SD over mDNS) and workers added by ``host:port``.

A worker advertises ``_fleetgui._tcp.local.`` with :class:`ZeroconfAdvertiser`; its TXT record
holds the essentials of its :class:`WorkerInfo` (:func:`encode_txt`), each ``key=value`` within
DNS's 255-byte limit. A coordinator sees workers through a :class:`Discovery`: a
:class:`ZeroconfBrowser`, or a :class:`~fleetgui.fleet.pairing.manual_workers.ManualDiscovery` that
probes the workers the user added (kept in ``workers.json``). Both keep ``workers`` (by
address) and call ``on_change(event, info)`` on every addition, update and removal. A TXT
record is only a hint (anyone on the LAN can send one); the coordinator pins the key from the
info probe and CURVE.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import logging
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

import ifaddr
from zeroconf import InterfaceChoice, IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from fleetgui.errors import FleetguiError
from fleetgui.net.worker_info import WorkerInfo

logger = logging.getLogger(__name__)

SERVICE_TYPE = "_fleetgui._tcp.local."
TXT_FORMAT = "1"  # the "txtvers" of the record below
_TXT_MAX_BYTES = 255  # one DNS character-string
_LABEL_MAX_BYTES = 63  # one DNS label (the instance name)
_RESOLVE_TIMEOUT_MS = 3000
_TEXT_FIELDS = {"name": "name", "ver": "version", "key": "public_key", "os": "os", "cpu": "cpu"}
_INT_FIELDS = {
    "proto": "protocol",
    "cores": "cpu_cores",
    "ram": "ram_bytes",
    "fram": "free_ram_bytes",
    "disk": "free_disk_bytes",
}


class DiscoveryEvent(enum.StrEnum):
    ADDED = "added"
    UPDATED = "updated"
    REMOVED = "removed"


OnChange = Callable[[DiscoveryEvent, WorkerInfo], None]


def _clip(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, never inside a character."""
    return text.encode()[:max_bytes].decode(errors="ignore")


def encode_txt(info: WorkerInfo) -> dict[str, str]:
    """The TXT record of ``info``: short keys, every ``key=value`` under 256 bytes. Host and
    port are not in it (they are the service's address and SRV port)."""
    values = {key: str(getattr(info, field)) for key, field in _TEXT_FIELDS.items()}
    values |= {key: str(getattr(info, field)) for key, field in _INT_FIELDS.items()}
    values["dev"] = ",".join(info.devices)
    values["busy"] = "1" if info.busy else "0"
    record = {"txtvers": TXT_FORMAT}
    for key, value in values.items():
        record[key] = _clip(value, _TXT_MAX_BYTES - len(key) - 1)
    return record


def decode_txt(
    properties: Mapping[bytes, bytes | None] | Mapping[str, str | None], host: str, port: int
) -> WorkerInfo:
    """The :class:`WorkerInfo` in a TXT record (raises ``WorkerInfoError`` if it is not one)."""
    text = {
        (k.decode(errors="replace") if isinstance(k, bytes) else k): (
            v.decode(errors="replace") if isinstance(v, bytes) else (v or "")
        )
        for k, v in properties.items()
    }
    data: dict[str, Any] = {"host": host, "port": port}
    for key, field in _TEXT_FIELDS.items():
        if key in text:
            data[field] = text[key]
    for key, field in _INT_FIELDS.items():
        with contextlib.suppress(KeyError, ValueError):
            data[field] = int(text[key])
    data["devices"] = [d for d in text.get("dev", "").split(",") if d]
    data["busy"] = text.get("busy") == "1"
    return WorkerInfo.from_dict(data)


def instance_name(info: WorkerInfo) -> str:
    """The DNS-SD instance label: the worker's name and port (two workers may share a PC)."""
    suffix = f" ({info.port})"
    return _clip(info.name, _LABEL_MAX_BYTES - len(suffix)) + suffix


def local_ipv4_addresses() -> list[str]:
    """This PC's IPv4 addresses other than loopback (``["127.0.0.1"]`` if it has none)."""
    found = [
        str(ip.ip)
        for adapter in ifaddr.get_adapters()
        for ip in adapter.ips
        if ip.is_IPv4 and not str(ip.ip).startswith("127.")
    ]
    return found or ["127.0.0.1"]


class Discovery(abc.ABC):
    """Workers seen by one discovery mechanism, by address (``host:port``)."""

    def __init__(self, on_change: OnChange | None = None) -> None:
        self.on_change = on_change
        self._workers: dict[str, WorkerInfo] = {}

    @property
    def workers(self) -> dict[str, WorkerInfo]:
        return dict(self._workers)

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _put(self, info: WorkerInfo) -> None:
        old = self._workers.get(info.address)
        self._workers[info.address] = info
        if old != info:
            self._emit(DiscoveryEvent.ADDED if old is None else DiscoveryEvent.UPDATED, info)

    def _drop(self, address: str) -> None:
        old = self._workers.pop(address, None)
        if old is not None:
            self._emit(DiscoveryEvent.REMOVED, old)

    def _emit(self, event: DiscoveryEvent, info: WorkerInfo) -> None:
        logger.info("worker %s %s (%s)", info.name, event, info.address)
        if self.on_change is not None:
            try:
                self.on_change(event, info)
            except Exception:
                logger.exception("discovery callback failed on %s %s", event, info.address)


class ZeroconfAdvertiser:
    """Announces one worker on the LAN; :meth:`update` refreshes its TXT record."""

    def __init__(
        self,
        *,
        addresses: Sequence[str] | None = None,  # default: info.host, or all LAN addresses
        interfaces: InterfaceChoice | list[str] = InterfaceChoice.All,
        service_type: str = SERVICE_TYPE,
    ) -> None:
        self._addresses = addresses
        self._interfaces = interfaces
        self._type = service_type
        self._zeroconf: AsyncZeroconf | None = None
        self._service: AsyncServiceInfo | None = None

    def _service_info(self, info: WorkerInfo, name: str | None = None) -> AsyncServiceInfo:
        addresses = self._addresses
        if addresses is None:
            wildcard = info.host in ("", "0.0.0.0", "::", "*")
            addresses = local_ipv4_addresses() if wildcard else [info.host]
        host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "fleetgui"
        return AsyncServiceInfo(
            self._type,
            name or f"{instance_name(info)}.{self._type}",
            port=info.port,
            properties=encode_txt(info),
            server=f"{host}.local.",
            parsed_addresses=list(addresses),
        )

    async def start(self, info: WorkerInfo) -> None:
        self._zeroconf = AsyncZeroconf(interfaces=self._interfaces, ip_version=IPVersion.V4Only)
        self._service = self._service_info(info)
        await self._zeroconf.async_register_service(self._service, allow_name_change=True)
        logger.info("advertising %s on the LAN", self._service.name)

    async def update(self, info: WorkerInfo) -> None:
        if self._zeroconf is None or self._service is None:
            raise FleetguiError("the advertiser is not started")
        self._service = self._service_info(info, self._service.name)
        await self._zeroconf.async_update_service(self._service)

    async def stop(self) -> None:
        if self._zeroconf is not None:
            with contextlib.suppress(Exception):
                await self._zeroconf.async_unregister_all_services()
            await self._zeroconf.async_close()
            self._zeroconf = None


class ZeroconfBrowser(Discovery):
    """Keeps the workers advertised on the LAN."""

    def __init__(
        self,
        on_change: OnChange | None = None,
        *,
        interfaces: InterfaceChoice | list[str] = InterfaceChoice.All,
        service_type: str = SERVICE_TYPE,
        resolve_timeout_ms: int = _RESOLVE_TIMEOUT_MS,
    ) -> None:
        super().__init__(on_change)
        self._interfaces = interfaces
        self._type = service_type
        self._timeout_ms = resolve_timeout_ms
        self._zeroconf: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._by_service: dict[str, str] = {}  # service name -> address
        self._pending: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        self._zeroconf = AsyncZeroconf(interfaces=self._interfaces, ip_version=IPVersion.V4Only)
        self._browser = AsyncServiceBrowser(
            self._zeroconf.zeroconf, [self._type], handlers=[self._on_state_change]
        )

    async def stop(self) -> None:
        for task in self._pending.values():
            task.cancel()
        self._pending.clear()
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        if self._zeroconf is not None:
            await self._zeroconf.async_close()
            self._zeroconf = None

    def _on_state_change(
        self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        old = self._pending.pop(name, None)
        if old is not None:
            old.cancel()
        if state_change is ServiceStateChange.Removed:
            address = self._by_service.pop(name, None)
            if address is not None:
                self._drop(address)
            return
        task = asyncio.get_running_loop().create_task(self._resolve(zeroconf, name))
        self._pending[name] = task
        task.add_done_callback(lambda done: self._forget(name, done))

    def _forget(self, name: str, task: asyncio.Task[None]) -> None:
        if self._pending.get(name) is task:
            del self._pending[name]

    async def _resolve(self, zeroconf: Zeroconf, name: str) -> None:
        service = AsyncServiceInfo(self._type, name)
        if not await service.async_request(zeroconf, self._timeout_ms):
            logger.debug("no answer resolving %s", name)
            return
        addresses = service.parsed_addresses(IPVersion.V4Only) or service.parsed_addresses()
        if not addresses or service.port is None:
            logger.debug("%s has no address or port", name)
            return
        try:
            info = decode_txt(service.properties, addresses[0], service.port)
        except FleetguiError as exc:
            logger.info("ignoring %s: %s", name, exc)
            return
        previous = self._by_service.get(name)
        if previous is not None and previous != info.address:
            self._drop(previous)
        self._by_service[name] = info.address
        self._put(info)
