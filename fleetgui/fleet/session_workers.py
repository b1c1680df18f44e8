"""A coordinator session's workers: one link to each, opened in parallel, and what happens when
one is lost.

A lost ring member fails the requests waiting on the ring (the route then asks the session to
fail over). Every lost worker is retried in the background until it answers again; it then
rejoins the deployment as a spare, with nothing loaded that the session trusts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fleetgui.errors import FleetguiError
from fleetgui.fleet.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.fleet.session_config import LinkReason, LinkState, WorkerEndpoint
from fleetgui.net.protocol import Message, Op

if TYPE_CHECKING:
    from fleetgui.fleet.coordinator import FleetSession

log = logging.getLogger(__name__)


class SessionWorkers:
    """The links of one session (see module doc); ``order`` is the ring's order."""

    def __init__(self, session: FleetSession) -> None:
        self.session = session
        self.links: dict[str, WorkerLink] = {}
        self.order: list[str] = []  # workers in the order they were given: the ring's order
        self.endpoints: dict[str, WorkerEndpoint] = {}
        self._rejoin: dict[str, asyncio.Task[None]] = {}

    def usable(self) -> list[str]:
        """Connected workers not lost, in the ring's order."""
        return [name for name in self.order if name in self.links and not self.links[name].lost]

    def lost(self) -> list[str]:
        """Connected workers lost, in the ring's order."""
        return [name for name in self.order if name in self.links and self.links[name].lost]

    async def connect(self, endpoints: Sequence[WorkerEndpoint]) -> None:
        """Open a link to each worker (in parallel); raise the first failure, having closed
        every link, so a session is connected to all of them or to none."""
        self.order.extend(e.name for e in endpoints if e.name not in self.order)
        results = await asyncio.gather(*(self._open(e) for e in endpoints), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self.session.close()
            raise failures[0]

    async def _open(self, endpoint: WorkerEndpoint) -> WorkerLink:
        link = self._new_link(endpoint)
        try:
            await link.open()
        except BaseException:
            await link.close()
            raise
        self.links[endpoint.name] = link
        self.endpoints[endpoint.name] = endpoint
        self.session.reporter.event(endpoint.name, LinkState.ONLINE)
        return link

    def _new_link(self, endpoint: WorkerEndpoint) -> WorkerLink:
        session = self.session
        return WorkerLink(
            endpoint.name,
            endpoint.endpoint,
            endpoint.public_key,
            session.identity,
            session.dispatcher,
            config=session.config.link,
            on_lost=self._on_lost,
        )

    def _on_lost(self, link: WorkerLink, reason: str) -> None:
        self.session.reporter.event(link.name, LinkState.LOST, reason)
        ring = self.session.ring
        if ring is not None and link in ring.members:
            error = WorkerLostError(link.name, reason)
            self.session.dispatcher.fail(error, owner=Dispatcher.RING)
        if link.name not in self._rejoin:
            task = asyncio.get_running_loop().create_task(self._retry(link.name))
            self._rejoin[link.name] = task

    async def _retry(self, name: str) -> None:
        """Try a lost worker again until it answers; then it is a spare."""
        try:
            while True:
                await asyncio.sleep(self.session.config.rejoin_interval_s)
                old = self.links.get(name)
                if old is not None and not old.lost:
                    return
                try:
                    link = self._new_link(self.endpoints[name])
                    await link.open()
                except (FleetguiError, OSError) as exc:
                    log.debug("worker %s still away: %s", name, exc)
                    with contextlib.suppress(Exception):
                        await link.close()
                    continue
                if old is not None:
                    await old.close()
                self.links[name] = link
                self.session.deployment.add_spare(name)
                log.warning("worker %s is back; it rejoins as a spare", name)
                self.session.reporter.event(name, LinkState.ONLINE, LinkReason.REJOINED)
                return
        finally:
            self._rejoin.pop(name, None)

    def stop_retrying(self) -> None:
        """Give up on every lost worker (the session is closing)."""
        for task in list(self._rejoin.values()):
            task.cancel()

    async def close(self, *, unload: bool, timeout_s: float) -> None:
        """Close every link; with ``unload`` the workers not lost first drop their stages."""
        if unload:
            for link in self.links.values():
                if link.lost:
                    continue
                try:
                    await link.call(Message(Op.UNLOAD), timeout_s=timeout_s)
                except FleetguiError as exc:
                    log.warning("worker %s did not unload: %s", link.name, exc)
        for link in list(self.links.values()):
            await link.close()
        self.links.clear()
