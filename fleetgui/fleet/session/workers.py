"""A coordinator session's workers: one link to each, opened in parallel, and what happens when
one is lost.

A lost worker is reported and handed to ``on_lost`` (the deployment, which fails the requests
waiting on the ring if it was a ring member; the route then asks the session to fail over).
Every lost worker is retried in the background until it answers again; it then rejoins the
deployment as a spare (``on_rejoined``), with nothing loaded that the session trusts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from fleetgui.errors import FleetguiError
from fleetgui.fleet.ring.link import Dispatcher, LinkConfig, WorkerEndpoint, WorkerLink
from fleetgui.fleet.session.config import LinkReason, LinkState
from fleetgui.fleet.session.status import StatusReporter
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import Message, Op

log = logging.getLogger(__name__)


class SessionWorkers:
    """The links of one session (see module doc); ``order`` is the ring's order."""

    def __init__(
        self,
        identity: KeyPair,
        dispatcher: Dispatcher,
        config: LinkConfig,
        reporter: StatusReporter,
        *,
        rejoin_interval_s: float,
        on_lost: Callable[[WorkerLink, str], None],
        on_rejoined: Callable[[str], None],
    ) -> None:
        self.identity = identity
        self.dispatcher = dispatcher
        self.config = config
        self.reporter = reporter
        self.rejoin_interval_s = rejoin_interval_s
        self.on_lost = on_lost  # after the loss is reported, before the worker is retried
        self.on_rejoined = on_rejoined  # a lost worker answers again
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

    def connected(self) -> list[str]:
        """Connected workers, lost or not, in the ring's order."""
        return [name for name in self.order if name in self.links]

    async def connect(self, endpoints: Sequence[WorkerEndpoint]) -> list[BaseException]:
        """Open a link to each worker (in parallel); what failed (the session then closes every
        link, so that it is connected to all of them or to none)."""
        self.order.extend(e.name for e in endpoints if e.name not in self.order)
        results = await asyncio.gather(*(self._open(e) for e in endpoints), return_exceptions=True)
        return [r for r in results if isinstance(r, BaseException)]

    async def _open(self, endpoint: WorkerEndpoint) -> WorkerLink:
        link = self._new_link(endpoint)
        try:
            await link.open()
        except BaseException:
            await link.close()
            raise
        self.links[endpoint.name] = link
        self.endpoints[endpoint.name] = endpoint
        self.reporter.event(endpoint.name, LinkState.ONLINE)
        return link

    def _new_link(self, endpoint: WorkerEndpoint) -> WorkerLink:
        return WorkerLink(
            endpoint.name,
            endpoint.endpoint,
            endpoint.public_key,
            self.identity,
            self.dispatcher,
            config=self.config,
            on_lost=self._on_lost,
        )

    def _on_lost(self, link: WorkerLink, reason: str) -> None:
        self.reporter.event(link.name, LinkState.LOST, reason)
        self.on_lost(link, reason)
        if link.name not in self._rejoin:
            task = asyncio.get_running_loop().create_task(self._retry(link.name))
            self._rejoin[link.name] = task

    async def _retry(self, name: str) -> None:
        """Try a lost worker again until it answers; then it is a spare."""
        try:
            while True:
                await asyncio.sleep(self.rejoin_interval_s)
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
                self.on_rejoined(name)
                log.warning("worker %s is back; it rejoins as a spare", name)
                self.reporter.event(name, LinkState.ONLINE, LinkReason.REJOINED)
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
