"""What a coordinator's fleet session is configured with and reports: how to run its workers,
and each worker's status as the coordinator sees it (the workers to connect to are
:class:`~fleetgui.fleet.ring.link.WorkerEndpoint`)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetgui.fleet.ring.link import LinkConfig, WorkerLink
from fleetgui.fleet.ring.route import RouteConfig
from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.runtime.loader import LocalPipelineConfig


@dataclass(frozen=True)
class CoordinatorConfig:
    """How the coordinator runs a fleet."""

    link: LinkConfig = field(default_factory=LinkConfig)
    route: RouteConfig = field(default_factory=RouteConfig)
    wiring: Wiring = Wiring.RING  # how activations travel between workers
    local_stages: int = 1  # stages the coordinator runs itself
    local: LocalPipelineConfig = field(default_factory=LocalPipelineConfig)
    worker_threads: int = 0  # asked of workers; a worker's own --threads wins
    worker_precision: str = "auto"
    rejoin_interval_s: float = 2.0  # how often a lost worker is tried again
    # when no worker left can take a lost worker's stages, this PC runs them if its free memory
    # allows; off, the generation ends with an error instead (a PC that must stay responsive)
    local_failover: bool = True


@dataclass(frozen=True)
class WorkerLinkStatus:
    """A connected worker as the coordinator sees it."""

    name: str
    lost: str | None  # why it was lost, or None
    rtt_ms: float | None  # last heartbeat round trip
    free_ram_bytes: int | None  # from its last heartbeat
    stages: tuple[int, ...]  # the export stages it runs
    last_seen: float  # time.monotonic() of its last message

    @classmethod
    def of(cls, link: WorkerLink, stages: tuple[int, ...]) -> WorkerLinkStatus:
        """``link``'s worker now, running ``stages``."""
        free = int(link.last_status.get("free_ram_bytes", 0)) or None
        return cls(link.name, link.lost, link.rtt_ms, free, stages, link.last_seen)


class LinkState(enum.StrEnum):
    """A worker's state in a session, as its events report it (``FleetEvent``)."""

    ONLINE = "online"  # connected, holding nothing the ring uses (or a spare)
    LOADING = "loading"  # loading its stages
    BUSY = "busy"  # running its stages in the ring
    LOST = "lost"  # stopped answering; retried in the background


class LinkReason(enum.StrEnum):
    """The fixed reasons an event may give; the others are free text (why a worker was lost,
    which stages it loads)."""

    REJOINED = "rejoined"  # a lost worker answered again and is a spare now
    SPARE_AFTER_REPLANNING = "spare after re-planning"  # a rebalance left it out of the ring


FleetEvent = Callable[[str, LinkState, str], None]  # (worker name, state, reason)
