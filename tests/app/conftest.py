"""The app's fixtures: qasync's loop on the tests' QApplication, real workers by name, and the
fleet app on them (``app``: as the fleet tests drive it; ``fleet_app``: with the workers added).
Helpers that are not fixtures are in ``app_support.py`` beside this file."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from app_support import App
    from fleet_support import WorkerProcess

    from fleetgui.app.core import AppCore
    from fleetgui.app.fleet.controller import FleetController
    from fleetgui.app.views.main_window import MainWindow
    from fleetgui.net.keys import KeyPair

_LOOPS: list[asyncio.AbstractEventLoop] = []  # one per session, shared by the app test modules


@pytest.fixture(scope="session")
def qloop_session(qapp: Any) -> Iterator[asyncio.AbstractEventLoop]:
    """qasync's loop on the test's QApplication, one per session (a second qasync loop on the
    same QApplication never runs its tasks). Marked running only inside the tests that use it
    (``qloop``), so that the other tests' ``asyncio.run`` still works."""
    qasync = pytest.importorskip("qasync")
    if _LOOPS:
        yield _LOOPS[0]
        return
    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.events._set_running_loop(None)
    _LOOPS.append(loop)
    hooks = sys.get_asyncgen_hooks()
    yield loop
    _LOOPS.clear()
    sys.set_asyncgen_hooks(*hooks)
    loop.stop()
    loop.close()


@pytest.fixture(scope="module")
def qloop(qloop_session: asyncio.AbstractEventLoop) -> Iterator[asyncio.AbstractEventLoop]:
    """The session's qasync loop, running (tasks run while pytest-qt waits) for this module."""
    from fleetgui.app.application import install_asyncgen_finalizer

    loop = qloop_session
    hooks = sys.get_asyncgen_hooks()
    asyncio.set_event_loop(loop)
    asyncio.events._set_running_loop(loop)
    install_asyncgen_finalizer(loop)
    try:
        yield loop
    finally:
        sys.set_asyncgen_hooks(*hooks)
        asyncio.events._set_running_loop(None)
        asyncio.set_event_loop(None)


# -- the app on a fleet of real workers ---------------------------------------------------------


@pytest.fixture(scope="module")
def workers(start_workers: Callable[..., list[WorkerProcess]]) -> dict[str, WorkerProcess]:
    """w1 and w2, trusting the coordinator, by name; the module's own (its tests may kill
    them). A module that needs others overrides this fixture."""
    return {w.name: w for w in start_workers("w1", "w2")}


def _fleet_core(identity: KeyPair, home: Path, **options: Any) -> tuple[AppCore, FleetController]:
    """The app's core deploying on the fleet as the tests do: quick links and probes, f32."""
    from fleet_support import app_controller_config, fast_coordinator

    from fleetgui.app.fleet_app import build_fleet_core

    return build_fleet_core(
        identity,
        controller_config=app_controller_config(home),
        coordinator_config=fast_coordinator(),
        settings_path=home / "settings.json",
        history_dir=home / "chats",
        **options,
    )


@pytest.fixture(scope="module")
def app(
    qloop: asyncio.AbstractEventLoop,
    identity: KeyPair,
    root: Path,
    workers: dict[str, WorkerProcess],  # torn down after the app
) -> Iterator[App]:
    """The fleet app, its window shown, no worker added yet; this PC measured 1000 times
    slower (``SlowCoordinator``) so that plans use the workers. Every chat request and reply is
    recorded in the ``App``."""
    from app_support import App, SlowCoordinator, fleet_window

    from fleetgui.app.deploy.fleet import FleetDeployer
    from fleetgui.generation_config import GenerationConfig

    core, controller = _fleet_core(identity, root / "app_home")
    deployer = core.deployment.deployer
    assert isinstance(deployer, FleetDeployer)
    core.deployment.devices = SlowCoordinator(core.deployment.devices, factor=1000.0)
    with fleet_window(core) as window:
        state = App(core, window, controller, deployer, [], [])
        core.inference.finished.connect(lambda _, result: state.results.append(result))
        submit = core.inference.submit_chat

        def spy(messages: list[dict[str, str]], config: GenerationConfig) -> int:
            llm = core.inference.llm  # the chat format's stop strings are added as it renders
            state.requests.append((list(messages), llm.chat_config(config) if llm else config))
            return submit(messages, config)

        core.inference.submit_chat = spy  # type: ignore[method-assign]
        yield state


@pytest.fixture(scope="module")
def fleet_app(
    qloop: asyncio.AbstractEventLoop,
    identity: KeyPair,
    root: Path,
    workers: dict[str, WorkerProcess],
) -> Iterator[tuple[AppCore, MainWindow, FleetController]]:
    """The fleet app, its window shown, with the module's ``workers`` added by address (this PC
    as measured: a deployment without a plan puts a stage on each worker), once they are usable
    and the window has had the time to show them (the fleet picture is redrawn at most every
    ``UPDATE_INTERVAL_MS``)."""
    from app_support import TIMEOUT_MS, drive, fleet_window

    from fleetgui.app.fleet.topology_feed import UPDATE_INTERVAL_MS

    core, controller = _fleet_core(identity, root / "app_home")
    with fleet_window(core) as window:
        for worker in workers.values():
            drive(core.fleet_actions.add_worker(worker.address))

        async def settled() -> None:
            while len(controller.usable_endpoints()) < len(workers):
                await asyncio.sleep(0.05)
            await asyncio.sleep(2 * UPDATE_INTERVAL_MS / 1000)

        drive(settled(), timeout_s=TIMEOUT_MS / 1000)
        yield core, window, controller
