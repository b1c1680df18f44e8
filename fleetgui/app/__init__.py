"""The coordinator's desktop app (``fleetgui gui``).

Core objects (conversations, inference, metrics, the fleet table, settings, deployment) are
QObjects without widgets that emit signals; the widgets in :mod:`fleetgui.app.views` only render
them, and the main window wires both together (the deployment and chat tabs through their
presenters, :mod:`fleetgui.app.views.deploy_presenter` and
:mod:`fleetgui.app.views.chat_presenter`). asyncio runs inside Qt's event loop through qasync, so
generation, export and deployment never block the GUI thread.

Deployment lives in :mod:`fleetgui.app.deploy`. The fleet plugs in through small interfaces
exported here (from :mod:`fleetgui.app.deploy.interfaces`): a :class:`Deployer` (deploy an export
to the fleet and return a ``Pipeline``), a :class:`DeviceSource` (device profiles the planner
preview uses) and :class:`FleetActions` (add a worker by address, pair one); the fleet code feeds
worker rows to the table model
:class:`fleetgui.app.fleet.worker_table.WorkerTableModel` with ``upsert`` and ``mark_lost``.
"""

from fleetgui.app.deploy.interfaces import (
    DeployCancelledError,
    Deployer,
    DeployRequest,
    DeployStep,
    DeviceSource,
    MeasuredDevices,
)
from fleetgui.app.fleet.actions import FleetActions, FleetUnavailableError
from fleetgui.app.fleet.worker_status import WorkerRow, WorkerStatus

__all__ = [
    "DeployCancelledError",
    "DeployRequest",
    "DeployStep",
    "Deployer",
    "DeviceSource",
    "FleetActions",
    "FleetUnavailableError",
    "MeasuredDevices",
    "WorkerRow",
    "WorkerStatus",
]
