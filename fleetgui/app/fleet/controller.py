"""``FleetController``: the fleet behind the fleet view, without widgets.

It owns discovery (workers advertised on the LAN through zeroconf, and workers the user added by
address, kept in ``workers.json``), probes every known worker periodically
(:meth:`~fleetgui.app.fleet.watched_worker.WatchedWorker.probe`: pins each worker's key on first
use, checks that the worker trusts this coordinator, i.e. pairing), and writes status and reason
into the :class:`~fleetgui.app.fleet.worker_table.WorkerTableModel`. While a deployment runs, the
``FleetSession``'s events (a ``LinkState``: loading, running, lost, rejoined) arrive through
:meth:`on_session_event` and take precedence over the probe's "online". Everything runs as
asyncio tasks in Qt's loop (qasync); nothing here blocks the GUI thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from fleetgui.addresses import format_address, parse_address, zmq_endpoint
from fleetgui.app.fleet import status_text
from fleetgui.app.fleet.status_text import SessionState
from fleetgui.app.fleet.watched_worker import WatchedWorker
from fleetgui.app.fleet.worker_status import WorkerStatus
from fleetgui.app.fleet.worker_table import WorkerTableModel
from fleetgui.errors import FleetguiError
from fleetgui.fleet.pairing.code_pairing import pair_with_code
from fleetgui.fleet.pairing.known_workers import KnownWorkers
from fleetgui.fleet.pairing.manual_workers import ManualWorkers
from fleetgui.fleet.profiling.this_pc import coordinator_profile
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.fleet.session.config import LinkState, WorkerLinkStatus
from fleetgui.net.discovery import Discovery, DiscoveryEvent, OnChange
from fleetgui.net.info_probe import DEFAULT_PROBE_TIMEOUT_S, WorkerStatusReason
from fleetgui.net.keys import KeyPair
from fleetgui.net.worker_info import WorkerInfo
from fleetgui.planner import DeviceProfile

if TYPE_CHECKING:  # the fleet's session modules load when a fleet deploys, not with the app
    from fleetgui.fleet.session.session import FleetSession

log = logging.getLogger(__name__)

MISSES_BEFORE_LOST = 2  # a usable worker is shown lost after this many unanswered probes in a row


@dataclass(frozen=True)
class FleetControllerConfig:
    """How the app watches the fleet."""

    probe_interval_s: float = 5.0  # between probe rounds of every known worker
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S  # per probe
    zeroconf: bool = True  # browse the LAN for advertised workers
    workers_file: Path | None = None  # workers added by address; None: the config folder's
    known_workers_file: Path | None = None  # pinned worker keys; None: the config folder's
    timings_file: Path | None = None  # this PC's measured layer times; None: the data folder's


async def browse_lan(on_change: OnChange) -> Discovery | None:
    """A started browser of the workers advertised on the LAN, or None (and a warning) when
    the LAN cannot be browsed here."""
    from fleetgui.net.discovery import ZeroconfBrowser

    browser = ZeroconfBrowser(on_change)
    try:
        await asyncio.wait_for(browser.start(), 10)
    except Exception as exc:  # no multicast here: workers can still be added by address
        log.warning("cannot browse the LAN for workers (%s); add them by address", exc)
        with contextlib.suppress(Exception):
            await browser.stop()
        return None
    return browser


class FleetController(QObject):
    """Discovery, probes, pairing and session events -> :class:`WorkerTableModel` rows."""

    usable_changed = Signal()  # a worker became usable or stopped being usable

    def __init__(
        self,
        fleet: WorkerTableModel,
        identity: KeyPair,
        config: FleetControllerConfig | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.fleet = fleet
        self.identity = identity
        self.config = config or FleetControllerConfig()
        self.known = KnownWorkers(self.config.known_workers_file)
        self.manual = ManualWorkers(self.config.workers_file)
        # the deployed session(s), set by the FleetDeployer: their heartbeats speak for workers
        self.sessions: tuple[FleetSession, ...] = ()
        self._workers: dict[str, WatchedWorker] = {}  # by address, in the order first known
        self._session_states: dict[str, SessionState] = {}  # by worker name
        self._task: asyncio.Task[None] | None = None
        self._browser: Discovery | None = None
        self._pending: set[asyncio.Task[Any]] = set()
        for host, port in self.manual.addresses:
            self._worker(host, port).manual = True

    # -- lifetime -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start browsing the LAN and probing the known workers."""
        if self.config.zeroconf:
            self._browser = await browse_lan(self._on_discovered)
        self._task = asyncio.get_running_loop().create_task(self._probe_forever(), name="probes")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._pending) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._task = None
        if self._browser is not None:
            with contextlib.suppress(Exception):
                await self._browser.stop()
            self._browser = None

    async def _probe_forever(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.config.probe_interval_s)

    # -- user actions -------------------------------------------------------------------------

    async def add_worker(self, address: str) -> None:
        """Remember ``host:port`` and probe it now; raise saying why it is not usable."""
        host, port = parse_address(address)
        self.manual.add(format_address(host, port))
        worker = self._worker(host, port)
        worker.manual = True
        await self._refresh_one(worker)
        row = self.fleet.get(worker.row) if worker.row else None
        if row is not None and not row.status.usable and row.status is not WorkerStatus.NOT_PAIRED:
            raise FleetguiError(f"worker {address}: {row}")

    async def pair(self, name: str, code: str) -> None:
        """Pair with the worker whose row is ``name``, with the code that worker shows."""
        worker = next((w for w in self._workers.values() if w.row == name), None)
        if worker is None or worker.info is None:
            raise FleetguiError(
                f"worker {name!r} has not answered yet: check that `fleetgui worker --pair` runs "
                "there, then pair again"
            )
        if not code.strip():
            raise FleetguiError(
                f"enter the pairing code worker {name!r} shows (start it with "
                "`fleetgui worker --pair`), then press Pair"
            )
        comment = f"coordinator@{socket.gethostname()}"
        await pair_with_code(self.identity, worker.info, code, comment)
        worker.paired = None
        await self._refresh_one(worker)

    def forget(self, worker: str) -> None:
        """Forget the worker whose row is ``worker`` (or whose address it is): its row, its
        place in ``workers.json`` and its pinned key go, so a dead or mistyped address does not
        stay listed for good. Raise saying why not when it is unknown or deployed on."""
        found = self._workers.get(worker) or next(
            (w for w in self._workers.values() if w.row == worker), None
        )
        if found is None:
            raise FleetguiError(f"{worker} is not a worker this PC knows: nothing to forget")
        name = found.info.name if found.info is not None else found.row
        if name is not None and self._link_status(name) is not None:
            raise FleetguiError(
                f"worker {name} runs part of the deployed model: unload it (Model & "
                "deployment) before forgetting the worker"
            )
        was_usable = self._usable(found)
        del self._workers[found.address]  # a probe under way sees this and shows nothing
        self.manual.remove(found.address)
        if found.info is not None:
            self.known.forget(found.info.address, found.info.name)
        if found.row is not None:
            self.fleet.remove(found.row)
        log.info("forgot worker %s (%s)", name or found.address, found.address)
        if was_usable:
            self.usable_changed.emit()

    # -- probing ------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Probe every known worker once, at the same time."""
        results = await asyncio.gather(
            *(self._refresh_one(w) for w in list(self._workers.values())), return_exceptions=True
        )
        for result in results:
            if isinstance(result, Exception):
                log.error("probing a worker failed", exc_info=result)

    async def _refresh_one(self, worker: WatchedWorker) -> None:
        async with worker.lock:
            probe = await worker.probe(self.known, self.identity, self.config.probe_timeout_s)
            if self._workers.get(worker.address) is not worker:
                return  # forgotten while it was probed
            info = worker.info
            if not probe.answered or info is None:
                self._show_unseen(worker, probe.reason, probe.detail)
                return
            if probe.key_changed:
                self._show(worker, info, WorkerStatus.KEY_CHANGED, probe.key_changed)
                return
            state = self._session_states.get(info.name)
            row_status, reason = status_text.seen(bool(worker.paired), state)
            self._show(worker, info, row_status, reason)

    def _show_unseen(
        self, worker: WatchedWorker, reason: WorkerStatusReason | None, detail: str
    ) -> None:
        reason = reason or WorkerStatusReason.NOT_ANSWERING
        info = worker.info or worker.placeholder()
        worker.misses += 1
        if self._linked(info.name):
            # its deployment link still gets heartbeats: a slow probe is not a lost worker
            log.info("worker %s missed a probe (%s) but answers its heartbeats", info.name, detail)
            return
        if worker.was_usable and worker.misses < MISSES_BEFORE_LOST:
            log.info("worker %s missed a probe (%s); lost if it misses the next", info.name, detail)
            return
        status, text = status_text.unseen(reason, detail, was_usable=worker.was_usable)
        state = self._session_states.get(info.name)
        if state is not None and state.status is LinkState.LOST and state.reason:
            text = f"{state.reason}; {text}"
        self._show(worker, info, status, text, seen=False)

    def _show(
        self,
        worker: WatchedWorker,
        info: WorkerInfo,
        status: WorkerStatus,
        reason: str,
        *,
        seen: bool = True,
    ) -> None:
        if worker.row is not None and worker.row != info.name:
            self.fleet.remove(worker.row)  # the address placeholder, or a renamed worker
        worker.row = info.name
        was_usable = self._usable(worker)
        old = self.fleet.get(info.name)
        if status is WorkerStatus.LOST and old is not None and old.status is not WorkerStatus.LOST:
            self.fleet.mark_lost(info.name, reason)  # once: the view says so
        else:
            self.fleet.upsert(info, status, reason, seen=seen)
        if status.usable:
            worker.was_usable = True
        if self._usable(worker) != was_usable:
            self.usable_changed.emit()

    def _linked(self, name: str) -> bool:
        """Whether the deployment has a live link to worker ``name``."""
        status = self._link_status(name)
        return status is not None and status.lost is None

    def _link_status(self, name: str) -> WorkerLinkStatus | None:
        """What the deployed session(s) know of worker ``name`` now; None without a link."""
        for session in self.sessions:  # one, or one per replica
            if name in session.workers.links:
                return session.worker_status(name)
        return None

    def _usable(self, worker: WatchedWorker) -> bool:
        row = self.fleet.get(worker.row) if worker.row else None
        return row is not None and row.status.usable and bool(worker.paired)

    # -- discovery ----------------------------------------------------------------------------

    def _worker(self, host: str, port: int) -> WatchedWorker:
        address = format_address(host, port)
        if address not in self._workers:
            self._workers[address] = WatchedWorker(host, port)
        return self._workers[address]

    def _on_discovered(self, event: DiscoveryEvent, info: WorkerInfo) -> None:
        worker = self._worker(info.host, info.port)
        if event is DiscoveryEvent.REMOVED:
            if not worker.manual and info.name not in self._session_states:
                self._workers.pop(worker.address, None)
                if worker.row is not None:
                    self.fleet.remove(worker.row)
            return
        task = asyncio.get_running_loop().create_task(self._refresh_one(worker))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    # -- the deployment -----------------------------------------------------------------------

    def usable_endpoints(self) -> list[WorkerEndpoint]:
        """The workers a deployment may use, in the order they became known."""
        return [
            WorkerEndpoint(w.info.name, zmq_endpoint(w.info.host, w.info.port), w.info.public_key)
            for w in self._workers.values()
            if w.info is not None and self._usable(w)
        ]

    def on_session_event(self, name: str, status: LinkState, reason: str) -> None:
        """A ``FleetSession`` event (``on_event``): show it in the worker's row."""
        state = SessionState(status, reason)
        self._session_states[name] = state
        worker = next((w for w in self._workers.values() if w.row == name), None)
        if worker is None or worker.info is None:
            log.debug("session event for unknown worker %s: %s", name, status)
            return
        row_status, text = status_text.from_session(state)
        self._show(worker, worker.info, row_status, text, seen=status is not LinkState.LOST)

    def session_closed(self) -> None:
        """The deployment ended: rows go back to what the probes say."""
        self.sessions = ()
        states, self._session_states = self._session_states, {}
        for worker in self._workers.values():
            if worker.info is not None and worker.info.name in states and worker.paired:
                row = self.fleet.get(worker.info.name)
                if row is not None and row.status.usable:
                    self._show(worker, worker.info, WorkerStatus.ONLINE, "")

    def device_profiles(self) -> list[DeviceProfile]:
        """This PC, then every usable worker with its free memory (from its heartbeats while
        deployed, else its last probe) and an estimated layer time (the plan preview measures
        them: :func:`fleetgui.fleet.profiling.layer_times.measure_devices`)."""
        profiles = [coordinator_profile()]
        for worker in self._workers.values():
            info = worker.info
            if info is None or not self._usable(worker):
                continue
            profile = worker.profile(self._link_status(info.name))
            if profile is not None:
                profiles.append(profile)
        return profiles
