"""``WatchedWorker``: a worker the app knows of by address, and what probing it found out.

One probe reads the worker's info record, checks its key against the one pinned on first use
and, until the worker is known to trust this coordinator, whether it does (pairing). The
:class:`~fleetgui.app.fleet.controller.FleetController` turns what a probe found into the
worker's row; :meth:`WatchedWorker.profile` is the worker as the planner preview sees it. No Qt
here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from fleetgui.addresses import format_address
from fleetgui.fleet.pairing.code_pairing import check_paired
from fleetgui.fleet.pairing.known_workers import KnownWorkers, WorkerKeyChangedError
from fleetgui.fleet.profiling.this_pc import ESTIMATED_DISK_BYTES_PER_S, ESTIMATED_MS_PER_LAYER
from fleetgui.fleet.session.config import WorkerLinkStatus
from fleetgui.net.info_probe import WorkerStatusReason, probe_status
from fleetgui.net.keys import KeyPair
from fleetgui.net.worker_info import WorkerInfo
from fleetgui.planner import DeviceProfile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe of a worker found."""

    answered: bool  # its info port and (when checked) its encrypted port answered
    reason: WorkerStatusReason | None = None  # not answered: why
    detail: str = ""  # not answered: more on why
    key_changed: str = ""  # answered with another key than the pinned one: the error


@dataclass
class WatchedWorker:
    """A worker the app knows of, by address."""

    host: str
    port: int
    manual: bool = False  # the user added it (kept in workers.json)
    info: WorkerInfo | None = None  # its last info record
    paired: bool | None = None  # trusts this coordinator; None: not checked since last seen
    hello: dict[str, Any] = field(default_factory=dict)  # its HELLO reply
    rtt_ms: float = 0.0  # round trip of a HELLO on an established encrypted link
    was_usable: bool = False  # was online at some point: failing now means lost
    misses: int = 0  # probes in a row it did not answer
    row: str | None = None  # the name of its row in the fleet model
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    def placeholder(self) -> WorkerInfo:
        """A row for a worker that never answered: named by its address."""
        return WorkerInfo(self.address, self.host, self.port, "", "", 0)

    async def probe(self, known: KnownWorkers, identity: KeyPair, timeout_s: float) -> ProbeOutcome:
        """Probe the worker once and remember what it said (its info, HELLO reply, round trip,
        whether it is paired). A new key forgets the pairing: it may be another worker."""
        status = await probe_status(self.host, self.port, timeout_s, last=self.info)
        if not status.seen or status.info is None:
            self.paired = None
            return ProbeOutcome(False, status.reason, status.detail)
        self.misses = 0
        info = status.info
        try:
            known.check(info.address, info.name, info.public_key)
        except WorkerKeyChangedError as exc:
            self.info, self.paired = info, None
            return ProbeOutcome(True, key_changed=str(exc))
        if self.info is None or self.info.public_key != info.public_key:
            self.paired = None
        self.info = info
        if self.paired is not True:
            check = await check_paired(identity, info, timeout_s)
            self.paired, self.hello = check.paired, check.hello
            if check.rtt_ms is not None:  # not the probe's time: that includes connecting
                self.rtt_ms = check.rtt_ms
            if check.error:  # the info port answers, the encrypted one does not
                self.paired = None
                return ProbeOutcome(False, WorkerStatusReason.NOT_ANSWERING, check.error)
        return ProbeOutcome(True)

    def profile(self, live: WorkerLinkStatus | None) -> DeviceProfile | None:
        """The worker for the planner: its free memory (from the deployment's heartbeats,
        ``live``, else its last probe) and an estimated layer time (the plan preview measures
        it); None when it did not say how much memory it has."""
        info = self.info
        if info is None:
            return None
        free = (live.free_ram_bytes if live else None) or int(self.hello.get("free_ram_bytes") or 0)
        memory = free or info.free_ram_bytes or info.ram_bytes
        if memory <= 0:
            log.info("worker %s did not say how much memory it has; left out", info.name)
            return None
        rtt = live.rtt_ms if live is not None and live.rtt_ms is not None else self.rtt_ms
        return DeviceProfile(
            name=info.name,
            memory_bytes=memory,
            ms_per_layer=ESTIMATED_MS_PER_LAYER,
            disk_read_bytes_per_s=ESTIMATED_DISK_BYTES_PER_S,
            rtt_ms=rtt,
        )
