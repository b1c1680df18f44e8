"""Workers the user added by ``host:port`` (kept in ``workers.json``), and the
:class:`~fleetgui.net.discovery.Discovery` that probes them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from fleetgui import fsutil, paths
from fleetgui.addresses import format_address, parse_address
from fleetgui.errors import FleetguiError
from fleetgui.net.discovery import Discovery, OnChange
from fleetgui.net.info_probe import DEFAULT_PROBE_TIMEOUT_S, ProbeStatus, probe_status
from fleetgui.net.worker_info import WorkerInfo

logger = logging.getLogger(__name__)


class ManualWorkersError(FleetguiError):
    """``workers.json`` cannot be read."""


class ManualWorkers:
    """Workers the user added by address, kept in ``workers.json`` (written atomically)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.config_dir() / "workers.json"
        self._addresses: list[tuple[str, int]] = []
        self.load()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return list(self._addresses)

    def load(self) -> None:
        if not self.path.exists():
            self._addresses = []
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            entries = data["workers"]
            loaded = [(str(e["host"]), int(e["port"])) for e in entries]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ManualWorkersError(
                f"cannot read the worker list {self.path}: {exc}; fix or delete the file"
            ) from exc
        self._addresses = list(dict.fromkeys(loaded))

    def save(self) -> None:
        entries = [{"host": host, "port": port} for host, port in self._addresses]
        fsutil.atomic_write_text(self.path, json.dumps({"workers": entries}, indent=2) + "\n")

    def add(self, address: str) -> tuple[str, int]:
        """Add ``host:port`` (no-op if listed) and save."""
        entry = parse_address(address)
        if entry not in self._addresses:
            self._addresses.append(entry)
            self.save()
        return entry

    def remove(self, address: str) -> bool:
        """Forget ``host:port``; True if it was listed."""
        entry = parse_address(address)
        if entry not in self._addresses:
            return False
        self._addresses.remove(entry)
        self.save()
        return True


Prober = Callable[..., Awaitable[ProbeStatus]]  # probe_status, or a stand-in


class ManualDiscovery(Discovery):
    """Probes the listed workers every ``interval_s``; ``statuses`` says why one is not seen."""

    def __init__(
        self,
        workers: ManualWorkers | Iterable[tuple[str, int]],
        on_change: OnChange | None = None,
        *,
        interval_s: float = 5.0,  # between probe rounds
        timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,  # per probe
        probe: Prober = probe_status,  # injectable for tests
    ) -> None:
        super().__init__(on_change)
        self._source = workers
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._probe = probe
        self.statuses: dict[str, ProbeStatus] = {}
        self._task: asyncio.Task[None] | None = None

    def _targets(self) -> list[tuple[str, int]]:
        source = self._source
        return source.addresses if isinstance(source, ManualWorkers) else list(source)

    async def refresh(self) -> dict[str, ProbeStatus]:
        """Probe every listed worker once, at the same time; update and return ``statuses``."""
        targets = self._targets()
        results = await asyncio.gather(
            *(
                self._probe(host, port, self.timeout_s, last=self._last(host, port))
                for host, port in targets
            )
        )
        listed = {format_address(host, port) for host, port in targets}
        for status in results:
            self.statuses[status.address] = status
            if status.seen and status.info is not None:
                self._put(status.info)
            else:
                self._drop(status.address)
        for address in set(self.statuses) - listed:
            del self.statuses[address]
            self._drop(address)
        return dict(self.statuses)

    def _last(self, host: str, port: int) -> WorkerInfo | None:
        status = self.statuses.get(format_address(host, port))
        return status.info if status is not None else None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="manual-discovery")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:
                logger.exception("probing the listed workers failed")
            await asyncio.sleep(self.interval_s)
