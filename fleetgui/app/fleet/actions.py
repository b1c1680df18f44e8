"""What the user can ask of the fleet from the fleet view. The fleet package implements
:class:`FleetActions`; until it lands, :class:`NoFleet` says so."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)


class FleetUnavailableError(FleetguiError):
    """This version has no fleet yet."""


class FleetActions(ABC):
    """User actions on workers; results show up in the ``WorkerTableModel`` (``upsert``)."""

    @abstractmethod
    async def add_worker(self, address: str) -> None:
        """Probe ``host:port`` and add the worker; raise a ``FleetguiError`` saying why not."""

    @abstractmethod
    async def pair(self, name: str, code: str) -> None:
        """Pair with worker ``name`` using the one-time code it shows."""

    @abstractmethod
    async def forget_worker(self, name: str) -> None:
        """Forget worker ``name`` (a row's name, or an address): its row, its place in the
        list of added workers and its pinned key; raise a ``FleetguiError`` saying why not."""

    async def start(self) -> None:  # noqa: B027 (optional hook)
        """Start watching the fleet (called once the app's loop runs)."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Stop watching the fleet and release what is connected."""


class NoFleet(FleetActions):
    """No fleet in this version: every stage runs on this PC."""

    MESSAGE = (
        "fleet workers are not available in this version yet: deploy on this PC (Model & "
        "deployment, Deploy) to run every stage here"
    )

    async def add_worker(self, address: str) -> None:
        raise FleetUnavailableError(self.MESSAGE)

    async def pair(self, name: str, code: str) -> None:
        raise FleetUnavailableError(self.MESSAGE)

    async def forget_worker(self, name: str) -> None:
        raise FleetUnavailableError(self.MESSAGE)
