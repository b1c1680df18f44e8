"""Forgetting workers (issue 39: "the fleet view fills with the dead"): the fleet view's
"Forget" (its button and the row's context menu) removes a worker's row, its place in the list
of added workers and its pinned key, on real worker processes on loopback; and the demo's app
forgets its own local workers (their ports are one run's) when it ends (and opens on the chat
once its model is deployed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import TIMEOUT_MS, App, QtBot, drive, status_of
from fleet_support import WorkerProcess
from PySide6.QtWidgets import QPushButton

from fleetgui.worker.service import free_port_pair

pytestmark = pytest.mark.slow

CLOSING_APP = Path(__file__).parents[1] / "closing_app.py"


@pytest.fixture(scope="module")
def workers(
    start_workers: Callable[..., list[WorkerProcess]],
) -> dict[str, WorkerProcess]:
    return {w.name: w for w in start_workers("f1")}


def _listed(path: Path) -> list[str]:
    """The addresses in a ``workers.json``, or the ids in a ``known_workers.json``."""
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))["workers"]
    return [f"{e['host']}:{e['port']}" for e in data] if isinstance(data, list) else list(data)


def test_forget_a_dead_address_and_a_paired_worker(
    qtbot: QtBot, app: App, workers: dict[str, WorkerProcess]
) -> None:
    view, window, controller = app.window.fleet_view, app.window, app.controller
    window.tabs.setCurrentWidget(view)
    view.views.setCurrentWidget(view.table)
    mistyped = f"127.0.0.1:{free_port_pair()}"  # nothing listens there
    for address in (workers["f1"].address, mistyped):
        view.address.setText(address)
        view.address.returnPressed.emit()
    qtbot.waitUntil(lambda: status_of(window, "f1") == "online", timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: status_of(window, mistyped).startswith("port closed"))
    # the message names the address typed, not the info port probed beside it
    qtbot.waitUntil(lambda: f"{mistyped} refused the connection" in window.messages.label.text())
    # the long message and status wrap or elide: the table's columns stay on screen
    header = view.table.horizontalHeader()

    def widths() -> list[int]:
        return [header.sectionSize(c) for c in range(header.count())]

    qtbot.waitUntil(lambda: sum(widths()) <= view.table.viewport().width())
    assert window.width() <= 1280 and not view.table.horizontalScrollBar().isVisible()
    workers_file = controller.manual.path
    assert _listed(workers_file) == [workers["f1"].address, mistyped]
    assert controller.known.pinned(workers["f1"].address, "f1")
    # "Forget selected" on the dead address
    view.select(mistyped)
    forget = next(b for b in view.findChildren(QPushButton) if b.text() == "Forget selected")
    forget.click()
    qtbot.waitUntil(lambda: app.core.fleet.row_of(mistyped) is None)
    # the context menu's "Forget f1" on the worker; this PC's row has no such menu
    assert view.forget_menu(0) is None
    row = app.core.fleet.row_of("f1")
    assert row is not None
    menu = view.forget_menu(row)
    assert menu is not None and [a.text() for a in menu.actions()] == ["Forget f1"]
    menu.actions()[0].trigger()
    qtbot.waitUntil(lambda: app.core.fleet.row_of("f1") is None)
    assert _listed(workers_file) == []
    assert controller.known.pinned(workers["f1"].address, "f1") is None
    assert controller.usable_endpoints() == []
    drive(controller.refresh())  # the next probe round does not bring them back
    assert app.core.fleet.names() == [app.core.fleet.row_at(0).name]  # this PC alone
    assert app.core.fleet.summary() == "1 PC(s) known, 1 usable"


def test_the_demo_app_forgets_its_local_workers_when_it_ends(
    start_workers: Callable[..., list[WorkerProcess]],
    tiny_export: Callable[..., Path],
    identity_dir: Path,
    tmp_path: Path,
) -> None:
    (worker,) = start_workers("d1")
    home = tmp_path / "home"
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "FLEETGUI_HOME": str(home),
        "CLOSE_APP_WHEN": "ready",
    }
    command = [sys.executable, str(CLOSING_APP), "demo-app", str(tiny_export(2))]
    done = subprocess.run(
        [*command, worker.address, str(identity_dir)],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pinned the key of worker d1" in done.stderr, done.stderr[-3000:]
    assert "deployed exp-2s" in done.stderr, done.stderr[-3000:]
    assert "open tab: Chat" in done.stderr  # the demo's model is deployed: the chat is ready
    config = home / "config"
    assert _listed(config / "workers.json") == []
    assert _listed(config / "known_workers.json") == []
